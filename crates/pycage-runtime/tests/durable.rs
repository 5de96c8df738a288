//! Durable runs (`docs/durable.md`): a run suspends at a call that needs
//! approval, and resumes from its journal in another runtime; replay,
//! divergence, refused journals, budgets and hostile programs.

mod common;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use pycage_journal::{Event, Journal, JournalKey};
use pycage_runtime::*;

const KEY: &str = "durable-test key, not a real secret";

fn key() -> JournalKey {
    JournalKey::new(KEY).unwrap()
}

fn durable_runtime() -> Runtime {
    runtime_with(|c| c.journal_key = Some(key()))
}

fn json(text: &str) -> JsonValue {
    JsonValue::parse(text.as_bytes()).unwrap()
}

/// `tools.lookup` (counts its calls, returns 40) and `tools.pay` (needs
/// approval; would return "paid!" if it ever ran).
fn gate(lookups: &Arc<AtomicU64>, paid: &Arc<AtomicU64>) -> Namespace {
    let (l, p) = (Arc::clone(lookups), Arc::clone(paid));
    Namespace::new("tools")
        .with_function(
            "lookup",
            Binding::new(move |_| {
                let l = Arc::clone(&l);
                async move {
                    l.fetch_add(1, Ordering::SeqCst);
                    Ok(json("40"))
                }
            }),
        )
        .with_function(
            "pay",
            Binding::new(move |_| {
                let p = Arc::clone(&p);
                async move {
                    p.fetch_add(1, Ordering::SeqCst);
                    Ok(json("\"paid!\""))
                }
            })
            .requiring_approval(),
        )
        .with_error_class(ErrorClass { name: "ToolError".into(), member_name_property: "tool".into() })
}

const GATE: &str = r#"
print("looking up")
amount = await tools.lookup({"invoice": 7})
print("paying", amount)
receipt = await tools.pay({"amount": amount + 2, "to": "ACME"})
print("paid", receipt)
return {"amount": amount, "receipt": receipt}
"#;

fn suspension(r: &RunResult) -> &Suspension {
    let (kind, message) = failure(r);
    assert_eq!(kind, FailureKind::Suspended, "{message}");
    r.suspension.as_ref().unwrap()
}

#[tokio::test]
async fn an_approval_gate_suspends_and_resumes_in_another_runtime() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = durable_runtime();
    let r = rt.run(RunRequest::new(GATE).with_namespace(gate(&lookups, &paid))).await.unwrap();
    let s = suspension(&r).clone();
    assert_eq!((s.call.global.as_str(), s.call.name.as_str()), ("tools", "pay"));
    assert_eq!(s.call.args.to_string(), r#"{"amount":42,"to":"ACME"}"#);
    assert_eq!(s.reason, "approval required");
    assert_eq!(r.logs, ["looking up", "paying 40"]);
    assert!(r.error.as_ref().unwrap().message.contains("suspended at tools.pay"), "{r:?}");
    let shown = r.to_json().to_string();
    let expected = r#""suspended":{"call":{"global":"tools","name":"pay","args":{"amount":42,"to":"ACME"}},"#;
    assert!(shown.contains(expected), "{shown}");
    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (1, 0));
    rt.shutdown().await;

    // Another runtime, as another process would have: the bindings again,
    // the journal and the approver's answer.
    let rt = durable_runtime();
    let request = RunRequest::default()
        .with_namespace(gate(&lookups, &paid))
        .resuming(s.journal.clone(), Answer::Reply(json(r#""receipt-123""#)));
    let r = rt.run(request).await.unwrap();
    assert_eq!(value(&r), r#"{"amount":40,"receipt":"receipt-123"}"#);
    assert_eq!(r.logs, ["paid receipt-123"], "the first two lines were delivered before");
    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (1, 0), "lookup ran once in all");
    rt.shutdown().await;
}

#[tokio::test]
async fn a_denial_raises_the_error_class_and_the_program_may_catch_it() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = durable_runtime();
    let program = r#"
amount = await tools.lookup()
try:
    return await tools.pay({"amount": amount})
except ToolError as e:
    return {"fallback": str(e), "tool": e.tool}
"#;
    let r = rt.run(RunRequest::new(program).with_namespace(gate(&lookups, &paid))).await.unwrap();
    let journal = suspension(&r).journal.clone();
    let request = RunRequest::default()
        .with_namespace(gate(&lookups, &paid))
        .resuming(journal, Answer::Deny("the approver said no".into()));
    let r = rt.run(request).await.unwrap();
    assert_eq!(value(&r), r#"{"fallback":"the approver said no","tool":"pay"}"#);
    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (1, 0));
}
