//! `--allow-net` through the `pycage` binary: `run --json` and `repl --json`
//! reach real HTTP and HTTPS servers on the host's 127.0.0.1 (the runtime
//! crate's `tests/fixtures/egress`) and report every connection; another
//! port is refused; process isolation refuses the flag. As root, `run`
//! again as `nobody`.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use support::{assert_exit, pycage, stderr, stdout};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../pycage-runtime/tests/fixtures/egress")
}

/// The test servers: killed (and reaped) when dropped.
struct Servers {
    child: Child,
    http: u16,
    https: u16,
    /// A port of the host that listens but is not allowed.
    other: std::net::TcpListener,
}

impl Servers {
    fn start() -> Servers {
        let mut child = Command::new("python3")
            .arg(fixtures().join("server.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 for the test servers");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let ports: Vec<u16> = line.split_whitespace().skip(1).map(|p| p.parse().unwrap()).collect();
        assert_eq!(ports.len(), 2, "server said {line:?}");
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        other.set_nonblocking(true).unwrap();
        Servers { child, http: ports[0], https: ports[1], other }
    }

    fn other_port(&self) -> u16 {
        self.other.local_addr().unwrap().port()
    }

    fn allow(&self) -> [String; 4] {
        [
            "--allow-net".into(),
            format!("127.0.0.1:{}", self.http),
            "--allow-net".into(),
            format!("127.0.0.1:{}", self.https),
        ]
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory any user can work in, holding the test CA as `ca.pem`.
fn work_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("pycage-cli-egress-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::copy(fixtures().join("ca.pem"), dir.path().join("ca.pem")).unwrap();
    dir
}

fn program(s: &Servers) -> String {
    format!(
        "import json, ssl, urllib.request\n\
         ctx = ssl.create_default_context(cafile='ca.pem')\n\
         a = json.loads(urllib.request.urlopen('http://127.0.0.1:{http}/a', timeout=20).read())\n\
         b = json.loads(urllib.request.urlopen('https://127.0.0.1:{https}/b', context=ctx, timeout=20).read())\n\
         try:\n    urllib.request.urlopen('http://127.0.0.1:{other}/', timeout=20)\n    c = 'reached'\n\
         except Exception as e:\n    c = str(e)\n\
         return [a['path'], b['tls'], c]",
        http = s.http,
        https = s.https,
        other = s.other_port(),
    )
}

fn check_run(o: &Output, s: &Servers) {
    assert_exit(o, 0);
    let out = stdout(o);
    let other = s.other_port();
    assert!(s.other.accept().is_err(), "the run connected to a port it was not allowed");
    assert!(
        out.starts_with(&format!(
            "{{\"value\":[\"/a\",true,\"HTTP Error 403: pycage egress: port {other} of 127.0.0.1 is not on the allow-list (allowed: {}, {})\"],\"logs\":[],\"network\":{{\"connections\":[{{\"method\":\"GET\",\"host\":\"127.0.0.1\",\"port\":{},\"allowed\":true,",
            s.http, s.https, s.http
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{{\"method\":\"CONNECT\",\"host\":\"127.0.0.1\",\"port\":{},\"allowed\":true,",
            s.https
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("{{\"method\":\"GET\",\"host\":\"127.0.0.1\",\"port\":{other},\"allowed\":false,\"bytes_up\":0,\"bytes_down\":0,\"reason\":\"pycage egress: port {other}")),
        "{out}"
    );
    assert!(out.ends_with(",\"refused_over_budget\":0}}\n"), "{out}");
}

#[test]
fn run_json_reports_every_connection() {
    let servers = Servers::start();
    let dir = work_dir();
    let o = pycage(dir.path())
        .args(["run", "--json", "--isolation", "sandbox", "--input", "ca.pem"])
        .args(servers.allow())
        .args(["-c", &program(&servers)])
        .output()
        .unwrap();
    check_run(&o, &servers);
}

#[test]
fn repl_json_reports_each_cell() {
    let servers = Servers::start();
    let dir = work_dir();
    let mut child = pycage(dir.path())
        .args(["repl", "--json", "--isolation", "sandbox"])
        .args(servers.allow())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let fetch = format!(
        "import urllib.request\nreturn len(urllib.request.urlopen('http://127.0.0.1:{}/cell', timeout=20).read()) > 0",
        servers.http
    );
    let request = format!("{{\"program\": {fetch:?}}}\n");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        stdin.write_all(request.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let line = lines.next().unwrap().unwrap();
        assert!(
            line.starts_with(&format!(
                "{{\"value\":true,\"logs\":[],\"network\":{{\"connections\":[{{\"method\":\"GET\",\"host\":\"127.0.0.1\",\"port\":{},\"allowed\":true,",
                servers.http
            )),
            "{line}"
        );
        assert_eq!(line.matches("\"method\"").count(), 1, "one connection per cell: {line}");
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn process_isolation_refuses_allow_net() {
    let dir = tempfile::tempdir().unwrap();
    let o = pycage(dir.path())
        .args(["run", "--json", "--isolation", "process", "--allow-net", "example.com", "-c", "return 1"])
        .output()
        .unwrap();
    assert_exit(&o, 2);
    assert!(
        stdout(&o).starts_with("{\"logs\":[],\"error\":{\"kind\":\"misuse\",\"message\":\"--allow-net cannot be enforced with --isolation process"),
        "{}",
        stdout(&o)
    );
    let o = pycage(dir.path()).args(["run", "--allow-net", "*.example.com", "-c", "return 1"]).output().unwrap();
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("wildcards are not supported"), "{}", stderr(&o));
}

#[test]
fn run_json_reports_every_connection_as_an_unprivileged_user() {
    if !rustix::process::geteuid().is_root() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let servers = Servers::start();
    let dir = work_dir();
    let o = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_pycage"))
        .args(["run", "--json", "--python", "/usr/bin/python3", "--input", "ca.pem"])
        .args(servers.allow())
        .args(["-c", &program(&servers)])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TMPDIR", dir.path())
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("setpriv (util-linux)");
    check_run(&o, &servers);
}
