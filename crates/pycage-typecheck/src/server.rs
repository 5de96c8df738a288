//! One `ty server` process: started in a workspace of its own, spoken to
//! over the language-server protocol on its stdin and stdout, killed when
//! dropped.
//!
//! It gets a clear environment (no `HOME`, so no user configuration; no
//! `VIRTUAL_ENV`: the environment is the workspace's `ty.toml`), its own
//! process group, and an address-space limit (`prlimit` right after the
//! spawn). A reader task takes its answers (bounded: `crate::lsp`) and
//! hands each to the request that waits for it; requests the server makes
//! are answered with `null`. When its output ends, every request waiting
//! fails with what it last wrote on stderr.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::lsp;

/// Bytes of the server's stderr kept for the message when it dies.
const STDERR_TAIL: usize = 2048;

/// Why the server cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerError {
    /// `ty server` could not be started.
    #[error("could not start `{ty} server`: {why}")]
    Start { ty: String, why: String },
    /// The process is gone (it exited, was killed, or wrote something
    /// that is not the protocol); the text says what it last said.
    #[error("the type checker (ty server) stopped: {0}")]
    Gone(String),
    /// The server answered a request with an error.
    #[error("the type checker (ty server) refused `{method}`: {message}")]
    Refused { method: String, message: String },
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// A running `ty server`.
pub(crate) struct Server {
    /// Which start of the runtime's checker this is (documents are open
    /// on one server only).
    pub generation: u64,
    /// Whether its positions count UTF-16 units (else characters).
    pub utf16: bool,
    child: Mutex<Option<tokio::process::Child>>,
    pid: Option<i32>,
    out: mpsc::UnboundedSender<Vec<u8>>,
    waiters: Waiters,
    next_id: AtomicU64,
    gone: CancellationToken,
    why: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `ty server` in `workspace` (which holds its `ty.toml`) and
    /// initializes it.
    pub async fn start(ty: &Path, workspace: &Path, memory_bytes: u64, generation: u64) -> Result<Server, ServerError> {
        let start_error = |why: String| ServerError::Start { ty: ty.display().to_string(), why };
        let mut cmd = tokio::process::Command::new(ty);
        cmd.arg("server")
            .current_dir(workspace)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| start_error(e.to_string()))?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        if let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) {
            let limit = rustix::process::Rlimit { current: Some(memory_bytes), maximum: Some(memory_bytes) };
            if let Err(e) = rustix::process::prlimit(Some(pid), rustix::process::Resource::As, limit) {
                let _ = child.start_kill();
                return Err(start_error(format!("could not limit its memory: {e}")));
            }
        }
        let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(start_error("its pipes were not made".into()));
        };
        let (out, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let gone = CancellationToken::new();
        let why = Arc::new(Mutex::new(String::new()));
        let waiters: Waiters = Arc::default();
        // Writer: frames in order; a write that fails means the process is gone.
        let writer_gone = gone.clone();
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if stdin.write_all(&frame).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            writer_gone.cancel();
        });
        // Stderr: the tail, for the message when it dies.
        let tail = Arc::clone(&why);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = lock(&tail);
                t.push_str(&String::from_utf8_lossy(buf.get(..n).unwrap_or_default()));
                if t.len() > STDERR_TAIL {
                    let cut = t.len() - STDERR_TAIL;
                    let cut = (cut..t.len()).find(|i| t.is_char_boundary(*i)).unwrap_or(t.len());
                    t.drain(..cut);
                }
            }
        });
        // Reader: answers to their waiters, the server's requests answered.
        let (reader_gone, reader_waiters, reader_out) = (gone.clone(), Arc::clone(&waiters), out.clone());
        tokio::spawn(async move {
            let mut decoder = lsp::Decoder::default();
            let mut buf = vec![0u8; 64 * 1024];
            'read: loop {
                let n = tokio::select! {
                    read = stdout.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    },
                    _ = reader_gone.cancelled() => break,
                };
                decoder.push(buf.get(..n).unwrap_or_default());
                loop {
                    match decoder.next_body() {
                        Ok(Some(body)) => dispatch(&body, &reader_waiters, &reader_out),
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!("the type checker's output is not the protocol: {e}");
                            break 'read;
                        }
                    }
                }
            }
            reader_gone.cancel();
            // Whoever still waits learns it now.
            let waiting: Vec<_> = lock(&reader_waiters).drain().collect();
            for (_, tx) in waiting {
                let _ = tx.send(Err(String::new()));
            }
        });
        let mut server = Server {
            generation,
            utf16: true,
            child: Mutex::new(Some(child)),
            pid,
            out,
            waiters,
            next_id: AtomicU64::new(1),
            gone,
            why,
        };
        let root = file_uri(workspace);
        let init = server
            .request(
                "initialize",
                json!({
                    "processId": std::process::id(),
                    "rootUri": root,
                    "workspaceFolders": [{"uri": root, "name": "pycage"}],
                    "capabilities": {
                        "general": {"positionEncodings": ["utf-32", "utf-16"]},
                        "textDocument": {
                            "diagnostic": {"dynamicRegistration": false, "relatedInformation": true},
                            "publishDiagnostics": {"relatedInformation": true},
                            "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                        },
                    },
                    "initializationOptions": {"logLevel": "error"},
                }),
            )
            .await?;
        let encoding = init.pointer("/capabilities/positionEncoding").and_then(Value::as_str).unwrap_or("utf-16");
        server.utf16 = encoding != "utf-32";
        server.notify("initialized", json!({}));
        Ok(server)
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let _ = self.out.send(lsp::encode(body.to_string().as_bytes()));
    }

    /// Sends a request and waits for its answer (no deadline of its own:
    /// the caller's is around it, and it kills the server when it passes).
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ServerError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.waiters).insert(id, tx);
        if self.gone.is_cancelled() {
            lock(&self.waiters).remove(&id);
            return Err(self.gone_error());
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let _ = self.out.send(lsp::encode(body.to_string().as_bytes()));
        let answer = tokio::select! {
            answer = rx => answer,
            _ = self.gone.cancelled() => {
                lock(&self.waiters).remove(&id);
                return Err(self.gone_error());
            }
        };
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(message)) if !message.is_empty() => Err(ServerError::Refused { method: method.into(), message }),
            _ => Err(self.gone_error()),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid.and_then(|p| u32::try_from(p).ok())
    }

    /// Whether the process is known to be gone.
    pub fn is_gone(&self) -> bool {
        self.gone.is_cancelled()
    }

    /// Kills the process group (a check that overran its deadline may have
    /// left the server computing; nothing else stops it).
    pub fn kill(&self) {
        self.gone.cancel();
        if let Some(pid) = self.pid.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        if let Some(mut child) = lock(&self.child).take() {
            let _ = child.start_kill();
            // Reaped off the caller's path; outside a tokio runtime (a
            // checker dropped there) tokio's orphan queue reaps it.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let _ = child.wait().await;
                });
            }
        }
    }

    /// Asks the server to exit, briefly, then kills it.
    pub async fn shutdown(&self) {
        if !self.is_gone() {
            let _ = tokio::time::timeout(std::time::Duration::from_millis(500), self.request("shutdown", Value::Null))
                .await;
            self.notify("exit", Value::Null);
        }
        self.kill();
    }

    fn gone_error(&self) -> ServerError {
        let tail = lock(&self.why).trim().to_owned();
        let status = lock(&self.child).as_mut().and_then(|c| c.try_wait().ok().flatten());
        let mut why = match status {
            Some(s) => format!("it exited ({s})"),
            None => "its output ended".to_owned(),
        };
        if !tail.is_empty() {
            why.push_str(": ");
            why.push_str(&tail);
        }
        ServerError::Gone(why)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.gone.cancel();
        if let Some(pid) = self.pid.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        // The child itself is killed on drop (`kill_on_drop`) and reaped by
        // tokio's orphan reaper.
    }
}

/// Hands an answer to its waiter, or answers a request of the server.
fn dispatch(body: &[u8], waiters: &Waiters, out: &mpsc::UnboundedSender<Vec<u8>>) {
    let Ok(message) = serde_json::from_slice::<Value>(body) else { return };
    let id = message.get("id");
    match (message.get("method"), id) {
        (Some(_), Some(id)) => {
            // A request of the server's (registrations, configuration):
            // nothing to give it.
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": Value::Null});
            let _ = out.send(lsp::encode(answer.to_string().as_bytes()));
        }
        (None, Some(id)) => {
            let Some(id) = id.as_u64() else { return };
            let Some(tx) = lock(waiters).remove(&id) else { return };
            let answer = match message.get("error") {
                Some(e) => Err(e.get("message").and_then(Value::as_str).unwrap_or("error").chars().take(500).collect()),
                None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
            };
            let _ = tx.send(answer);
        }
        _ => {}
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `file://` URI of an absolute path, percent-encoded.
pub(crate) fn file_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_escape_what_is_not_plain() {
        assert_eq!(file_uri(Path::new("/tmp/a b/é.py")), "file:///tmp/a%20b/%C3%A9.py");
    }
}
