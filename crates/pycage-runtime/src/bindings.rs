//! Host functions the program calls: namespaces of async bindings, which
//! calls need approval, and the refusal that suspends a run instead.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pycage_protocol::JsonValue;
use tokio_util::sync::CancellationToken;

/// A binding's refusal; the program sees `message` on the raised exception.
/// Or, made with [`BindingError::suspend`], the binding's wish to suspend
/// the run at this call (a durable run, `docs/durable.md`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BindingError {
    pub message: String,
    suspend: bool,
}

impl BindingError {
    /// A refusal with this message.
    pub fn new(message: impl Into<String>) -> Self {
        BindingError { message: message.into(), suspend: false }
    }

    /// Suspends the run at this call, for `reason`: the run settles as
    /// `suspended` with a journal, and the call gets the answer its resume
    /// gives. Needs `RuntimeConfig::journal_key`; without one the call
    /// fails with a message that says so.
    pub fn suspend(reason: impl Into<String>) -> Self {
        BindingError { message: reason.into(), suspend: true }
    }

    /// Whether this is [`BindingError::suspend`].
    pub fn is_suspend(&self) -> bool {
        self.suspend
    }
}

/// The future a binding returns.
pub type BindingFuture = Pin<Box<dyn Future<Output = Result<JsonValue, BindingError>> + Send>>;

/// Names one run among every run of this process (sessions: one per run
/// of the session). Bindings use it to share host resources fairly between
/// runs (e.g. command-binding slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(u64);

impl RunId {
    /// A new id, never handed out before in this process.
    pub fn next() -> RunId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        RunId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number behind the id.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// What a binding knows of the call it serves.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The run that made the call.
    pub run: RunId,
    /// Cancelled once the run has settled: nobody will read the reply, so
    /// a call that has not started its side effects must not start them
    /// (a queued command, a sync function waiting for a thread). The call's
    /// future is dropped at the same moment; this token is for work that
    /// runs outside the future (threads, other processes).
    pub settled: CancellationToken,
}

impl CallContext {
    /// A context for a call outside any run (tests, benchmarks, direct use).
    pub fn detached() -> CallContext {
        CallContext { run: RunId::next(), settled: CancellationToken::new() }
    }
}

type BindingFn = dyn Fn(JsonValue, CallContext) -> BindingFuture + Send + Sync;

/// An async host function from JSON to JSON. Cheap to clone.
#[derive(Clone)]
pub struct Binding {
    call: Arc<BindingFn>,
    approval: bool,
}

impl Binding {
    /// Wraps an async closure.
    ///
    /// ```
    /// use pycage_runtime::{Binding, BindingError};
    /// let echo = Binding::new(|args| async move { Ok::<_, BindingError>(args) });
    /// ```
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: Fn(JsonValue) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<JsonValue, BindingError>> + Send + 'static,
    {
        Binding { call: Arc::new(move |args, _| Box::pin(f(args))), approval: false }
    }

    /// Wraps an async closure that also takes the call's [`CallContext`].
    pub fn with_context<F, Fut>(f: F) -> Self
    where
        F: Fn(JsonValue, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<JsonValue, BindingError>> + Send + 'static,
    {
        Binding { call: Arc::new(move |args, cx| Box::pin(f(args, cx))), approval: false }
    }

    /// The same function, needing approval: a call to it is not run but
    /// suspends the run (`docs/durable.md`); its resume gives the answer.
    pub fn requiring_approval(mut self) -> Self {
        self.approval = true;
        self
    }

    /// Whether calls need approval ([`Binding::requiring_approval`]).
    pub fn requires_approval(&self) -> bool {
        self.approval
    }

    /// Starts one call.
    pub fn call(&self, args: JsonValue, cx: CallContext) -> BindingFuture {
        (self.call)(args, cx)
    }
}

impl fmt::Debug for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Binding(..)")
    }
}

/// The exception class a namespace's rejected calls raise in the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorClass {
    /// The class's name; also a global of the program.
    pub name: String,
    /// Attribute of the raised exception that holds the member's name.
    pub member_name_property: String,
}

/// One global object of the program, e.g. `tools`, whose members are the
/// bindings. Member names are any strings.
#[derive(Debug, Clone)]
pub struct Namespace {
    pub global: String,
    pub functions: BTreeMap<String, Binding>,
    pub error_class: Option<ErrorClass>,
    /// What `help(<global>)` shows in the program.
    pub doc: Option<String>,
    /// Member name → what `help(<global>.<member>)` and its `__doc__` show.
    /// Entries for names that are not in `functions` are ignored.
    pub member_docs: BTreeMap<String, String>,
    /// Members whose calls need approval (as [`Binding::requiring_approval`]):
    /// an MCP server's tools by name, say. Names not in `functions` are ignored.
    pub approval: BTreeSet<String>,
    /// The namespace as Python text for the type check: `class <global>:`
    /// whose members are its functions (keyword-only `async def`s without
    /// `self`), with the types they use (pycage-bindings' stubs make it
    /// from tool schemas). `None`: each member takes any arguments.
    pub stub: Option<String>,
}

impl Namespace {
    /// An empty namespace.
    pub fn new(global: impl Into<String>) -> Self {
        Namespace {
            global: global.into(),
            functions: BTreeMap::new(),
            error_class: None,
            doc: None,
            member_docs: BTreeMap::new(),
            approval: BTreeSet::new(),
            stub: None,
        }
    }

    /// Marks one member as needing approval.
    pub fn with_approval(mut self, name: impl Into<String>) -> Self {
        self.approval.insert(name.into());
        self
    }

    /// Whether calls to `name` need approval.
    pub fn needs_approval(&self, name: &str) -> bool {
        self.approval.contains(name) || self.functions.get(name).is_some_and(Binding::requires_approval)
    }

    /// Sets the namespace's own doc text.
    pub fn with_doc(mut self, doc: impl Into<String>) -> Self {
        self.doc = Some(doc.into());
        self
    }

    /// Sets one member's doc text.
    pub fn with_member_doc(mut self, name: impl Into<String>, doc: impl Into<String>) -> Self {
        self.member_docs.insert(name.into(), doc.into());
        self
    }

    /// Adds a member.
    pub fn with_function(mut self, name: impl Into<String>, binding: Binding) -> Self {
        self.functions.insert(name.into(), binding);
        self
    }

    /// Sets the namespace's stub for the type check ([`Namespace::stub`]).
    pub fn with_stub(mut self, stub: impl Into<String>) -> Self {
        self.stub = Some(stub.into());
        self
    }

    /// Sets the error class.
    pub fn with_error_class(mut self, class: ErrorClass) -> Self {
        self.error_class = Some(class);
        self
    }
}
