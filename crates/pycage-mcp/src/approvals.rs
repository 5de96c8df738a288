//! Approval gates in `pycage mcp` (`docs/durable.md`): calls that need a
//! person's approval (`approval` in the bindings file), asked for in one of
//! two ways, chosen per `run_python` call.
//!
//! - The client declared form elicitation, on a protocol that lets a server
//!   ask (before 2026-07-28): the call asks it (`elicitation/create`)
//!   inside the same `run_python` call ([`asking`]). Approved, the binding
//!   runs and the program goes on, without a replay; declined or
//!   cancelled, the call raises the namespace's error class. The person's
//!   time counts against the run's wall clock.
//! - Otherwise the run suspends. Its journal stays here ([`Approvals`]),
//!   under an unguessable token bound to the client that started the run;
//!   the result carries the pending call and the token. `resume_python(token,
//!   approve, message)`, from the same client, answers it: approved, the
//!   binding runs then (once) and its result is the call's; denied, the
//!   call raises the error class with `message`. The run replays from its
//!   journal and goes on, and may suspend again (a new token).
//!
//! The server's journal key is made when it starts and never leaves the
//! process, so a journal does not outlive the server; nor [`PARKED_TTL`].
//! At most [`MAX_PARKED_PER_CLIENT`] runs wait per client and
//! [`MAX_PARKED`] in all: past that a suspended run is refused (it is
//! lost), and the client told to answer the waiting ones first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pycage_runtime::{Binding, BindingError, JsonValue, Namespace, PendingCall, Suspension};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema, JsonObject, Tool};
use rmcp::service::{Peer, RoleServer};
use serde_json::{json, Value};

use crate::clients::{fill_random, Owner, Refusal};
use crate::files::Inputs;

/// The tool that answers a suspended run.
pub const RESUME_PYTHON: &str = "resume_python";

/// Runs waiting for an answer, per client.
pub const MAX_PARKED_PER_CLIENT: usize = 16;

/// Runs waiting for an answer, all clients together.
pub const MAX_PARKED: usize = 256;

/// How long a suspended run waits for its answer.
pub const PARKED_TTL: Duration = Duration::from_secs(24 * 3600);

/// Bytes of randomness in a resume token (base64url: 22 characters).
const TOKEN_BYTES: usize = 16;

/// A suspended run, kept for its client.
pub(crate) struct Parked {
    owner: Owner,
    since: Instant,
    pub journal: Vec<u8>,
    pub call: PendingCall,
    /// The run's input files, kept for its replay.
    pub inputs: Option<Inputs>,
}

/// The suspended runs of a server (see the module docs).
#[derive(Default)]
pub(crate) struct Approvals {
    parked: Mutex<HashMap<String, Parked>>,
}

impl Approvals {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Parked>> {
        self.parked.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `suspension`'s journal for `owner`; its token.
    pub(crate) fn park(&self, owner: &Owner, s: Suspension, inputs: Option<Inputs>) -> Result<String, Refusal> {
        let mut parked = self.lock();
        parked.retain(|_, p| p.since.elapsed() < PARKED_TTL);
        let mine = parked.values().filter(|p| p.owner == *owner).count();
        if mine >= MAX_PARKED_PER_CLIENT || parked.len() >= MAX_PARKED {
            return Err(Refusal(format!(
                "the run suspended at {}.{}, and it cannot wait: {} runs already wait for approval (at most \
                 {MAX_PARKED_PER_CLIENT} per client, {MAX_PARKED} in all); answer them with {RESUME_PYTHON} first, \
                 then run this program again",
                s.call.global,
                s.call.name,
                if mine >= MAX_PARKED_PER_CLIENT { mine } else { parked.len() }
            )));
        }
        let token = token();
        parked.insert(
            token.clone(),
            Parked { owner: owner.clone(), since: Instant::now(), journal: s.journal, call: s.call, inputs },
        );
        Ok(token)
    }

    /// The run `token` names, taken, when `owner` parked it. Another
    /// client's token is refused as an unknown one: nothing tells a client
    /// that another's exists.
    pub(crate) fn take(&self, owner: &Owner, token: &str) -> Result<Parked, Refusal> {
        let mut parked = self.lock();
        parked.retain(|_, p| p.since.elapsed() < PARKED_TTL);
        match parked.get(token) {
            Some(p) if p.owner == *owner => Ok(parked.remove(token).ok_or_else(unknown)?),
            _ => Err(unknown()),
        }
    }
}

fn unknown() -> Refusal {
    Refusal(format!(
        "no run waits for approval under this token for this client: it was answered already, it expired \
         ({} h), the server restarted, or another client started it",
        PARKED_TTL.as_secs() / 3600
    ))
}

/// A fresh token.
fn token() -> String {
    use base64::Engine;
    let mut bytes = [0u8; TOKEN_BYTES];
    fill_random(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether any function of `namespaces` needs approval.
pub(crate) fn needs_approval(namespaces: &[Namespace]) -> bool {
    namespaces.iter().any(|ns| ns.functions.keys().any(|n| ns.needs_approval(n)))
}

/// Every function of `namespaces` that needs approval, as `global.name`.
pub(crate) fn approval_names(namespaces: &[Namespace]) -> Vec<String> {
    let mut names = Vec::new();
    for ns in namespaces {
        names.extend(ns.functions.keys().filter(|n| ns.needs_approval(n)).map(|n| format!("{}.{n}", ns.global)));
    }
    names
}

/// The binding a pending call names.
pub(crate) fn binding_of(namespaces: &[Namespace], call: &PendingCall) -> Option<Binding> {
    namespaces.iter().find(|ns| ns.global == call.global).and_then(|ns| ns.functions.get(&call.name)).cloned()
}

/// `namespaces`, each function that needs approval replaced by one that
/// asks the client first (see the module docs).
pub(crate) fn asking(namespaces: &[Namespace], peer: &Peer<RoleServer>) -> Vec<Namespace> {
    namespaces
        .iter()
        .map(|ns| {
            let mut ns = ns.clone();
            let gated: Vec<String> = ns.functions.keys().filter(|n| ns.needs_approval(n)).cloned().collect();
            for name in gated {
                let Some(real) = ns.functions.get(&name).cloned() else { continue };
                let (peer, label) = (peer.clone(), Arc::new(format!("{}.{name}", ns.global)));
                let asked = Binding::with_context(move |args, cx| {
                    let (real, peer, label) = (real.clone(), peer.clone(), Arc::clone(&label));
                    async move {
                        ask(&peer, &label, &args).await?;
                        real.call(args, cx).await
                    }
                });
                ns.functions.insert(name, asked);
            }
            ns.approval.clear();
            ns
        })
        .collect()
}

/// Asks the client whether `label(args)` may run: `Ok` when approved, the
/// program's error otherwise.
async fn ask(peer: &Peer<RoleServer>, label: &str, args: &JsonValue) -> Result<(), BindingError> {
    let mut shown = args.to_string();
    if shown.len() > 2000 {
        let mut cut = 2000;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push_str("...");
    }
    let schema = ElicitationSchema::builder()
        .required_bool("approve")
        .optional_string("message")
        .description("approve: true runs the call; false refuses it, with message as the reason")
        .build_unchecked();
    let request = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!("A program asks to call {label}({shown}), which needs your approval. Approve it?"),
        requested_schema: schema,
    };
    let answer = peer
        .create_elicitation(request)
        .await
        .map_err(|e| BindingError::new(format!("{label} needs approval, and asking for it failed: {e}")))?;
    let content = answer.content.unwrap_or(Value::Null);
    let approved = matches!(answer.action, ElicitationAction::Accept) && content.get("approve") == Some(&json!(true));
    if approved {
        return Ok(());
    }
    let why = content.get("message").and_then(Value::as_str).filter(|m| !m.is_empty());
    Err(BindingError::new(match (answer.action, why) {
        (_, Some(why)) => format!("the user refused {label}: {why}"),
        (ElicitationAction::Cancel, None) => format!("the user dismissed the approval of {label}"),
        (_, None) => format!("the user refused {label}"),
    }))
}

/// The `resume_python` tool as listed.
pub(crate) fn resume_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "token": {"type": "string", "description": "The resume_token of the run_python result that is waiting for approval."},
            "approve": {"type": "boolean", "description": "true: the call runs now and the program goes on with its result; false: the call raises the namespace's error in the program."},
            "message": {"type": "string", "description": "With approve false: the reason the program sees."}
        },
        "required": ["token", "approve"],
        "additionalProperties": false
    });
    let Value::Object(schema) = schema else { return Tool::new(RESUME_PYTHON, "", Arc::new(JsonObject::new())) };
    Tool::new(
        RESUME_PYTHON,
        "Answer a run_python call that stopped at a function needing a person's approval (its result has a \
         resume_token). Ask the user first. Approved, the function runs and the program goes on from where it \
         stopped (nothing before it runs again); refused, the program sees an error with your message. The result \
         is run_python's, and may wait for approval again.",
        Arc::new(schema),
    )
}
