//! `pycage mcp` (code mode over MCP) and `pycage stubs`.
//!
//! Both load the bindings file (connecting its MCP servers once). `mcp`
//! serves on stdin/stdout, where stdout belongs to the protocol and nothing
//! else is written to it, or with `--http ADDR` on `http://ADDR/mcp`,
//! announcing the bound address on stderr (`--http 127.0.0.1:0` picks a
//! free port). SIGINT/SIGTERM (or the client closing stdio) stop it; every
//! run is aborted and every upstream server stopped before it exits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use pycage_bindings::Bindings;
use pycage_mcp::{CodeModeServer, ServerOptions};
use pycage_runtime::Runtime;
use tokio::signal::unix::{signal, SignalKind};

use crate::{output, RuntimeArgs};

#[derive(Debug, Args)]
pub struct McpArgs {
    /// TOML file declaring binding namespaces (commands, HTTP endpoints, MCP servers).
    #[arg(long, value_name = "FILE.toml")]
    bindings: Option<PathBuf>,

    /// Serve streamable HTTP on ADDR (host:port) at /mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,

    /// Also list every upstream MCP tool and forward calls to it unchanged.
    #[arg(long)]
    expose_tools: bool,

    /// Largest run_python description; over it, stubs shrink to one line per function.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().max_description_bytes)]
    max_description_bytes: usize,

    /// Named sessions (run_python's `session`) open at once.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().max_sessions)]
    max_sessions: usize,

    /// A session ends after this many seconds without a run.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().session_idle.as_secs())]
    session_idle_seconds: u64,

    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Debug, Args)]
pub struct StubsArgs {
    /// TOML file declaring binding namespaces.
    #[arg(long, value_name = "FILE.toml")]
    bindings: PathBuf,
}

fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")
}

async fn load(path: Option<&PathBuf>, limits: pycage_bindings::slots::SlotLimits) -> anyhow::Result<Bindings> {
    match path {
        Some(p) => Ok(Bindings::load_with(p, limits).await?),
        None => Ok(Bindings::empty()),
    }
}

pub fn stubs(args: StubsArgs) -> anyhow::Result<ExitCode> {
    tokio_runtime()?.block_on(async move {
        let bindings = load(Some(&args.bindings), pycage_bindings::slots::SlotLimits::default()).await?;
        let text = bindings.stubs_text();
        bindings.close().await;
        // Docstrings come from the upstream servers: escaped for the terminal.
        output::stdout_texts(text.trim_end().lines()).context("cannot write the stubs")?;
        Ok(ExitCode::SUCCESS)
    })
}

pub fn serve(args: McpArgs) -> anyhow::Result<ExitCode> {
    let mut config = args.runtime.config()?;
    // A server runs many programs: the zygote's ~1 ms fork beats an
    // interpreter start per run (`run`'s one-shot choice).
    config.spawn = pycage_runtime::SpawnMode::Zygote;
    if let Some(path) = &args.bindings {
        // Checked before anything starts, so a bad file is misuse at once.
        pycage_bindings::file::read(path)?;
    }
    tokio_runtime()?.block_on(async move {
        let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
        let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        let runtime = Runtime::new(config)?;
        let bindings = match load(args.bindings.as_ref(), args.runtime.slot_limits()?).await {
            Ok(b) => b,
            Err(e) => {
                runtime.shutdown().await;
                return Err(e);
            }
        };
        let options = ServerOptions {
            max_description_bytes: args.max_description_bytes,
            expose_tools: args.expose_tools,
            max_sessions: args.max_sessions,
            session_idle: std::time::Duration::from_secs(args.session_idle_seconds),
        };
        let outcome = async {
            let server = CodeModeServer::new(runtime.clone(), bindings.clone(), &options)?;
            let shutdown = tokio_util::sync::CancellationToken::new();
            let serving = async {
                match &args.http {
                    None => pycage_mcp::serve_stdio(server).await,
                    Some(addr) => {
                        let listener = tokio::net::TcpListener::bind(addr)
                            .await
                            .map_err(|source| pycage_mcp::ServeError::Bind { addr: addr.clone(), source })?;
                        let local = listener.local_addr().map_err(pycage_mcp::ServeError::Http)?;
                        output::stderr_line(&format!("pycage mcp: serving http://{local}/mcp"));
                        pycage_mcp::serve_http(server, listener, shutdown.clone()).await
                    }
                }
            };
            tokio::select! {
                r = serving => r.map_err(anyhow::Error::from),
                _ = int.recv() => Ok(()),
                _ = term.recv() => Ok(()),
            }
        }
        .await;
        runtime.shutdown().await;
        bindings.close().await;
        outcome.map(|()| ExitCode::SUCCESS)
    })
}
