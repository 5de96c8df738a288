//! Who owns what: the named sessions of each client, their slots, and
//! whether the client is still there.
//!
//! A client is an [`Owner`]: the one client of a stdio server, one MCP
//! session of the streamable-HTTP transport (its `Mcp-Session-Id`), one
//! bearer token (for requests that carry no MCP session), or nobody in
//! particular (neither). A named session belongs to the owner whose call
//! opened it; another owner can neither see nor use it, and no refusal ever
//! names a session of another owner. Requests with no owner at all (the
//! stateless 2026-07-28 protocol without a token) get server-minted names:
//! the session is reachable only by a name the server made unguessable, and
//! told the caller (MCP's "explicit state handles").
//!
//! Runs: each client may have `max_runs_per_client` runs in flight
//! ([`Registry::run_slot`], by [`RunKey`]): every owner of one bearer token
//! together; without a token, every owner from one source together (all
//! its MCP sessions and stateless requests: see `gate::Source`); the one
//! client of stdio.
//!
//! Slots: each client may hold `per_client` open sessions (an owner; with
//! bearer tokens, every owner of one token together: each MCP session it
//! opens is bound to it), and the server `total` across clients. A session that has ended (a failed run, idle, too
//! old) keeps its name until it is reported once to its owner, but frees its
//! slot at once.
//!
//! Liveness ([`Life`]): an owner is gone when its MCP session closes (DELETE,
//! or the transport's keep-alive) or stdio reaches end of file; then its
//! runs are aborted and its sessions closed. Within a live MCP session over
//! HTTP, each request is watched on its own ([`RequestWatch`]): a run whose
//! request has had no response stream open for a grace period is lost (its
//! POST's connection dropped, and no GET resumed that stream with
//! `Last-Event-ID` in time), whatever the session's other streams do.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pycage_runtime::{Runtime, Session, SessionOptions};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Longest session name a caller may choose.
pub const MAX_SESSION_NAME: usize = 64;

/// Bytes of randomness in a minted session name (base64url: 22 characters).
const MINT_BYTES: usize = 16;

/// The longest name a lookup accepts: a chosen name plus a minted suffix.
pub(crate) const MAX_LOOKUP_NAME: usize = MAX_SESSION_NAME + 1 + 22;

/// The scope of a request's named sessions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// The one client of a stdio server.
    Stdio,
    /// One MCP session of the streamable-HTTP transport.
    McpSession(String),
    /// Requests without an MCP session that carry this bearer token (named
    /// by the environment variable it came from).
    Principal(String),
    /// Requests with neither: sessions are reached by minted names only.
    Anonymous,
}

/// Whether a client is still there (see the module docs).
#[derive(Debug)]
pub(crate) struct Life {
    /// Cancelled when the owner is gone.
    gone: CancellationToken,
}

impl Life {
    fn new() -> Arc<Life> {
        Arc::new(Life { gone: CancellationToken::new() })
    }

    /// Resolves when the owner is gone.
    pub(crate) async fn gone(&self) {
        self.gone.cancelled().await
    }

    #[cfg(test)]
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.is_cancelled()
    }
}

/// One request of an MCP session over HTTP: its response streams open
/// (its POST's, and GETs that resumed it), and who holds the entry.
#[derive(Debug)]
struct Request {
    streams: watch::Sender<usize>,
    /// Stream guards and run watches holding it; gone at 0.
    holders: usize,
    /// The transport's number of the request's stream: event ids are
    /// `<index>/<number>`, and a resuming GET names one.
    stream_number: Option<u64>,
}

/// A request's JSON-RPC id as a key: its JSON text, so that the number 5
/// and the string "5" stay apart.
pub(crate) fn request_key(id: &rmcp::model::RequestId) -> String {
    serde_json::to_string(id).unwrap_or_else(|_| id.to_string())
}

/// Where a request entry lives: its MCP session and its JSON-RPC id.
#[derive(Debug, Clone)]
struct RequestAt {
    session: Owner,
    request: String,
}

impl Registry {
    /// Takes one hold on the entry of `at`, opening it if needed, with
    /// `stream` more streams open; `None` when the MCP session is unknown.
    fn hold(&self, at: &RequestAt, stream: bool) -> Option<watch::Receiver<usize>> {
        let mut state = self.lock();
        let client = state.clients.get_mut(&at.session)?;
        let entry = client.requests.entry(at.request.clone()).or_insert_with(|| Request {
            streams: watch::channel(0).0,
            holders: 0,
            stream_number: None,
        });
        entry.holders += 1;
        if stream {
            entry.streams.send_modify(|n| *n += 1);
        }
        Some(entry.streams.subscribe())
    }

    /// Gives one hold back (and a stream with it), forgetting the entry
    /// when nothing holds it.
    fn release(&self, at: &RequestAt, stream: bool) {
        let mut state = self.lock();
        let Some(client) = state.clients.get_mut(&at.session) else { return };
        let Some(entry) = client.requests.get_mut(&at.request) else { return };
        if stream {
            entry.streams.send_modify(|n| *n = n.saturating_sub(1));
        }
        entry.holders = entry.holders.saturating_sub(1);
        if entry.holders == 0 {
            if let Some(number) = entry.stream_number {
                client.stream_numbers.remove(&number);
            }
            client.requests.remove(&at.request);
        }
    }
}

/// Counts one open response stream of a request while it lives.
#[derive(Debug)]
pub(crate) struct StreamGuard {
    held: Option<(Arc<Registry>, RequestAt)>,
    /// Whether the stream's number is known (from its first event id).
    numbered: bool,
}

impl StreamGuard {
    fn none() -> StreamGuard {
        StreamGuard { held: None, numbered: true }
    }

    /// Reads the stream's number from an event id (`<index>/<number>`),
    /// once, so that a GET resuming it finds the request.
    pub(crate) fn saw_event(&mut self, event_id: Option<&str>) {
        if self.numbered {
            return;
        }
        let Some(number) = event_id.and_then(|e| e.split_once('/')).and_then(|(_, n)| n.parse::<u64>().ok()) else {
            return;
        };
        self.numbered = true;
        let Some((registry, at)) = &self.held else { return };
        let mut state = registry.lock();
        if let Some(client) = state.clients.get_mut(&at.session) {
            if let Some(entry) = client.requests.get_mut(&at.request) {
                entry.stream_number = Some(number);
                // Bounded: one number per live request entry.
                client.stream_numbers.insert(number, at.request.clone());
            }
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some((registry, at)) = self.held.take() {
            registry.release(&at, true);
        }
    }
}

/// A run's watch on its request's streams (MCP sessions over HTTP).
#[derive(Debug)]
pub(crate) struct RequestWatch {
    registry: Arc<Registry>,
    at: RequestAt,
    streams: watch::Receiver<usize>,
}

impl RequestWatch {
    /// Resolves once the request has had no response stream open for
    /// `grace` in a row (a stream that opens again within it, a resume,
    /// starts the wait over when it closes).
    pub(crate) async fn lost(&self, grace: Duration) {
        let mut rx = self.streams.clone();
        loop {
            // (The `Ref`s are dropped at once: they hold a lock.)
            if rx.wait_for(|n| *n == 0).await.is_err() {
                return std::future::pending().await;
            }
            let reopened = tokio::time::timeout(grace, async { rx.wait_for(|n| *n > 0).await.is_ok() }).await;
            match reopened {
                Err(_) => return,
                Ok(false) => return std::future::pending().await,
                Ok(true) => {}
            }
        }
    }
}

impl Drop for RequestWatch {
    fn drop(&mut self) {
        self.registry.release(&self.at, false);
    }
}

/// An open session and the number that tells it from a later one of the
/// same name.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub id: u64,
    pub session: Session,
}

#[derive(Debug)]
struct Client {
    sessions: BTreeMap<String, Entry>,
    life: Arc<Life>,
    /// The bearer token's name of the requests that opened it (MCP sessions).
    principal: Option<String>,
    /// Requests with streams or runs (MCP sessions over HTTP), by JSON-RPC id.
    requests: HashMap<String, Request>,
    /// Their streams' numbers, for GETs that resume one.
    stream_numbers: HashMap<u64, String>,
}

impl Client {
    fn new(owner: &Owner) -> Client {
        let principal = match owner {
            Owner::Principal(p) => Some(p.clone()),
            _ => None,
        };
        Client {
            sessions: BTreeMap::new(),
            life: Life::new(),
            principal,
            requests: HashMap::new(),
            stream_numbers: HashMap::new(),
        }
    }

    fn open(&self) -> usize {
        self.sessions.values().filter(|e| e.session.ended().is_none()).count()
    }
}

#[derive(Debug, Default)]
struct State {
    clients: HashMap<Owner, Client>,
    next_entry: u64,
    /// Runs in flight per [`RunKey`].
    runs: HashMap<RunKey, usize>,
}

/// Where a request comes from, as far as counting clients without tokens
/// goes: every loopback address is one source (any local process can use
/// any of 127.0.0.0/8), an IPv4 address is one, and an IPv6 /64 (what one
/// host usually holds) is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    Loopback,
    V4(std::net::Ipv4Addr),
    V6Prefix([u8; 8]),
}

impl Source {
    pub(crate) fn of(ip: IpAddr) -> Source {
        match ip.to_canonical() {
            ip if ip.is_loopback() => Source::Loopback,
            IpAddr::V4(v4) => Source::V4(v4),
            IpAddr::V6(v6) => {
                let mut prefix = [0u8; 8];
                prefix.copy_from_slice(&v6.octets()[..8]);
                Source::V6Prefix(prefix)
            }
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Loopback => f.write_str("this machine (loopback)"),
            Source::V4(ip) => write!(f, "{ip}"),
            Source::V6Prefix(p) => {
                let mut octets = [0u8; 16];
                octets[..8].copy_from_slice(p);
                write!(f, "{}/64", std::net::Ipv6Addr::from(octets))
            }
        }
    }
}

/// Whose runs count together against `max_runs_per_client` (and share
/// a turn in the fair admission): every owner of one bearer token (its MCP
/// sessions included); without a token over HTTP, every owner from one
/// source; else (stdio) the owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RunKey {
    Principal(String),
    Source(Source),
    Owner(Owner),
}

impl RunKey {
    /// The client as a refusal names it, with its verb.
    fn who(&self) -> String {
        match self {
            RunKey::Source(source) => format!("the clients without a token from {source} together already have"),
            RunKey::Principal(_) | RunKey::Owner(_) => "this client already has".into(),
        }
    }
}

/// One run in flight of a client, counted until dropped.
#[derive(Debug)]
pub(crate) struct RunSlot {
    registry: Arc<Registry>,
    key: RunKey,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let mut state = self.registry.lock();
        if let Some(n) = state.runs.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.runs.remove(&self.key);
            }
        }
    }
}

/// Slot limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub per_client: usize,
    pub total: usize,
}

/// Why [`Registry::session`] gave no session: the message for the caller.
#[derive(Debug)]
pub(crate) struct Refusal(pub String);

/// Every owner's sessions and liveness.
#[derive(Debug)]
pub(crate) struct Registry {
    state: Mutex<State>,
    limits: Limits,
    idle: Duration,
}

/// A session for one call: the entry and the name it goes by (minted for
/// anonymous callers), and whether it was opened by this call.
#[derive(Debug)]
pub(crate) struct Lease {
    pub name: String,
    pub entry: Entry,
    pub minted: bool,
}

impl Registry {
    pub(crate) fn new(limits: Limits, idle: Duration) -> Registry {
        Registry { state: Mutex::new(State::default()), limits, idle }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: go on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for one more run of `owner`, or why not: one client may have
    /// at most `max` runs in flight, so that it cannot take every run slot
    /// of the runtime and queue everyone else's runs behind its own.
    pub(crate) fn run_slot(self: &Arc<Self>, key: &RunKey, max: usize) -> Result<RunSlot, Refusal> {
        let mut state = self.lock();
        let n = state.runs.entry(key.clone()).or_insert(0);
        if *n >= max {
            let runs = if max == 1 { "run" } else { "runs" };
            return Err(Refusal(format!(
                "{} {max} {runs} in flight, the most one client may have at once: wait for one \
                 to finish (or run the steps in one program: its tool calls run concurrently)",
                key.who()
            )));
        }
        *n += 1;
        Ok(RunSlot { registry: Arc::clone(self), key: key.clone() })
    }

    /// Registers an MCP session the transport just created.
    pub(crate) fn opened(&self, owner: Owner) {
        self.lock().clients.entry(owner.clone()).or_insert_with(|| Client::new(&owner));
    }

    /// The liveness of `owner`, registering the owners that need no
    /// opening. `None` for an MCP session the transport has closed (or never
    /// registered).
    pub(crate) fn life(&self, owner: &Owner) -> Option<Arc<Life>> {
        let mut state = self.lock();
        if let Some(c) = state.clients.get(owner) {
            return Some(Arc::clone(&c.life));
        }
        if matches!(owner, Owner::McpSession(_)) {
            return None;
        }
        let c = state.clients.entry(owner.clone()).or_insert_with(|| Client::new(owner));
        Some(Arc::clone(&c.life))
    }

    /// Counts a response stream of request `request` (a JSON-RPC id) of
    /// MCP session `id` until the guard drops: the POST carrying it.
    pub(crate) fn request_stream(self: &Arc<Self>, id: &str, request: &str) -> StreamGuard {
        let at = RequestAt { session: Owner::McpSession(id.to_owned()), request: request.to_owned() };
        match self.hold(&at, true) {
            Some(_) => StreamGuard { held: Some((Arc::clone(self), at)), numbered: false },
            None => StreamGuard::none(),
        }
    }

    /// Counts a GET of MCP session `id` resuming a stream after event
    /// `last_event_id` as a stream of that stream's request, when it is
    /// one of a request still held (a run in flight).
    pub(crate) fn resumed_stream(self: &Arc<Self>, id: &str, last_event_id: &str) -> StreamGuard {
        let session = Owner::McpSession(id.to_owned());
        let Some(number) = last_event_id.split_once('/').and_then(|(_, n)| n.parse::<u64>().ok()) else {
            return StreamGuard::none();
        };
        let request = {
            let state = self.lock();
            state.clients.get(&session).and_then(|c| c.stream_numbers.get(&number)).cloned()
        };
        let Some(request) = request else { return StreamGuard::none() };
        let at = RequestAt { session, request };
        match self.hold(&at, true) {
            Some(_) => StreamGuard { held: Some((Arc::clone(self), at)), numbered: true },
            None => StreamGuard::none(),
        }
    }

    /// A run's watch on the streams of its request (`request`, a JSON-RPC
    /// id) when `owner` is an MCP session over HTTP; `None` otherwise.
    pub(crate) fn request_watch(self: &Arc<Self>, owner: &Owner, request: &str) -> Option<RequestWatch> {
        if !matches!(owner, Owner::McpSession(_)) {
            return None;
        }
        let at = RequestAt { session: owner.clone(), request: request.to_owned() };
        let streams = self.hold(&at, false)?;
        Some(RequestWatch { registry: Arc::clone(self), at, streams })
    }

    /// Binds MCP session `id` to the bearer token that opened it; `false`
    /// when it is already bound to another one.
    pub(crate) fn bind_principal(&self, id: &str, principal: Option<&str>) -> bool {
        let mut state = self.lock();
        let Some(c) = state.clients.get_mut(&Owner::McpSession(id.to_owned())) else { return true };
        match (&c.principal, principal) {
            (None, Some(p)) => {
                c.principal = Some(p.to_owned());
                true
            }
            (Some(bound), p) => Some(bound.as_str()) == p,
            (None, None) => true,
        }
    }

    /// The owner is gone: its runs abort, its sessions close (in the
    /// background; the runtime reaps them).
    pub(crate) fn gone(&self, owner: &Owner) {
        let client = self.lock().clients.remove(owner);
        if let Some(client) = client {
            client.life.gone.cancel();
            for entry in client.sessions.into_values() {
                tokio::spawn(async move { entry.session.close().await });
            }
        }
    }

    /// The session `name` of `owner`, opening it if needed (see the module
    /// docs for slots and minted names). An ended session is reported once,
    /// then forgotten.
    pub(crate) fn session(
        &self,
        owner: &Owner,
        name: &str,
        runtime: &Runtime,
        options: impl FnOnce() -> SessionOptions,
    ) -> Result<Lease, Refusal> {
        let mut state = self.lock();
        let state = &mut *state;
        let anonymous = *owner == Owner::Anonymous;
        let tracks = matches!(owner, Owner::McpSession(_));
        if tracks && !state.clients.contains_key(owner) {
            return Err(Refusal("this MCP session has closed".into()));
        }
        let client = state.clients.entry(owner.clone()).or_insert_with(|| Client::new(owner));
        if let Some(entry) = client.sessions.get(name) {
            return match entry.session.ended() {
                None => Ok(Lease { name: name.to_owned(), entry: entry.clone(), minted: false }),
                Some(why) => {
                    client.sessions.remove(name);
                    Err(Refusal(ended_message(name, &why)))
                }
            };
        }
        // Ended sessions (of every owner) free their slots silently, except
        // that their names stay for the one report their owner gets: only
        // their count matters here.
        // Slots are counted per token when there is one: every MCP session
        // opened with it and its own stateless requests are one client.
        let open_here = match client.principal.clone() {
            Some(p) => {
                state.clients.values().filter(|c| c.principal.as_deref() == Some(p.as_str())).map(Client::open).sum()
            }
            None => client.open(),
        };
        let total: usize = state.clients.values().map(Client::open).sum();
        let Some(client) = state.clients.get_mut(owner) else {
            return Err(Refusal("this client is gone".into()));
        };
        if name.len() > MAX_SESSION_NAME {
            return Err(Refusal(format!("`session` names are 1 to {MAX_SESSION_NAME} bytes")));
        }
        // A refusal may list the caller's own open sessions, never another's;
        // minted names are the only key to their sessions: never listed.
        let yours = if anonymous {
            None
        } else {
            let open: Vec<&str> =
                client.sessions.iter().filter(|(_, e)| e.session.ended().is_none()).map(|(n, _)| n.as_str()).collect();
            (!open.is_empty()).then(|| format!("reuse one of yours ({})", open.join(", ")))
        };
        let expire = format!("({} s without a run)", self.idle.as_secs());
        if open_here >= self.limits.per_client {
            let reuse = match (anonymous, yours) {
                (true, _) => "sessions opened without a client identity are not listed".to_owned(),
                (false, Some(yours)) => yours,
                (false, None) => "other connections with the same token hold them".to_owned(),
            };
            return Err(Refusal(format!(
                "{open_here} sessions are open for this client, the most it may hold; {reuse}, or wait for one to \
                 expire {expire}"
            )));
        }
        if total >= self.limits.total {
            let reuse = yours.map(|r| format!("{r}, ")).unwrap_or_default();
            return Err(Refusal(format!(
                "the server holds {total} sessions, the most it keeps for all its clients together; {reuse}run \
                 without `session`, or try again when one has expired {expire}"
            )));
        }
        let (name, minted) = if anonymous { (mint(name), true) } else { (name.to_owned(), false) };
        // Forget this owner's ended sessions beyond their report once the
        // table would grow past its slots (bounded memory).
        if client.sessions.len() >= self.limits.per_client.saturating_mul(2) {
            client.sessions.retain(|_, e| e.session.ended().is_none());
        }
        let session = runtime.session(options()).map_err(|e| Refusal(format!("cannot open a session: {e}")))?;
        state.next_entry += 1;
        let entry = Entry { id: state.next_entry, session };
        client.sessions.insert(name.clone(), entry.clone());
        Ok(Lease { name, entry, minted })
    }

    /// Forgets `name` of `owner` after its run reported it ended, unless
    /// the name now belongs to a newer session.
    pub(crate) fn forget(&self, owner: &Owner, name: &str, id: u64) {
        let mut state = self.lock();
        if let Some(client) = state.clients.get_mut(owner) {
            if client.sessions.get(name).is_some_and(|e| e.id == id) {
                client.sessions.remove(name);
            }
        }
    }

    #[cfg(test)]
    fn names(&self, owner: &Owner) -> Vec<String> {
        self.lock().clients.get(owner).map(|c| c.sessions.keys().cloned().collect()).unwrap_or_default()
    }
}

pub(crate) fn ended_message(name: &str, why: &str) -> String {
    format!("the session `{name}` has ended ({why}); the next call naming it starts a new, empty one")
}

/// `name` with an unguessable suffix.
fn mint(name: &str) -> String {
    use base64::Engine;
    let mut bytes = [0u8; MINT_BYTES];
    fill_random(&mut bytes);
    format!("{name}-{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The kernel's randomness. Without it no name can be made unguessable, and
/// nothing else in the process could be trusted either.
pub(crate) fn fill_random(buf: &mut [u8]) {
    use std::io::Read;
    let ok = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf)).is_ok();
    #[allow(clippy::panic)]
    if !ok {
        panic!("cannot read /dev/urandom");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> Runtime {
        let config = pycage_runtime::RuntimeConfig {
            isolation: pycage_runtime::Isolation::Process,
            spawn: pycage_runtime::SpawnMode::Exec,
            ..pycage_runtime::RuntimeConfig::default()
        };
        Runtime::new(config).unwrap()
    }

    fn options() -> SessionOptions {
        SessionOptions::default()
    }

    #[tokio::test]
    async fn slots_are_per_owner_with_a_total_and_refusals_name_only_your_own() {
        let rt = runtime();
        let reg = Registry::new(Limits { per_client: 2, total: 3 }, Duration::from_secs(60));
        let a = Owner::Principal("A".into());
        let b = Owner::Principal("B".into());
        reg.session(&a, "alpha", &rt, options).unwrap();
        reg.session(&a, "beta", &rt, options).unwrap();
        let refusal = reg.session(&a, "gamma", &rt, options).unwrap_err().0;
        assert!(refusal.contains("alpha, beta"), "{refusal}");
        // B reaches neither name: `alpha` is a new session of its own.
        let lease = reg.session(&b, "alpha", &rt, options).unwrap();
        assert!(!lease.minted);
        let refusal = reg.session(&b, "delta", &rt, options).unwrap_err().0;
        assert!(refusal.starts_with("the server holds 3 sessions"), "{refusal}");
        assert!(refusal.contains("reuse one of yours (alpha), run") && !refusal.contains("beta"), "{refusal}");
        rt.shutdown().await;
    }

    #[tokio::test]
    async fn a_token_counts_its_mcp_sessions_against_its_slots() {
        let rt = runtime();
        let reg = Registry::new(Limits { per_client: 2, total: 8 }, Duration::from_secs(60));
        let (m1, m2) = (Owner::McpSession("m1".into()), Owner::McpSession("m2".into()));
        reg.opened(m1.clone());
        reg.opened(m2.clone());
        assert!(reg.bind_principal("m1", Some("A")) && reg.bind_principal("m2", Some("A")));
        assert!(!reg.bind_principal("m1", Some("B")) && !reg.bind_principal("m1", None), "bound for good");
        reg.session(&m1, "x", &rt, options).unwrap();
        reg.session(&Owner::Principal("A".into()), "y", &rt, options).unwrap();
        let refusal = reg.session(&m2, "z", &rt, options).unwrap_err().0;
        assert!(refusal.starts_with("2 sessions are open for this client"), "{refusal}");
        assert!(refusal.contains("other connections with the same token hold them"), "{refusal}");
        // Another token's slots are its own.
        reg.session(&Owner::Principal("B".into()), "x", &rt, options).unwrap();
        rt.shutdown().await;
    }

    #[tokio::test]
    async fn anonymous_names_are_minted_and_never_listed() {
        let rt = runtime();
        let reg = Registry::new(Limits { per_client: 1, total: 8 }, Duration::from_secs(60));
        let lease = reg.session(&Owner::Anonymous, "work", &rt, options).unwrap();
        assert!(lease.minted && lease.name.starts_with("work-") && lease.name.len() == 5 + 22, "{}", lease.name);
        // The chosen name alone mints another (refused here: the slot is taken).
        let refusal = reg.session(&Owner::Anonymous, "work", &rt, options).unwrap_err().0;
        assert!(!refusal.contains(&lease.name), "{refusal}");
        let again = reg.session(&Owner::Anonymous, &lease.name, &rt, options).unwrap();
        assert_eq!(again.entry.id, lease.entry.id);
        rt.shutdown().await;
    }

    #[tokio::test]
    async fn forgetting_an_ended_session_spares_a_newer_one_of_the_same_name() {
        let rt = runtime();
        let reg = Registry::new(Limits { per_client: 4, total: 8 }, Duration::from_secs(60));
        let owner = Owner::Stdio;
        let old = reg.session(&owner, "s", &rt, options).unwrap();
        old.entry.session.close().await;
        // The ended session is reported once and forgotten; a new one opens.
        assert!(reg.session(&owner, "s", &rt, options).unwrap_err().0.starts_with("the session `s` has ended"));
        let new = reg.session(&owner, "s", &rt, options).unwrap();
        assert_ne!(new.entry.id, old.entry.id);
        // A late report about the old one leaves the new one in place.
        reg.forget(&owner, "s", old.entry.id);
        assert_eq!(reg.names(&owner), ["s"]);
        assert_eq!(reg.session(&owner, "s", &rt, options).unwrap().entry.id, new.entry.id);
        rt.shutdown().await;
    }

    #[tokio::test]
    async fn runs_in_flight_are_capped_per_run_key() {
        let reg = Arc::new(Registry::new(Limits { per_client: 4, total: 8 }, Duration::from_secs(60)));
        let a = RunKey::Principal("A".into());
        let first = reg.run_slot(&a, 2).unwrap();
        let _second = reg.run_slot(&a, 2).unwrap();
        let refused = reg.run_slot(&a, 2).unwrap_err().0;
        assert!(refused.starts_with("this client already has 2 runs in flight"), "{refused}");
        let _other = reg.run_slot(&RunKey::Principal("B".into()), 2).unwrap();
        drop(first);
        let _again = reg.run_slot(&a, 2).unwrap();
        // Without a token, one source is one client, whatever its MCP sessions.
        let local = RunKey::Source(Source::Loopback);
        let _l1 = reg.run_slot(&local, 2).unwrap();
        let _l2 = reg.run_slot(&local, 2).unwrap();
        let refused = reg.run_slot(&local, 2).unwrap_err().0;
        assert!(
            refused.starts_with("the clients without a token from this machine (loopback) together already have 2"),
            "{refused}"
        );
        let _stdio = reg.run_slot(&RunKey::Owner(Owner::Stdio), 2).unwrap();
    }

    #[tokio::test]
    async fn a_closed_mcp_session_is_gone_with_its_sessions() {
        let rt = runtime();
        let reg = Registry::new(Limits { per_client: 4, total: 8 }, Duration::from_secs(60));
        let owner = Owner::McpSession("m1".into());
        assert!(reg.session(&owner, "s", &rt, options).is_err(), "an unregistered MCP session is refused");
        reg.opened(owner.clone());
        let lease = reg.session(&owner, "s", &rt, options).unwrap();
        let life = reg.life(&owner).unwrap();
        reg.gone(&owner);
        assert!(life.is_gone());
        life.gone().await;
        assert!(reg.life(&owner).is_none());
        assert!(reg.session(&owner, "s", &rt, options).unwrap_err().0.contains("closed"));
        drop(lease);
        rt.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_without_streams_for_the_grace_is_lost() {
        let reg = Arc::new(Registry::new(Limits { per_client: 4, total: 8 }, Duration::from_secs(60)));
        let owner = Owner::McpSession("m2".into());
        reg.opened(owner.clone());
        let mut post = reg.request_stream("m2", "7");
        post.saw_event(Some("0/3"));
        let watch = reg.request_watch(&owner, "7").unwrap();
        // Another request's stream (or the standalone GET) does not count.
        let _other = reg.request_stream("m2", "8");
        let lost = Box::pin(watch.lost(Duration::from_secs(10)));
        let mut lost = lost;
        // Its stream is open: never lost, however long.
        assert!(tokio::time::timeout(Duration::from_secs(100), &mut lost).await.is_err());
        drop(post);
        // Closed, then resumed within the grace (a GET after event 2 of
        // stream 3): still there.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let resumed = reg.resumed_stream("m2", "2/3");
        assert!(resumed.held.is_some(), "the resume found its request");
        assert!(tokio::time::timeout(Duration::from_secs(100), &mut lost).await.is_err());
        drop(resumed);
        // A resume of another stream, or a malformed id, is no resume.
        assert!(reg.resumed_stream("m2", "2/4").held.is_none() && reg.resumed_stream("m2", "2").held.is_none());
        tokio::time::timeout(Duration::from_secs(11), &mut lost).await.unwrap();
        // Forgotten once nothing holds it.
        drop(lost);
        drop(watch);
        assert!(reg.resumed_stream("m2", "2/3").held.is_none());
        assert_eq!(reg.lock().clients[&owner].requests.len(), 1, "only request 8 is left");
    }

    #[test]
    fn only_mcp_sessions_watch_their_requests() {
        let reg = Arc::new(Registry::new(Limits { per_client: 4, total: 8 }, Duration::from_secs(60)));
        assert!(reg.request_watch(&Owner::Stdio, "1").is_none());
        assert!(reg.request_watch(&Owner::McpSession("unknown".into()), "1").is_none());
    }
}
