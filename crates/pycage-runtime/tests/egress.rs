//! The egress allow-list, end to end: real HTTP and HTTPS servers on the
//! host's 127.0.0.1 (`tests/fixtures/egress/server.py`, a certificate of a
//! test CA), sandboxed runs that reach them through the host's proxy with
//! `urllib` and `http.client` written as a user would, and what is refused:
//! another port, another name, raw and UDP sockets, direct connections,
//! DNS; the connection and byte budgets; the report of every connection.
//! Through the zygote and by exec; as root, again as `nobody` (`setpriv`)
//! with `/usr/bin/python3`.
#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stderr)]
mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use pycage_runtime::*;

/// The test servers: killed (and reaped) when dropped.
struct Servers {
    child: Child,
    http: u16,
    https: u16,
}

impl Servers {
    fn start() -> Servers {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/egress/server.py");
        let python = std::env::var_os("PYCAGE_TEST_PYTHON").unwrap_or_else(|| "python3".into());
        let mut child = Command::new(python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 for the test servers");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let ports: Vec<u16> = line.split_whitespace().skip(1).map(|p| p.parse().unwrap()).collect();
        assert_eq!(ports.len(), 2, "server said {line:?}");
        Servers { child, http: ports[0], https: ports[1] }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test CA, copied where any user can read it (the run sees it at the
/// same path, through `allow_read`).
fn ca_file(dir: &Path) -> PathBuf {
    let ca = dir.join("ca.pem");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/egress/ca.pem"), &ca).unwrap();
    ca
}

fn config(spawn: SpawnMode, allow: &[String], ca: &Path) -> RuntimeConfig {
    RuntimeConfig {
        isolation: Isolation::Sandbox,
        python: std::env::var_os("PYCAGE_TEST_PYTHON").map(PathBuf::from),
        spawn,
        pool_size: 1,
        allow_net: allow.iter().map(|a| a.parse().unwrap()).collect(),
        allow_read: vec![ca.to_path_buf()],
        // Each mode's runs lease uids of their own range (root hosts).
        sandbox_uid_base: match spawn {
            SpawnMode::Zygote => 2_300_000,
            SpawnMode::Exec => 2_310_000,
        },
        sandbox_uid_count: 10_000,
        ..RuntimeConfig::default()
    }
}

fn value(r: &RunResult) -> JsonValue {
    assert!(r.error.is_none(), "run failed: {:?}\nlogs: {:?}", r.error, r.logs);
    r.value.clone().unwrap()
}

const MAIN: &str = r#"
import errno, http.client, json, os, socket, ssl, urllib.error, urllib.parse, urllib.request
HTTP, HTTPS, CLOSED, CA = __PORTS__
ctx = ssl.create_default_context(cafile=CA)
out = {}

def get(url, **kw):
    with urllib.request.urlopen(url, timeout=20, **kw) as r:
        return json.loads(r.read())

def error(f):
    try:
        f()
        return 'no error'
    except Exception as e:
        return f'{type(e).__name__}: {e}'

out['urllib_http'] = get(f'http://127.0.0.1:{HTTP}/plain?q=1')
out['urllib_https'] = get(f'https://127.0.0.1:{HTTPS}/secure', context=ctx)

proxy = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])
c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx, timeout=20)
c.set_tunnel('127.0.0.1', HTTPS)
c.request('POST', '/post', body=b'abc')
out['http_client_tls'] = json.loads(c.getresponse().read())
c.close()
c = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
c.request('GET', f'http://127.0.0.1:{HTTP}/via-http-client', headers={'Proxy-Authorization': 'secret'})
r = c.getresponse()
out['http_client_plain'] = json.loads(r.read())
c.close()

out['other_port'] = error(lambda: get(f'http://127.0.0.1:{CLOSED}/'))
out['other_name'] = error(lambda: get(f'https://localhost:{HTTPS}/', context=ctx))
out['other_name_plain'] = error(lambda: get(f'http://localhost:{HTTP}/'))

def make(*args):
    try:
        socket.socket(*args).close()
        return 'made'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))

out['raw'] = make(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
out['udp'] = make(socket.AF_INET, socket.SOCK_DGRAM)
out['ipv6'] = make(socket.AF_INET6, socket.SOCK_STREAM)
out['packet'] = make(socket.AF_PACKET, socket.SOCK_RAW)
out['netlink'] = make(socket.AF_NETLINK, socket.SOCK_RAW)

def connect(address):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(address)
        return 'connected'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()

out['direct_host_port'] = connect(('127.0.0.1', HTTP))
out['direct_remote'] = connect(('192.0.2.1', 443))
out['dns'] = error(lambda: socket.getaddrinfo('example.com', 443))
out['proxy_env'] = [os.environ.get(k) for k in ('HTTP_PROXY', 'https_proxy', 'NO_PROXY')]
return out
"#;

/// What a program may send the proxy by hand: each answered with a status
/// line that says what was wrong, and none of them holding up the others
/// (one connection stays silent throughout).
const HOSTILE: &str = r#"
import socket
HTTP = __HTTP__
def status(data):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=20)
    s.sendall(data)
    line = s.makefile('rb').readline()
    s.close()
    return line.decode().strip()
silent = socket.create_connection(('127.0.0.1', 3128), timeout=20)
url = b'http://127.0.0.1:%d' % HTTP
out = [
    status(b'GET / HTTP/1.1\r\nHost: x\r\n\r\n'),
    status(b'hello\r\n\r\n'),
    status(b'CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n'),
    status(b'GET http://user:pw@127.0.0.1:%d/ HTTP/1.1\r\n\r\n' % HTTP),
    status(b'GET ' + url + b'/ HTTP/1.1\r\nX: ' + b'a' * 20000 + b'\r\n\r\n'),
    status(b'GET ' + url + b'/ HTTP/1.1\r\n' + b'X: a\r\n' * 100 + b'\r\n'),
    status(b'GET ' + url + b'/ok HTTP/1.1\r\n\r\n'),
]
silent.close()
return out
"#;

async fn suite(spawn: SpawnMode) {
    let servers = Servers::start();
    // A port of the host that is listening but not allowed: nothing of the
    // run may ever connect to it.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    closed.set_nonblocking(true).unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(dir.path());
    let allow = [format!("127.0.0.1:{}", servers.http), format!("127.0.0.1:{}", servers.https)];
    let rt = Runtime::new(config(spawn, &allow, &ca)).unwrap();
    assert_eq!(rt.spawn_mode(), (spawn, None));

    let program = MAIN.replace(
        "__PORTS__",
        &format!("{}, {}, {}, {:?}", servers.http, servers.https, closed_port, ca.display().to_string()),
    );
    let r = rt.run(RunRequest::new(program)).await.unwrap();
    let v = value(&r);
    let text = |key: &str| v.root().get(key).map(|n| n.to_owned().to_canonical_string()).unwrap_or_default();

    // Allowed, with the standard library as a user writes it.
    let plain = text("urllib_http");
    assert!(plain.contains("\"path\":\"/plain?q=1\"") && plain.contains("\"tls\":false"), "{plain}");
    assert!(plain.contains(&format!("\"host\":\"127.0.0.1:{}\"", servers.http)), "{plain}");
    let secure = text("urllib_https");
    assert!(secure.contains("\"tls\":true") && secure.contains("\"path\":\"/secure\""), "{secure}");
    let tls = text("http_client_tls");
    assert!(tls.contains("\"method\":\"POST\"") && tls.contains("\"body\":3") && tls.contains("\"tls\":true"), "{tls}");
    let via = text("http_client_plain");
    assert!(via.contains("\"path\":\"/via-http-client\"") && via.contains("\"proxy_headers\":[]"), "{via}");

    // Refused, with an error that says why.
    let other_port = text("other_port");
    assert!(
        other_port.contains("HTTPError: HTTP Error 403: pycage egress: port")
            && other_port.contains(&format!("{closed_port} of 127.0.0.1 is not on the allow-list")),
        "{other_port}"
    );
    let other_name = text("other_name");
    assert!(
        other_name.contains("Tunnel connection failed: 403 pycage egress: localhost is not on the allow-list"),
        "{other_name}"
    );
    let other_name_plain = text("other_name_plain");
    assert!(other_name_plain.contains("403: pycage egress: localhost is not on the allow-list"), "{other_name_plain}");

    // Everything but TCP to the proxy is as closed as without egress.
    for (key, expected) in [
        ("raw", "\"EPERM\""),
        ("udp", "\"EPERM\""),
        ("ipv6", "\"EPERM\""),
        ("packet", "\"EPERM\""),
        ("netlink", "\"EPERM\""),
    ] {
        assert_eq!(text(key), expected, "{key}");
    }
    // The run's own loopback, where nothing but the proxy listens, and no
    // route elsewhere; with Landlock ABI 4+ (Linux 6.7) no TCP connection
    // to another port is even attempted.
    let direct = [text("direct_host_port"), text("direct_remote")];
    assert!(direct == ["\"EACCES\"", "\"EACCES\""] || direct == ["\"ECONNREFUSED\"", "\"ENETUNREACH\""], "{direct:?}");
    assert!(text("dns").contains("gaierror"), "{}", text("dns"));
    assert_eq!(text("proxy_env"), "[\"http://127.0.0.1:3128\",\"http://127.0.0.1:3128\",\"\"]");
    assert!(closed.accept().is_err(), "a run connected to a port it was not allowed");

    // Every connection is in the result, in order.
    let network = r.network.as_ref().expect("a network report");
    let seen: Vec<(String, String, u16, bool)> =
        network.connections.iter().map(|c| (c.method.clone(), c.host.clone(), c.port, c.allowed)).collect();
    let local = "127.0.0.1".to_owned();
    assert_eq!(
        seen,
        vec![
            ("GET".into(), local.clone(), servers.http, true),
            ("CONNECT".into(), local.clone(), servers.https, true),
            ("CONNECT".into(), local.clone(), servers.https, true),
            ("GET".into(), local.clone(), servers.http, true),
            ("GET".into(), local.clone(), closed_port, false),
            ("CONNECT".into(), "localhost".into(), servers.https, false),
            ("GET".into(), "localhost".into(), servers.http, false),
        ]
    );
    for c in &network.connections {
        if c.allowed {
            assert!(c.bytes_up > 0 && c.bytes_down > 0, "{c:?}");
        } else {
            assert_eq!((c.bytes_up, c.bytes_down), (0, 0), "{c:?}");
            assert!(c.reason.as_deref().unwrap_or_default().contains("is not on the allow-list"), "{c:?}");
        }
    }
    let sum = |f: fn(&Connection) -> u64| network.connections.iter().map(f).sum::<u64>();
    assert_eq!((network.bytes_up, network.bytes_down), (sum(|c| c.bytes_up), sum(|c| c.bytes_down)));
    assert_eq!((network.refused_over_budget, network.budget_exceeded), (0, None));
    let json = r.to_json().to_canonical_string();
    assert!(json.contains("\"network\":{\"connections\":[{\"method\":\"GET\",\"host\":\"127.0.0.1\""), "{json}");

    let r = rt.run(RunRequest::new(HOSTILE.replace("__HTTP__", &servers.http.to_string()))).await.unwrap();
    let got: Vec<String> =
        value(&r).root().as_array().unwrap().map(|line| line.as_str().unwrap_or_default().to_owned()).collect();
    let expected = [
        "HTTP/1.1 400 pycage egress: this is an HTTP proxy; send CONNECT HOST:PORT or an absolute http:// URL",
        "HTTP/1.1 400 pycage egress: not an HTTP request",
        "HTTP/1.1 400 pycage egress: CONNECT needs HOST:PORT",
        "HTTP/1.1 400 pycage egress: credentials in the URL are not sent on",
        "HTTP/1.1 431 pycage egress: the request head is over 16384 bytes",
        "HTTP/1.1 431 pycage egress: the request has over 64 headers",
        "HTTP/1.1 200 OK",
    ];
    assert_eq!(got.len(), expected.len(), "{got:?}");
    for (line, prefix) in got.iter().zip(expected) {
        assert!(line.starts_with(prefix), "{line:?} does not start with {prefix:?}");
    }
    let network = r.network.as_ref().unwrap();
    assert_eq!(network.connections.len(), 8, "{network:?}");
    let silent = &network.connections[0];
    assert_eq!((silent.method.as_str(), silent.allowed), ("", false), "{silent:?}");
    // Closed by the program just before it returned: the proxy may see the
    // end of stream first, or the run's settling.
    let why = silent.reason.as_deref().unwrap_or_default();
    assert!(why.contains("closed before a complete request") || why == "cut: the run settled", "{silent:?}");

    // A session's cells are reported one by one.
    let session = rt.session(SessionOptions::default()).unwrap();
    let fetch = format!(
        "import urllib.request\nreturn len(urllib.request.urlopen('http://127.0.0.1:{}/cell', timeout=20).read())",
        servers.http
    );
    for _ in 0..2 {
        let cell = session.run(fetch.clone()).await.unwrap();
        assert!(cell.error.is_none(), "{cell:?}");
        let report = cell.network.as_ref().unwrap();
        assert_eq!(report.connections.len(), 1, "{report:?}");
        assert!(report.connections[0].allowed);
    }
    session.close().await;
    rt.shutdown().await;

    budgets(spawn, &servers, &ca).await;
    drop(servers);
}

async fn budgets(spawn: SpawnMode, servers: &Servers, ca: &Path) {
    let allow = [format!("127.0.0.1:{}", servers.http)];
    let mut c = config(spawn, &allow, ca);
    c.max_net_connections = 2;
    c.max_net_bytes = 20_000;
    let rt = Runtime::new(c).unwrap();

    // Connections: two are served, the others refused at once.
    let program = format!(
        "import urllib.request\nout = []\nfor i in range(4):\n    try:\n        out.append(len(urllib.request.urlopen('http://127.0.0.1:{}/n', timeout=20).read()) > 0)\n    except Exception as e:\n        out.append(f'{{type(e).__name__}}: {{e}}')\nreturn out",
        servers.http
    );
    let r = rt.run(RunRequest::new(program)).await.unwrap();
    let got = r.value.as_ref().map(|v| v.to_canonical_string()).unwrap_or_default();
    assert!(got.starts_with("[true,true,\""), "{got} {:?}", r.error);
    assert!(!got.contains("true,true,true"), "{got}");
    assert!(
        got.contains("HTTP Error 429: pycage egress: the run's connection budget (max_net_connections = 2) is spent"),
        "{got}"
    );
    let network = r.network.as_ref().unwrap();
    assert_eq!(network.connections.len(), 2);
    assert_eq!((network.refused_over_budget, network.budget_exceeded), (2, Some(NetBudget::Connections)));

    // Bytes: the transfer that crosses the budget is cut exactly there,
    // and the next connection is refused.
    let program = format!(
        "import urllib.request\nout = []\nfor n in (200000, 10):\n    try:\n        out.append(len(urllib.request.urlopen('http://127.0.0.1:{}/big?n=' + str(n), timeout=20).read()))\n    except Exception as e:\n        out.append(type(e).__name__ + ': ' + str(e)[:60])\nreturn out",
        servers.http
    );
    let r = rt.run(RunRequest::new(program)).await.unwrap();
    let got = r.value.as_ref().map(|v| v.to_canonical_string()).unwrap_or_default();
    assert!(got.contains("IncompleteRead"), "{got} {:?}", r.error);
    assert!(got.contains("HTTP Error 429: pycage egress: the run's network byte budget"), "{got}");
    let network = r.network.as_ref().unwrap();
    assert_eq!(network.bytes_up + network.bytes_down, 20_000, "{network:?}");
    assert_eq!(network.budget_exceeded, Some(NetBudget::Bytes));
    let first = &network.connections[0];
    assert!(first.reason.as_deref().unwrap_or_default().contains("max_net_bytes = 20000"), "{first:?}");
    assert_eq!(network.connections.len(), 2);
    rt.shutdown().await;
}

#[test]
fn egress_through_the_allow_list() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(suite(SpawnMode::Zygote));
    rt.block_on(suite(SpawnMode::Exec));
}

#[test]
fn egress_through_the_allow_list_as_an_unprivileged_user() {
    common::rerun_as_nobody("egress_through_the_allow_list");
}

#[test]
fn process_isolation_refuses_an_allow_list() {
    let config = RuntimeConfig {
        isolation: Isolation::Process,
        allow_net: vec!["example.com".parse().unwrap()],
        ..RuntimeConfig::default()
    };
    let e = Runtime::new(config).err().expect("refused");
    let text = e.to_string();
    assert!(text.contains("allow_net cannot be enforced under process isolation"), "{text}");
}

#[test]
fn without_an_allow_list_there_is_no_report_and_no_socket() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let ca = ca_file(dir.path());
        let rt = Runtime::new(config(SpawnMode::Exec, &[], &ca)).unwrap();
        let r = rt
            .run(RunRequest::new(
                "import os, socket\ntry:\n    socket.socket()\n    s = 'made'\nexcept OSError as e:\n    s = type(e).__name__\nreturn [s, os.environ.get('HTTPS_PROXY'), os.path.exists('/etc/ssl')]",
            ))
            .await
            .unwrap();
        // The TLS roots are shown always (the standard library reads them).
        assert_eq!(r.value.unwrap().to_canonical_string(), "[\"PermissionError\",null,true]");
        assert_eq!(r.network, None);
        rt.shutdown().await;
    });
}
