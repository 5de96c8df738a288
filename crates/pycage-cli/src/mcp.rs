//! `pycage mcp` (code mode over MCP) and `pycage stubs`.
//!
//! Both load the bindings file (connecting its MCP servers once). `mcp`
//! serves on stdin/stdout, where stdout belongs to the protocol and nothing
//! else is written to it, or with `--http ADDR` on `http://ADDR/mcp`,
//! announcing the bound address on stderr (`--http 127.0.0.1:0` picks a
//! free port). Bearer tokens come from environment variables named on the
//! command line, never from the command line itself; `--http` on an address
//! that is not loopback without a token is refused unless
//! `--insecure-no-auth` says so (and then warned about). SIGINT/SIGTERM (or
//! the client closing stdio) stop it; every run is aborted and every
//! upstream server stopped before it exits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use pycage_bindings::Bindings;
use pycage_mcp::{BearerToken, CodeModeServer, HttpOptions, InputLimits, ServerOptions};
use pycage_runtime::Runtime;
use tokio::signal::unix::{signal, SignalKind};

use crate::common::RuntimeArgs;
use crate::output;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// TOML file declaring binding namespaces (commands, HTTP endpoints, MCP servers).
    #[arg(long, value_name = "FILE.toml")]
    bindings: Option<PathBuf>,

    /// Serve streamable HTTP on ADDR (host:port) at /mcp instead of stdio.
    /// On anything but loopback, also pass --auth-token-env (or
    /// --insecure-no-auth).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,

    /// With --http on an address that is not loopback: serve without a
    /// bearer token, so that anyone who can reach the address can run
    /// programs here. Refused without it.
    #[arg(long)]
    insecure_no_auth: bool,

    /// With --http: also accept requests whose Host header (or absolute
    /// target) names NAME (NAME:PORT for one port only), for clients that
    /// reach the server by a name. Loopback names and the address a client
    /// connected to are always accepted. Repeatable.
    #[arg(long, value_name = "NAME")]
    allow_host: Vec<String>,

    /// With --http: require `Authorization: Bearer <token>`, the token read
    /// from the environment variable VAR (never from the command line).
    /// Repeatable: each token is its own client.
    #[arg(long, value_name = "VAR")]
    auth_token_env: Vec<String>,

    /// With --http: also accept requests from this browser origin
    /// (scheme://host, scheme://host:port, :* for any port, or null). Absent and
    /// loopback origins are always accepted. Repeatable.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,

    /// With --http: TCP connections served at once; one more is answered
    /// 503 and closed. Keep it well below `ulimit -n`.
    #[arg(long, value_name = "N", default_value_t = pycage_mcp::DEFAULT_MAX_CONNECTIONS,
          value_parser = at_least_one::<usize>)]
    max_http_connections: usize,

    /// With --http: TCP connections one client may hold at once (one
    /// token; without tokens, one source address, every loopback address
    /// together); one more is answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = pycage_mcp::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
          value_parser = at_least_one::<usize>)]
    max_http_connections_per_client: usize,

    /// With --http: a connection that has not sent a request's headers this
    /// many seconds after opening (or after its previous response) is
    /// closed. Responses in flight are never cut.
    #[arg(long, value_name = "N", default_value_t = pycage_mcp::DEFAULT_HEADER_TIMEOUT.as_secs(),
          value_parser = at_least_one::<u64>)]
    http_header_timeout_seconds: u64,

    /// With --http: a request body must arrive within N seconds, plus one
    /// second per --http-min-body-rate bytes received; else 408 and the
    /// connection is closed.
    #[arg(long, value_name = "N", default_value_t = pycage_mcp::DEFAULT_BODY_TIMEOUT.as_secs(),
          value_parser = at_least_one::<u64>)]
    http_body_timeout_seconds: u64,

    /// With --http: bytes per second a request body must keep up after
    /// --http-body-timeout-seconds (see there).
    #[arg(long, value_name = "BYTES", default_value_t = pycage_mcp::DEFAULT_MIN_BODY_RATE,
          value_parser = at_least_one::<u64>)]
    http_min_body_rate: u64,

    /// With --http: a run of an MCP session whose request lost its response
    /// stream (its connection dropped) is aborted after N seconds unless the
    /// client resumes the stream (GET with Last-Event-ID) by then. A
    /// stateless request's run ends with its connection at once.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().resume_grace.as_secs())]
    resume_grace_seconds: u64,

    /// With --http: MCP sessions (Mcp-Session-Id) alive at once; an
    /// initialize beyond them is answered 503.
    #[arg(long, value_name = "N", default_value_t = pycage_mcp::DEFAULT_MAX_MCP_SESSIONS,
          value_parser = at_least_one::<usize>)]
    max_mcp_sessions: usize,

    /// Also list every upstream MCP tool and forward calls to it unchanged.
    #[arg(long)]
    expose_tools: bool,

    /// Largest run_python description; over it, stubs shrink to one line per function.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().max_description_bytes)]
    max_description_bytes: usize,

    /// Named sessions (run_python's `session`) open at once, all clients together.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().max_sessions,
          value_parser = at_least_one::<usize>)]
    max_sessions: usize,

    /// Named sessions one client may hold open.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().max_sessions_per_client,
          value_parser = at_least_one::<usize>)]
    max_sessions_per_client: usize,

    /// run_python calls one client may have in flight (every client of one
    /// token together); more are refused at once, so one client cannot
    /// queue every other client's runs behind its own.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().max_runs_per_client,
          value_parser = at_least_one::<usize>)]
    max_runs_per_client: usize,

    /// Programs run at once, all clients together; more wait, and clients
    /// take turns (one client's backlog never queues another's first run
    /// behind more than one of its own).
    #[arg(long, value_name = "N", default_value_t = pycage_runtime::RuntimeConfig::default().max_concurrent_runs,
          value_parser = at_least_one::<usize>)]
    max_concurrent_runs: usize,

    /// A session ends after this many seconds without a run (at least 1).
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().session_idle.as_secs(),
          value_parser = at_least_one::<u64>)]
    session_idle_seconds: u64,

    /// Input files (run_python's `files`) per call.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().input_limits.max_files)]
    max_input_files: usize,

    /// Bytes of one input file.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().input_limits.max_file_bytes)]
    max_input_file_bytes: u64,

    /// Bytes of all input files of one call.
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().input_limits.max_total_bytes)]
    max_input_bytes: u64,

    /// Most bytes of out/ returned embedded in one result (without --output-dir).
    #[arg(long, value_name = "N", default_value_t = ServerOptions::default().max_embedded_bytes)]
    max_embedded_bytes: u64,

    /// Copy each run's out/ to a new subdirectory of DIR and return resource
    /// links (file:// on this host) instead of embedding the files.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,

    #[command(flatten)]
    runtime: RuntimeArgs,
}

/// A count of at least 1.
fn at_least_one<T: std::str::FromStr<Err = std::num::ParseIntError> + PartialEq + From<u8>>(
    s: &str,
) -> Result<T, String> {
    match s.parse::<T>() {
        Ok(n) if n == T::from(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Debug, Args)]
pub struct StubsArgs {
    /// TOML file declaring binding namespaces.
    #[arg(long, value_name = "FILE.toml")]
    bindings: PathBuf,
}

async fn load(path: Option<&PathBuf>, limits: pycage_bindings::slots::SlotLimits) -> anyhow::Result<Bindings> {
    match path {
        Some(p) => Ok(Bindings::load_with(p, limits).await?),
        None => Ok(Bindings::empty()),
    }
}

pub fn stubs(args: StubsArgs) -> anyhow::Result<ExitCode> {
    crate::common::tokio_runtime()?.block_on(async move {
        let bindings = load(Some(&args.bindings), pycage_bindings::slots::SlotLimits::default()).await?;
        let text = bindings.stubs_text();
        bindings.close().await;
        // Docstrings come from the upstream servers: escaped for the terminal.
        output::stdout_texts(text.trim_end().lines()).context("cannot write the stubs")?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The HTTP gate's options: tokens read from the environment.
fn http_options(args: &McpArgs) -> anyhow::Result<HttpOptions> {
    if args.http.is_none()
        && (!args.auth_token_env.is_empty()
            || !args.allow_origin.is_empty()
            || !args.allow_host.is_empty()
            || args.insecure_no_auth)
    {
        anyhow::bail!(
            "--auth-token-env, --allow-origin, --allow-host and --insecure-no-auth need --http (stdio has one \
             client, and no origins, hosts or tokens)"
        );
    }
    if args.insecure_no_auth && !args.auth_token_env.is_empty() {
        anyhow::bail!("--insecure-no-auth and --auth-token-env contradict each other: pass one of them");
    }
    let mut tokens = Vec::with_capacity(args.auth_token_env.len());
    for var in &args.auth_token_env {
        let token = std::env::var(var)
            .map_err(|_| anyhow::anyhow!("--auth-token-env {var}: the variable is not set (or not UTF-8)"))?;
        tokens.push(BearerToken { name: var.clone(), token });
    }
    let http = HttpOptions {
        allowed_origins: args.allow_origin.clone(),
        allowed_hosts: args.allow_host.clone(),
        tokens,
        max_connections: args.max_http_connections,
        max_connections_per_client: args.max_http_connections_per_client,
        header_timeout: std::time::Duration::from_secs(args.http_header_timeout_seconds),
        body_timeout: std::time::Duration::from_secs(args.http_body_timeout_seconds),
        min_body_rate: args.http_min_body_rate,
        max_mcp_sessions: args.max_mcp_sessions,
    };
    // Messages name the variable, never the token.
    http.validate().map_err(|e| anyhow::anyhow!("--auth-token-env / --allow-origin / --allow-host: {e}"))?;
    Ok(http)
}

fn server_options(args: &McpArgs) -> anyhow::Result<ServerOptions> {
    let output_dir = match &args.output_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("--output-dir {}", dir.display()))?;
            Some(std::path::absolute(dir).with_context(|| format!("--output-dir {}", dir.display()))?)
        }
        None => None,
    };
    let options = ServerOptions {
        max_description_bytes: args.max_description_bytes,
        expose_tools: args.expose_tools,
        max_sessions: args.max_sessions,
        max_sessions_per_client: args.max_sessions_per_client,
        max_runs_per_client: args.max_runs_per_client,
        session_idle: std::time::Duration::from_secs(args.session_idle_seconds),
        resume_grace: std::time::Duration::from_secs(args.resume_grace_seconds),
        input_limits: InputLimits {
            max_files: args.max_input_files,
            max_file_bytes: args.max_input_file_bytes,
            max_total_bytes: args.max_input_bytes,
        },
        max_embedded_bytes: args.max_embedded_bytes,
        output_dir,
    };
    options.validate().map_err(|e| anyhow::anyhow!(e))?;
    Ok(options)
}

/// Refuses `--http ADDR` on an address that is not loopback without a
/// token, unless `--insecure-no-auth` says so. A name is resolved here
/// (the bind resolves it again; both must be loopback for it to pass).
fn check_exposure(args: &McpArgs, http: &HttpOptions) -> anyhow::Result<()> {
    use std::net::ToSocketAddrs;
    let Some(addr) = &args.http else { return Ok(()) };
    if !http.tokens.is_empty() || args.insecure_no_auth {
        return Ok(());
    }
    let resolved: Vec<std::net::SocketAddr> = match addr.to_socket_addrs() {
        Ok(a) => a.collect(),
        // The bind reports what is wrong with the address.
        Err(_) => return Ok(()),
    };
    if let Some(open) = resolved.iter().find(|a| !loopback(a)) {
        anyhow::bail!(no_token_message(addr, open));
    }
    Ok(())
}

fn no_token_message(addr: &str, open: &std::net::SocketAddr) -> String {
    let shown = if addr == open.to_string() { addr.to_owned() } else { format!("{addr} ({open})") };
    format!(
        "--http {shown} is not a loopback address and no --auth-token-env is set: anyone who can reach it could \
         run programs here. Set a token (--auth-token-env VAR, the token in $VAR, at least {} bytes), serve on \
         127.0.0.1, or pass --insecure-no-auth to serve without one anyway",
        pycage_mcp::MIN_TOKEN_BYTES
    )
}

/// Whether `addr` is a loopback address.
fn loopback(addr: &std::net::SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

pub fn serve(args: McpArgs) -> anyhow::Result<ExitCode> {
    let mut config = args.runtime.config()?;
    // A server runs many programs: the zygote's ~1 ms fork beats an
    // interpreter start per run (`run`'s one-shot choice).
    config.spawn = pycage_runtime::SpawnMode::Zygote;
    // The server admits runs itself, in turn across clients, as many as
    // the runtime runs at once (so the runtime's own queue stays empty).
    config.max_concurrent_runs = args.max_concurrent_runs;
    let http = http_options(&args)?;
    check_exposure(&args, &http)?;
    let options = server_options(&args)?;
    // What a run's out/ may hold on the way back: the copy stops where
    // the result could not carry it anyway.
    // (With --output-dir, --max-output-bytes bounds each run's copy.)
    if options.output_dir.is_none() {
        config.max_output_bytes = options.max_embedded_bytes;
    }
    if let Some(path) = &args.bindings {
        // Checked before anything starts, so a bad file is misuse at once.
        let file = pycage_bindings::file::read(path)?;
        if crate::journal::needs_approval(&file) {
            // Suspended runs wait in this process for resume_python: their
            // journals never leave it, so a key of its own signs them.
            let key = pycage_runtime::JournalKey::random().context("cannot make a journal key")?;
            config.journal_key = Some(key);
        }
    }
    crate::common::tokio_runtime()?.block_on(async move {
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
                        if http.tokens.is_empty() && !loopback(&local) {
                            if !args.insecure_no_auth {
                                // The name resolved to loopback, then not.
                                return Err(pycage_mcp::ServeError::Options(no_token_message(addr, &local)));
                            }
                            output::warning(&format!(
                                "--http {local} is not a loopback address and --insecure-no-auth is set: anyone \
                                 who can reach it can run programs here"
                            ));
                        }
                        output::stderr_line(&format!("pycage mcp: serving http://{local}/mcp"));
                        pycage_mcp::serve_http(server, listener, &http, shutdown.clone()).await
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
