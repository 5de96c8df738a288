//! Threads are not memory: a program with many threads runs at the default
//! budgets, in both isolations (RLIMIT_AS is a backstop well above the
//! memory budget; the sandbox's RLIMIT_NPROC counts threads too).
#![allow(clippy::unwrap_used)]

use pycage_runtime::*;

const THREAD_POOL: &str = r#"
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(32) as pool:
    return sum(pool.map(lambda x: x * x, range(1000)))
"#;

const MANY_THREADS: &str = r#"
import threading
barrier = threading.Barrier(201)
def work():
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(200)]
for t in threads:
    t.start()
barrier.wait()
for t in threads:
    t.join()
return len(threads)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_threads_run_at_default_budgets() {
    let mut isolations = vec![Isolation::Process];
    if pycage_sandbox::probe().missing().is_empty() {
        isolations.push(Isolation::Sandbox);
    } else {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
    }
    for isolation in isolations {
        let rt = Runtime::new(RuntimeConfig { isolation, ..RuntimeConfig::default() }).unwrap();
        for (program, want) in [(THREAD_POOL, "332833500"), (MANY_THREADS, "200")] {
            let r = rt.run(RunRequest::new(program)).await.unwrap();
            assert!(r.error.is_none(), "{isolation:?}: {r:?}");
            assert_eq!(r.value.unwrap().to_canonical_string(), want, "{isolation:?}");
        }
        rt.shutdown().await;
    }
}
