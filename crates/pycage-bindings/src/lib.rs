//! pycage's binding sources: where the host functions a program calls come
//! from, and the typed Python stubs a model reads to call them.
//!
//! A bindings file ([`file`](mod@file)) declares namespaces of external commands
//! ([`command`]), HTTP endpoints ([`http`]), and whole MCP servers
//! ([`upstream`]), each server's tools becoming the members of one
//! namespace. [`Bindings::load`] reads the file, connects to every MCP
//! server once (their tool lists are part of the namespaces), and yields
//! runtime [`Namespace`]s, with each member's stub ([`stubs`]) attached as
//! its `help()` text.
//!
//! Why its own crate: the CLI (`pycage run`, `pycage stubs`) and the MCP
//! server (`pycage mcp`, crate `pycage-mcp`) both load bindings the same
//! way, and neither the runtime (which knows only async closures) nor the
//! protocol should depend on an HTTP client or the MCP SDK. Crates:
//! protocol ← runtime ← bindings ← mcp / cli.
//!
//! # Layers
//!
//! Each module uses only those listed before it:
//!
//! 1. Leaves: `spelling` (how a setting is named), `secret` (values kept
//!    out of messages), [`schema`] (JSON Schema to Python types), [`slots`]
//!    (bounded concurrent commands);
//! 2. the sources: [`command`], [`http`], [`upstream`] (MCP servers);
//! 3. [`stubs`] (what a model reads), then [`file`](mod@file) (the bindings file,
//!    which builds namespaces from all of them).

pub mod command;
pub mod file;
pub mod http;
pub mod schema;
pub mod secret;
pub mod slots;
pub mod spelling;
pub mod stubs;
pub mod upstream;

use slots::{CommandSlots, SlotLimits};

use std::path::Path;
use std::sync::Arc;

use pycage_runtime::{Binding, Namespace};

pub use file::{BindingsFile, FileError};
pub use upstream::{ConnectError, Upstream};

/// Why bindings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum BindingsError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    #[error("{label}: {message}")]
    Tools { label: String, message: String },
}

/// One connected MCP server and the tools it listed (all of them, before
/// `include`/`exclude`).
#[derive(Debug, Clone)]
pub struct ConnectedServer {
    pub upstream: Arc<Upstream>,
    pub tools: Vec<rmcp::model::Tool>,
}

/// Loaded bindings: runtime namespaces, their stubs, and the MCP
/// connections behind them. Call [`Bindings::close`] when done.
#[derive(Debug, Clone)]
pub struct Bindings {
    pub namespaces: Vec<Namespace>,
    pub docs: Vec<stubs::NamespaceDoc>,
    pub stubs: Vec<stubs::NamespaceStub>,
    pub servers: Vec<ConnectedServer>,
}

impl Bindings {
    /// No bindings.
    pub fn empty() -> Self {
        Bindings { namespaces: Vec::new(), docs: Vec::new(), stubs: Vec::new(), servers: Vec::new() }
    }

    /// Reads a bindings file and connects its MCP servers.
    pub async fn load(path: &Path) -> Result<Self, BindingsError> {
        Self::load_with(path, SlotLimits::default()).await
    }

    /// [`Bindings::load`] with command slots of these limits.
    pub async fn load_with(path: &Path, limits: SlotLimits) -> Result<Self, BindingsError> {
        let label = path.display().to_string();
        Self::from_file_with(file::read(path)?, &label, limits).await
    }

    /// Connects a checked file's MCP servers (concurrently) and builds the
    /// namespaces. `label` prefixes messages.
    pub async fn from_file(file: BindingsFile, label: &str) -> Result<Self, BindingsError> {
        Self::from_file_with(file, label, SlotLimits::default()).await
    }

    /// [`Bindings::from_file`] with command slots of these limits (shared
    /// by every command of the file, fairly between runs: [`slots`]).
    pub async fn from_file_with(file: BindingsFile, label: &str, limits: SlotLimits) -> Result<Self, BindingsError> {
        let slots = CommandSlots::new(limits);
        let client = http::client().map_err(BindingsError::HttpClient)?;
        let mut connecting = tokio::task::JoinSet::new();
        for (i, m) in file.mcp.iter().enumerate() {
            let spec = m.spec.clone();
            connecting.spawn(async move { (i, Upstream::connect(spec).await) });
        }
        let mut connected: Vec<Option<ConnectedServer>> = vec![None; file.mcp.len()];
        let mut first_error = None;
        while let Some(joined) = connecting.join_next().await {
            match joined {
                Ok((i, Ok((upstream, tools)))) => {
                    if let Some(slot) = connected.get_mut(i) {
                        *slot = Some(ConnectedServer { upstream, tools });
                    }
                }
                Ok((_, Err(e))) => {
                    first_error.get_or_insert(BindingsError::Connect(e));
                }
                Err(e) => {
                    first_error.get_or_insert(BindingsError::Tools {
                        label: label.to_string(),
                        message: format!("connecting a server panicked: {e}"),
                    });
                }
            }
        }
        let servers: Vec<ConnectedServer> = connected.into_iter().flatten().collect();
        if let Some(e) = first_error {
            for s in &servers {
                s.upstream.close().await;
            }
            return Err(e);
        }
        let mut docs = Vec::new();
        let mut members: Vec<Vec<(String, Binding)>> = Vec::new();
        for ns in &file.namespaces {
            let (doc, bindings) = namespace_members(ns, &client, &slots);
            docs.push(doc);
            members.push(bindings);
        }
        for (m, server) in file.mcp.iter().zip(&servers) {
            match server_members(m, server, label) {
                Ok((doc, bindings)) => {
                    docs.push(doc);
                    members.push(bindings);
                }
                Err(e) => {
                    for s in &servers {
                        s.upstream.close().await;
                    }
                    return Err(e);
                }
            }
        }
        let stubs = stubs::generate(&docs);
        let error_classes = file
            .namespaces
            .iter()
            .map(|n| (n.error_class.clone(), n.doc.clone()))
            .chain(file.mcp.iter().map(|m| (m.error_class.clone(), m.doc.clone())));
        let mut namespaces = Vec::with_capacity(docs.len());
        for (((doc, stub), bindings), (error_class, own_doc)) in docs.iter().zip(&stubs).zip(members).zip(error_classes)
        {
            let mut ns = Namespace::new(doc.global.clone());
            ns.error_class = error_class;
            ns.doc = Some(match own_doc {
                Some(d) => format!("{}\n\n{}", d.trim(), stub.doc),
                None => stub.doc.clone(),
            });
            ns.stub = Some(stub.class_text());
            for f in &stub.functions {
                let text = f.help_text();
                ns.member_docs.insert(f.name.clone(), text.clone());
                ns.member_docs.insert(f.ident.clone(), text);
            }
            for (name, b) in bindings {
                ns.functions.insert(name, b);
            }
            namespaces.push(ns);
        }
        Ok(Bindings { namespaces, docs, stubs, servers })
    }

    /// Every namespace's stubs as one Python text.
    pub fn stubs_text(&self) -> String {
        stubs::render_all(&self.stubs)
    }

    /// Closes every MCP connection (stdio servers are stopped).
    pub async fn close(&self) {
        for s in &self.servers {
            s.upstream.close().await;
        }
    }
}

/// Each function under its own name and, when that is not an identifier,
/// under its spelling too (both the same binding).
fn with_spellings(
    names: Vec<(String, Binding, stubs::FunctionDoc)>,
) -> (Vec<stubs::FunctionDoc>, Vec<(String, Binding)>) {
    let spelled = spelling::spell_all(names.iter().map(|(n, _, _)| n.as_str()));
    let mut docs = Vec::with_capacity(names.len());
    let mut bindings = Vec::with_capacity(names.len() * 2);
    for (name, binding, mut doc) in names {
        let ident = spelled.get(&name).cloned().unwrap_or_else(|| name.clone());
        if ident != name {
            bindings.push((ident.clone(), binding.clone()));
        }
        bindings.push((name, binding));
        doc.ident = ident;
        docs.push(doc);
    }
    (docs, bindings)
}

/// `binding`, called only with arguments that `schema` accepts; others
/// reject the call with a message naming the field (the command or
/// endpoint never sees them).
fn checked(binding: Binding, schema: Arc<serde_json::Value>) -> Binding {
    Binding::with_context(move |args, cx| {
        let binding = binding.clone();
        let verdict = schema::validate(&schema, args.root());
        async move {
            match verdict {
                Ok(()) => binding.call(args, cx).await,
                Err(e) => Err(pycage_runtime::BindingError::new(format!("invalid arguments: {e}"))),
            }
        }
    })
}

fn namespace_members(
    ns: &file::NamespaceDecl,
    client: &reqwest::Client,
    slots: &CommandSlots,
) -> (stubs::NamespaceDoc, Vec<(String, Binding)>) {
    let mut items = Vec::with_capacity(ns.functions.len());
    for (name, f) in &ns.functions {
        let binding = match &f.kind {
            file::FunctionKind::Command(spec) => {
                let spec = Arc::new(spec.clone());
                let slots = slots.clone();
                // What the program wrote, for its error messages.
                let label: Arc<str> = if crate::spelling::is_python_identifier(name) {
                    format!("{}.{name}", ns.global).into()
                } else {
                    format!("getattr({}, {name:?})", ns.global).into()
                };
                Binding::with_context(move |args, cx| {
                    let (spec, label) = (Arc::clone(&spec), Arc::clone(&label));
                    let slots = slots.clone();
                    async move { command::call(&spec, &label, args, cx, &slots).await }
                })
            }
            file::FunctionKind::Http(spec) => {
                let spec = Arc::new(spec.clone());
                let client = client.clone();
                Binding::new(move |args| {
                    let spec = Arc::clone(&spec);
                    let client = client.clone();
                    async move { http::call(&client, &spec, args).await }
                })
            }
        };
        let binding = match &f.input_schema {
            Some(schema) => checked(binding, Arc::new(schema.clone())),
            None => binding,
        };
        let binding = if f.approval { binding.requiring_approval() } else { binding };
        let doc = stubs::FunctionDoc {
            name: name.clone(),
            ident: name.clone(),
            description: f.description.clone(),
            input_schema: f.input_schema.clone(),
            output_schema: f.output_schema.clone(),
        };
        items.push((name.clone(), binding, doc));
    }
    let (functions, bindings) = with_spellings(items);
    let doc = stubs::NamespaceDoc {
        global: ns.global.clone(),
        source: "the bindings file".into(),
        error_class: ns.error_class.as_ref().map(|e| (e.name.clone(), e.member_name_property.clone())),
        functions,
    };
    (doc, bindings)
}

fn server_members(
    m: &file::McpDecl,
    server: &ConnectedServer,
    label: &str,
) -> Result<(stubs::NamespaceDoc, Vec<(String, Binding)>), BindingsError> {
    let listed: std::collections::BTreeSet<&str> = server.tools.iter().map(|t| t.name.as_ref()).collect();
    let unknown: Vec<&String> = m
        .include
        .iter()
        .flatten()
        .chain(&m.exclude)
        .chain(&m.approval)
        .filter(|n| !listed.contains(n.as_str()))
        .collect();
    if !unknown.is_empty() {
        return Err(BindingsError::Tools {
            label: format!("{label}: mcp ({})", m.spec.global),
            message: format!(
                "include/exclude/approval name tools the server does not have: {}; it has: {}",
                unknown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                listed.iter().copied().collect::<Vec<_>>().join(", ")
            ),
        });
    }
    let mut items = Vec::new();
    for tool in &server.tools {
        let name = tool.name.to_string();
        let wanted = m.include.as_ref().is_none_or(|inc| inc.contains(&name)) && !m.exclude.contains(&name);
        if !wanted || items.iter().any(|(n, _, _): &(String, Binding, stubs::FunctionDoc)| *n == name) {
            continue;
        }
        let up = Arc::clone(&server.upstream);
        let tool_name = name.clone();
        let binding = Binding::new(move |args| {
            let up = Arc::clone(&up);
            let tool_name = tool_name.clone();
            async move { up.call(&tool_name, args).await }
        });
        let binding = if m.approval.contains(&name) { binding.requiring_approval() } else { binding };
        let doc = stubs::FunctionDoc {
            name: name.clone(),
            ident: name.clone(),
            description: tool.description.as_deref().map(str::to_string),
            input_schema: Some(serde_json::Value::Object((*tool.input_schema).clone())),
            output_schema: tool.output_schema.as_ref().map(|s| serde_json::Value::Object((**s).clone())),
        };
        items.push((name, binding, doc));
    }
    let (functions, bindings) = with_spellings(items);
    let doc = stubs::NamespaceDoc {
        global: m.spec.global.clone(),
        source: format!("the MCP server `{}`", server.upstream.display_name()),
        error_class: m.error_class.as_ref().map(|e| (e.name.clone(), e.member_name_property.clone())),
        functions,
    };
    Ok((doc, bindings))
}
