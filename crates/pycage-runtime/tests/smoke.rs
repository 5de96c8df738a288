use pycage_runtime::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke() {
    let mut c = RuntimeConfig::default();
    c.isolation = Isolation::Process;
    let rt = Runtime::new(c).unwrap();
    let tools = Namespace::new("tools").with_function("echo", Binding::new(|a| async move { Ok(a) }));
    for p in ["return 1", "print('hi'); import os; os.write(1, b'raw\\n'); return await tools.echo({'a': [1, 2**100, -0.0]})", "1/0", "return float('nan')", "import os; os._exit(3)"] {
        let t = std::time::Instant::now();
        let r = rt.run(RunRequest::new(p).with_namespace(tools.clone())).await.unwrap();
        eprintln!("{:?} {:?}", t.elapsed(), r);
    }
    rt.shutdown().await;
}
