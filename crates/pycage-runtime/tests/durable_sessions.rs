//! Durable sessions (`docs/durable.md`, "Sessions"): a session's cell
//! suspends at a call that needs approval, and `Runtime::resume_session`
//! replays the earlier cells in a new session before it resumes the
//! suspended one; denials, divergence, refused journals, a second
//! suspension, and sessions that do not record.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use pycage_journal::{Journal, JournalError, JournalKey};
use pycage_runtime::*;

const KEY: &str = "durable-session test key, not a secret";

fn key() -> JournalKey {
    JournalKey::new(KEY).unwrap()
}

fn durable_runtime() -> Runtime {
    runtime_with(|c| c.journal_key = Some(key()))
}

fn json(text: &str) -> JsonValue {
    JsonValue::parse(text.as_bytes()).unwrap()
}

/// `tools.lookup` (counts its calls, returns 40 + its argument) and
/// `tools.pay` (needs approval; counts the times it ever ran).
fn gate(lookups: &Arc<AtomicU64>, paid: &Arc<AtomicU64>) -> Namespace {
    let (l, p) = (Arc::clone(lookups), Arc::clone(paid));
    Namespace::new("tools")
        .with_function(
            "lookup",
            Binding::new(move |args| {
                let l = Arc::clone(&l);
                async move {
                    l.fetch_add(1, Ordering::SeqCst);
                    let n = args.root().as_number().and_then(|n| n.as_i64()).unwrap_or(0);
                    Ok(json(&(40 + n).to_string()))
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

fn options(ns: Namespace) -> SessionOptions {
    SessionOptions::default().with_namespace(ns)
}

/// Cell 1 sets globals (one from a binding, one from `random`); cell 2
/// prints, then asks for approval with an amount computed from them.
const CELL1: &str = r#"
import random
base = await tools.lookup(2)
draw = random.randrange(1_000_000)
ledger = [base]
print("cell 1 ran")
return base
"#;

const CELL2: &str = r#"
print("paying", base)
receipt = await tools.pay({"amount": base + 1})
ledger.append(receipt)
return {"base": base, "receipt": receipt, "draw": draw}
"#;

fn suspension(r: &RunResult) -> &Suspension {
    let (kind, message) = failure(r);
    assert_eq!(kind, FailureKind::Suspended, "{message}");
    r.suspension.as_ref().unwrap()
}

/// Opens a session on `rt`, runs cell 1 and cell 2 (which suspends).
async fn suspended_session(rt: &Runtime, lookups: &Arc<AtomicU64>, paid: &Arc<AtomicU64>) -> (Suspension, String) {
    let session = rt.session(options(gate(lookups, paid))).unwrap();
    let r = session.run(CELL1).await.unwrap();
    assert_eq!(value(&r), "42");
    let draw = value(&session.run("return draw").await.unwrap());
    let r = session.run(CELL2).await.unwrap();
    let s = suspension(&r).clone();
    assert_eq!((s.call.global.as_str(), s.call.name.as_str()), ("tools", "pay"));
    assert_eq!(s.call.args.to_string(), r#"{"amount":43}"#);
    assert_eq!(r.logs, ["paying 42"]);
    assert!(r.error.as_ref().unwrap().message.contains("the session has ended"), "{r:?}");
    // The session is over, as after any run that took its process.
    let e = session.run("return 1").await.unwrap_err();
    assert!(matches!(&e, SessionError::Ended(why) if why.contains("suspended")), "{e}");
    (s, draw)
}

#[tokio::test]
async fn a_session_cell_suspends_and_resumes_in_another_runtime_with_its_globals() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = durable_runtime();
    let (s, draw) = suspended_session(&rt, &lookups, &paid).await;
    let journal = Journal::open(&s.journal, &key(), u64::MAX).unwrap();
    let cells: Vec<&str> = journal.session.as_ref().unwrap().iter().map(|c| c.program.as_str()).collect();
    assert_eq!(cells, [CELL1, "return draw"], "the earlier cells, in order");
    assert_eq!(journal.program, CELL2);
    rt.shutdown().await;
    assert_eq!(lookups.load(Ordering::SeqCst), 1);

    // Another runtime with the same key: the journal, the bindings again,
    // the approver's answer.
    let rt = durable_runtime();
    let (session, r) =
        rt.resume_session(&s.journal, Answer::Reply(json(r#""R-7""#)), options(gate(&lookups, &paid))).await.unwrap();
    // The cell's value needs cell 1's globals (base, draw: the same
    // `random` draw) and the reply.
    assert_eq!(value(&r), format!(r#"{{"base":42,"receipt":"R-7","draw":{draw}}}"#));
    assert!(r.logs.is_empty(), "the earlier cells' output and the cell's first line were delivered before: {r:?}");
    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (1, 0), "lookup ran once in all");
    // The session goes on: cell 3 sees the globals, and calls live.
    let r = session.run("return {'ledger': ledger, 'more': await tools.lookup(0)}").await.unwrap();
    assert_eq!(value(&r), r#"{"ledger":[42,"R-7"],"more":40}"#);
    assert_eq!(lookups.load(Ordering::SeqCst), 2);
    session.close().await;
    rt.shutdown().await;
}

#[tokio::test]
async fn a_denial_raises_in_the_cell_and_a_resumed_session_may_suspend_again() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = durable_runtime();
    let session = rt.session(options(gate(&lookups, &paid))).unwrap();
    session.run("base = await tools.lookup(0)").await.unwrap();
    let cell = r#"
try:
    outcome = await tools.pay({"amount": base})
except ToolError as e:
    outcome = f"refused: {e} ({e.tool})"
return outcome
"#;
    let r = session.run(cell).await.unwrap();
    let journal = suspension(&r).journal.clone();
    let (session, r) = rt
        .resume_session(&journal, Answer::Deny("over the limit".into()), options(gate(&lookups, &paid)))
        .await
        .unwrap();
    assert_eq!(value(&r), r#""refused: over the limit (pay)""#);
    // The resumed session records: a later cell suspends again, and its
    // journal holds the two cells before it, the denied one included.
    let r = session.run("n = await tools.lookup(1)\nreturn await tools.pay(outcome)").await.unwrap();
    let second = suspension(&r).clone();
    assert_eq!(second.call.args.to_string(), r#""refused: over the limit (pay)""#);
    let opened = Journal::open(&second.journal, &key(), u64::MAX).unwrap();
    assert_eq!(opened.session.as_ref().unwrap().len(), 2);
    let (session, r) =
        rt.resume_session(&second.journal, Answer::Reply(json("3")), options(gate(&lookups, &paid))).await.unwrap();
    assert_eq!(value(&r), "3");
    assert_eq!(
        value(&session.run("return [base, outcome, n]").await.unwrap()),
        r#"[40,"refused: over the limit (pay)",41]"#
    );
    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (2, 0), "each lookup ran once");
    session.close().await;
    rt.shutdown().await;
}

#[tokio::test]
async fn tampered_foreign_and_cross_kind_journals_are_refused_before_anything_runs() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = durable_runtime();
    let (s, _) = suspended_session(&rt, &lookups, &paid).await;
    let resume = |rt: Runtime, journal: Vec<u8>, ns: Namespace| async move {
        rt.resume_session(&journal, Answer::Reply(json("1")), options(ns)).await.map(|(_, r)| r)
    };
    let mut flipped = s.journal.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 1;
    let e = resume(rt.clone(), flipped, gate(&lookups, &paid)).await.unwrap_err();
    assert!(matches!(e, SessionError::Misuse(MisuseError::Journal(JournalError::Signature))), "{e}");
    let other = runtime_with(|c| c.journal_key = Some(JournalKey::new("another key of enough bytes").unwrap()));
    let e = resume(other, s.journal.clone(), gate(&lookups, &paid)).await.unwrap_err();
    assert!(matches!(e, SessionError::Misuse(MisuseError::Journal(JournalError::Signature))), "{e}");
    let renamed = Namespace::new("tools").with_function("lookup", Binding::new(|_| async { Ok(json("1")) }));
    let e = resume(rt.clone(), s.journal.clone(), renamed).await.unwrap_err();
    assert!(e.to_string().contains("the bindings differ"), "{e}");
    let e = resume(runtime(), s.journal.clone(), gate(&lookups, &paid)).await.unwrap_err();
    assert!(matches!(e, SessionError::Misuse(MisuseError::NoJournalKey(_))), "{e}");

    // A session's journal is not a run's ...
    let request = RunRequest::default()
        .with_namespace(gate(&lookups, &paid))
        .resuming(s.journal.clone(), Answer::Reply(json("1")));
    let e = rt.run(request).await.unwrap_err();
    assert!(matches!(e, MisuseError::Journal(JournalError::SessionJournal)), "{e}");
    assert!(e.to_string().contains("resume it as a session (Runtime::resume_session"), "{e}");
    // ... nor a run's a session's.
    let r = rt.run(RunRequest::new("await tools.pay(1)").with_namespace(gate(&lookups, &paid))).await.unwrap();
    let run_journal = suspension(&r).journal.clone();
    let e = resume(rt.clone(), run_journal, gate(&lookups, &paid)).await.unwrap_err();
    assert!(matches!(e, SessionError::Misuse(MisuseError::Journal(JournalError::RunJournal))), "{e}");
    assert!(e.to_string().contains("resume it as a run"), "{e}");
    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (1, 0), "nothing ran");
    // And the journal still resumes as it is.
    let r = resume(rt.clone(), s.journal, gate(&lookups, &paid)).await.unwrap();
    assert!(value(&r).contains(r#""receipt":1"#), "{r:?}");
    rt.shutdown().await;
}

#[tokio::test]
async fn an_earlier_cell_that_takes_another_path_diverges_and_nothing_live_is_called() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("flag");
    let rt = runtime_with(|c| {
        c.journal_key = Some(key());
        c.isolation = Isolation::Process;
    });
    let session = rt.session(options(gate(&lookups, &paid))).unwrap();
    // Cell 1 branches on a file, which is not recorded.
    let cell1 = format!("import os\nx = await tools.lookup(1 if os.path.exists({:?}) else 0)", flag.to_str().unwrap());
    session.run(cell1.as_str()).await.unwrap();
    let r = session.run("await tools.pay(x)").await.unwrap();
    let journal = suspension(&r).journal.clone();
    std::fs::write(&flag, "now it exists").unwrap();
    let (session, r) =
        rt.resume_session(&journal, Answer::Reply(json("1")), options(gate(&lookups, &paid))).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Diverged, "{message}");
    assert!(message.contains("earlier cell 1 of 1 did not replay to its end"), "{message}");
    assert!(message.contains("the journal records tools.lookup with arguments of digest"), "{message}");
    assert!(session.ended().is_some());
    assert!(matches!(session.run("return 1").await, Err(SessionError::Ended(_))));
    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (1, 0));
    rt.shutdown().await;
}

#[tokio::test]
async fn a_session_that_does_not_record_fails_the_call_saying_why() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = durable_runtime();
    let session = rt.session(SessionOptions { durable: false, ..options(gate(&lookups, &paid)) }).unwrap();
    let r = session.run("await tools.pay(1)").await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Exception);
    assert!(message.contains("this run cannot suspend"), "{message}");
    assert!(message.contains("SessionOptions::durable"), "{message}");
    // The session goes on.
    assert_eq!(value(&session.run("return 5").await.unwrap()), "5");
    // Nor does a keyless runtime's session suspend.
    let keyless = runtime();
    let session = keyless.session(options(gate(&lookups, &paid))).unwrap();
    let r = session.run("await tools.pay(1)").await.unwrap();
    assert_eq!(failure(&r).0, FailureKind::Exception);
    assert_eq!(paid.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_session_over_its_journal_budget_no_longer_suspends() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = runtime_with(|c| {
        c.journal_key = Some(key());
        c.max_journal_bytes = 8192;
    });
    let session = rt.session(options(gate(&lookups, &paid))).unwrap();
    // A cell of more than the budget's program text.
    let big = format!("pad = {:?}", "x".repeat(10_000));
    session.run(big.as_str()).await.unwrap();
    let r = session.run("await tools.pay(1)").await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Exception, "{message}");
    assert!(message.contains("cells fit max_journal_bytes"), "{message}");
    assert_eq!(value(&session.run("return len(pad)").await.unwrap()), "10000");
}

#[tokio::test]
async fn a_first_cell_that_suspends_resumes_with_no_cell_before_it() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = durable_runtime();
    let session = rt.session(options(gate(&lookups, &paid))).unwrap();
    let r = session.run("import random\nr = random.random()\nx = await tools.pay(r)\nreturn r").await.unwrap();
    let s = suspension(&r).clone();
    let journal = Journal::open(&s.journal, &key(), u64::MAX).unwrap();
    assert_eq!(journal.session.as_deref(), Some(&[][..]), "a session's journal, with no earlier cell");
    let (session, r) =
        rt.resume_session(&s.journal, Answer::Reply(json("7")), options(gate(&lookups, &paid))).await.unwrap();
    // The same draw: the replayed cell called pay with the recorded argument.
    assert_eq!(value(&r), s.call.args.to_string());
    assert_eq!(value(&session.run("return x").await.unwrap()), "7");
    session.close().await;
    rt.shutdown().await;
}
