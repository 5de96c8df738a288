//! A sandbox without network still behaves like a normal system for what
//! needs no network, and its `python3` is the run's interpreter: checked in
//! both isolations, through both spawn modes.
#![allow(clippy::unwrap_used)]

use pycage_runtime::*;

const PROGRAM: &str = r#"
import mimetypes, socket, ssl, subprocess, sys
ctx = ssl.create_default_context()
out = {
    "python3": subprocess.run(["python3", "-c", "import sys; print(sys.version)"], capture_output=True, text=True).stdout.strip() == sys.version,
    "executable": subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout.strip(),
    "ca_certs": ctx.cert_store_stats()["x509_ca"] > 0,
    "mime": [mimetypes.guess_type("a." + ext)[0] for ext in ("xlsx", "docx", "md", "webp")],
    "https_port": socket.getservbyname("https", "tcp"),
    "tcp_proto": socket.getprotobyname("tcp"),
}
return out
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_is_complete_and_python3_is_the_runs() {
    let mut isolations = vec![Isolation::Process];
    if pycage_sandbox::probe().missing().is_empty() {
        isolations.push(Isolation::Sandbox);
    } else {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
    }
    let want = concat!(
        r#"{"python3":true,"executable":"42","ca_certs":true,"#,
        r#""mime":["application/vnd.openxmlformats-officedocument.spreadsheetml.sheet","#,
        r#""application/vnd.openxmlformats-officedocument.wordprocessingml.document","text/markdown","image/webp"],"#,
        r#""https_port":443,"tcp_proto":6}"#
    );
    for isolation in isolations {
        for spawn in [SpawnMode::Exec, SpawnMode::Zygote] {
            let rt = Runtime::new(RuntimeConfig { isolation, spawn, ..RuntimeConfig::default() }).unwrap();
            let r = rt.run(RunRequest::new(PROGRAM)).await.unwrap();
            rt.shutdown().await;
            assert!(r.error.is_none(), "{isolation:?}/{spawn:?}: {r:?}");
            assert_eq!(r.value.unwrap().to_canonical_string(), want, "{isolation:?}/{spawn:?}");
        }
    }
}
