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

/// Sleeps a random few milliseconds, so that replies complete in an
/// order nobody chose.
async fn random_sleep() {
    let ms = RandomState::new().hash_one(std::time::Instant::now()) % 15;
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test]
async fn a_gather_of_fifty_replays_its_replies_in_the_recorded_order() {
    let work = |args: JsonValue| async move {
        random_sleep().await;
        let i = args.root().as_number().and_then(|n| n.as_i64()).unwrap();
        Ok(json(&(i * 2).to_string()))
    };
    let ns = || {
        Namespace::new("tools")
            .with_function("work", Binding::new(work))
            .with_function("pay", Binding::new(|_| async { Ok(json("null")) }).requiring_approval())
    };
    let program = r#"
import asyncio
order = []
async def one(i):
    r = await (tools.pay(i) if i == 25 else tools.work(i))
    order.append(i)
    return r
results = await asyncio.gather(*(one(i) for i in range(50)))
return {"results": results, "order": order}
"#;
    let rt = durable_runtime();
    let r = rt.run(RunRequest::new(program).with_namespace(ns())).await.unwrap();
    let s = suspension(&r).clone();
    assert_eq!(s.call.args.to_string(), "25");
    // What the journal says the program was given, in order: call
    // positions are issue order, and the program issues call i i-th.
    let journal = Journal::open(&s.journal, &key(), u64::MAX).unwrap();
    let recorded: Vec<u64> = journal
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Deliver { position, .. } => Some(*position),
            Event::Issue { .. } => None,
        })
        .collect();
    assert!(recorded.iter().all(|&p| p < 25), "calls after the suspending one never started: {recorded:?}");

    let (tx, mut rx) = rt.event_channel();
    let collect = tokio::spawn(async move {
        let (mut ids, mut finished) = (std::collections::HashMap::new(), Vec::new());
        while let Some(ev) = rx.recv().await {
            match ev {
                RunEvent::Call { id, args, .. } => {
                    ids.insert(id, args.root().as_number().and_then(|n| n.as_u64()).unwrap());
                }
                RunEvent::CallFinished { id, .. } => finished.push(ids[&id]),
                _ => {}
            }
        }
        finished
    });
    let request = RunRequest::default().with_namespace(ns()).resuming(s.journal, Answer::Reply(json("\"ok\"")));
    let r = rt.run_with_events(request, tx).await.unwrap();
    let live = collect.await.unwrap();
    let v = json(&value(&r));
    let results: Vec<String> =
        v.root().get("results").unwrap().as_array().unwrap().map(|x| x.to_owned().to_string()).collect();
    let expected: Vec<String> =
        (0..50).map(|i| if i == 25 { "\"ok\"".to_owned() } else { (i * 2).to_string() }).collect();
    assert_eq!(results, expected);
    let order: Vec<u64> =
        v.root().get("order").unwrap().as_array().unwrap().map(|x| x.as_number().unwrap().as_u64().unwrap()).collect();
    // The program saw the recorded replies in their recorded order, then
    // the approved call's. (A live call that the child waits for inline,
    // the sequential fast path of `pycage.channel`, resumes before tasks
    // woken meanwhile: so the live ones are checked as a set.)
    let mut want = recorded.clone();
    want.push(25);
    let seen: Vec<u64> = order.iter().copied().filter(|i| want.contains(i)).collect();
    assert_eq!(seen, want, "order {order:?}, live {live:?}");
    let mut rest: Vec<u64> = order.iter().copied().filter(|i| !want.contains(i)).collect();
    rest.sort_unstable();
    let mut live_sorted = live.clone();
    live_sorted.sort_unstable();
    assert_eq!(rest, live_sorted);
    assert_eq!(live.len(), 50 - 1 - recorded.len(), "the live calls ran once each");
}

#[tokio::test]
async fn a_program_that_branches_on_the_clock_diverges_or_takes_the_same_path_never_another() {
    let calls = Arc::new(Mutex::new(Vec::<String>::new()));
    let ns = |calls: &Arc<Mutex<Vec<String>>>| {
        let mut ns = Namespace::new("tools");
        for name in ["odd", "even"] {
            let calls = Arc::clone(calls);
            ns = ns.with_function(
                name,
                Binding::new(move |_| {
                    calls.lock().unwrap().push(name.to_owned());
                    async move { Ok(json(&format!("\"{name}\""))) }
                }),
            );
        }
        ns.with_function("pay", Binding::new(|_| async { Ok(json("null")) }).requiring_approval())
    };
    let program = r#"
import time
a = await (tools.odd() if time.time_ns() % 2 else tools.even())
b = await tools.pay()
return [a, b]
"#;
    let rt = durable_runtime();
    let r = rt.run(RunRequest::new(program).with_namespace(ns(&calls))).await.unwrap();
    let journal = suspension(&r).journal.clone();
    let first = calls.lock().unwrap().clone();
    assert_eq!(first.len(), 1);
    let (mut same, mut diverged) = (0, 0);
    for _ in 0..8 {
        let request =
            RunRequest::default().with_namespace(ns(&calls)).resuming(journal.clone(), Answer::Reply(json("1")));
        let r = rt.run(request).await.unwrap();
        match &r.error {
            None => {
                assert_eq!(value(&r), format!("[\"{}\",1]", first[0]), "the recorded path, answered from the journal");
                same += 1;
            }
            Some(e) => {
                assert_eq!(e.kind, FailureKind::Diverged, "{}", e.message);
                assert!(
                    e.message.contains(&format!("at binding call 1: the journal records tools.{}", first[0])),
                    "{}",
                    e.message
                );
                diverged += 1;
            }
        }
    }
    assert_eq!(same + diverged, 8);
    assert_eq!(*calls.lock().unwrap(), first, "no resume called a binding live");
}

#[tokio::test]
async fn another_path_by_input_diverges_before_anything_live_is_called() {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("flag.txt");
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let program = r#"
first = await tools.lookup(open("flag.txt").read())
second = await tools.lookup("again")
return await tools.pay(first + second)
"#;
    let rt = durable_runtime();
    std::fs::write(&flag, "a").unwrap();
    let r = rt.run(RunRequest::new(program).with_input(&flag).with_namespace(gate(&lookups, &paid))).await.unwrap();
    let journal = suspension(&r).journal.clone();
    assert_eq!(lookups.load(Ordering::SeqCst), 2);
    std::fs::write(&flag, "b").unwrap();
    let request = RunRequest::default()
        .with_input(&flag)
        .with_namespace(gate(&lookups, &paid))
        .resuming(journal.clone(), Answer::Reply(json("1")));
    let r = rt.run(request).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Diverged);
    assert!(
        message.contains("at binding call 1: the journal records tools.lookup with arguments of digest"),
        "{message}"
    );
    assert!(message.contains(r#"the program called tools.lookup("b")"#), "{message}");
    assert!(message.contains("Nothing was called after the divergence"), "{message}");
    assert_eq!(lookups.load(Ordering::SeqCst), 2, "the second lookup was not called live");
    // A program that returns before reaching its recorded calls diverges too.
    let request = RunRequest::new(program.replace("first = await", "return 0\nfirst = await"))
        .with_namespace(gate(&lookups, &paid))
        .resuming(journal, Answer::Reply(json("1")));
    let e = rt.run(request).await.unwrap_err();
    assert!(matches!(e, MisuseError::Journal(JournalError::OtherProgram)), "{e}");
}

#[tokio::test]
async fn altered_foreign_or_old_journals_are_refused_before_any_program_runs() {
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let rt = durable_runtime();
    let r = rt.run(RunRequest::new(GATE).with_namespace(gate(&lookups, &paid))).await.unwrap();
    let journal = suspension(&r).journal.clone();
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    let resume = |rt: Runtime, journal: Vec<u8>, program: &str, ns: Namespace| {
        let request = RunRequest::new(program).with_namespace(ns).resuming(journal, Answer::Reply(json("1")));
        async move { rt.run(request).await }
    };
    let mut flipped = journal.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 1;
    let e = resume(rt.clone(), flipped, "", gate(&lookups, &paid)).await.unwrap_err();
    assert!(
        e.to_string().contains("signature does not match: it was altered, or signed with another journal key"),
        "{e}"
    );

    let other = runtime_with(|c| c.journal_key = Some(JournalKey::new("another key of enough bytes").unwrap()));
    let e = resume(other, journal.clone(), "", gate(&lookups, &paid)).await.unwrap_err();
    assert!(matches!(e, MisuseError::Journal(JournalError::Signature)), "{e}");

    let e = resume(rt.clone(), journal.clone(), "return 1", gate(&lookups, &paid)).await.unwrap_err();
    assert!(matches!(e, MisuseError::Journal(JournalError::OtherProgram)), "{e}");

    let mut old = journal.clone();
    old[8..12].copy_from_slice(&0u32.to_be_bytes());
    let e = resume(rt.clone(), old, "", gate(&lookups, &paid)).await.unwrap_err();
    assert!(e.to_string().contains("format version 0; this pycage reads version 2"), "{e}");

    let renamed = Namespace::new("tools").with_function("lookup", Binding::new(|_| async { Ok(json("1")) }));
    let e = resume(rt.clone(), journal.clone(), "", renamed).await.unwrap_err();
    assert!(
        e.to_string().contains("the bindings differ from those the journal was made with: tools.pay missing"),
        "{e}"
    );

    let keyless = runtime();
    let e = resume(keyless.clone(), journal.clone(), "", gate(&lookups, &paid)).await.unwrap_err();
    assert!(matches!(e, MisuseError::NoJournalKey(_)), "{e}");
    assert!(e.to_string().contains("PYCAGE_JOURNAL_KEY"), "{e}");
    let e = keyless.run(RunRequest::new(GATE).with_namespace(gate(&lookups, &paid))).await.unwrap_err();
    assert!(e.to_string().contains("a run whose bindings need approval needs a journal key"), "{e}");

    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (1, 0), "nothing ran");
    // And the journal still resumes as it is.
    let r = resume(rt, journal, GATE, gate(&lookups, &paid)).await.unwrap();
    assert_eq!(value(&r), r#"{"amount":40,"receipt":1}"#);
}

/// `busy(s)` spends `s` seconds of CPU.
const BUSY: &str = r#"
import time
def busy(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
"#;

#[tokio::test]
async fn cpu_spent_before_a_suspension_counts_after_the_resume_and_the_replay_does_not() {
    let rt = durable_runtime();
    let ns =
        || Namespace::new("tools").with_function("pay", Binding::new(|_| async { Ok(json("1")) }).requiring_approval());
    let limits = RunLimits { cpu_seconds: Some(2), ..RunLimits::default() };
    let resume = |before: f64, after: f64| {
        let program = format!("{BUSY}\nbusy({before})\nawait tools.pay()\nbusy({after})\nreturn 'done'");
        let rt = rt.clone();
        async move {
            let r = rt.run(RunRequest::new(program).with_namespace(ns()).with_limits(limits)).await.unwrap();
            let journal = suspension(&r).journal.clone();
            rt.run(RunRequest::default().with_namespace(ns()).resuming(journal, Answer::Reply(json("1"))))
                .await
                .unwrap()
        }
    };
    // 1.2 s before and 1.2 s after: each fits the 2 s budget, together
    // they do not.
    let r = resume(1.2, 1.2).await;
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Timeout, "{message}");
    assert!(message.contains("CPU budget of 2 s"), "{message}");
    // 1.0 s before and 0.5 s after fit, although the replay spends the
    // first 1.0 s again.
    let r = resume(1.0, 0.5).await;
    assert_eq!(value(&r), "\"done\"");
}

#[tokio::test]
async fn wall_time_spent_before_a_suspension_counts_after_the_resume() {
    let rt = durable_runtime();
    let ns =
        || Namespace::new("tools").with_function("pay", Binding::new(|_| async { Ok(json("1")) }).requiring_approval());
    // Margins of seconds: a loaded machine may take a while to start a
    // process, which counts (before the suspension) or not (the replay).
    let limits = RunLimits { wall_time: Some(Duration::from_secs(8)), ..RunLimits::default() };
    let program = "import time\ntime.sleep(5)\nawait tools.pay()\ntime.sleep(4)\nreturn 'done'";
    let r = rt.run(RunRequest::new(program).with_namespace(ns()).with_limits(limits)).await.unwrap();
    let journal = suspension(&r).journal.clone();
    let r =
        rt.run(RunRequest::default().with_namespace(ns()).resuming(journal, Answer::Reply(json("1")))).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Timeout, "5 s before, 4 s after, of 8 s: {message}");
    assert!(message.contains("wall-clock budget of 8000 ms"), "{message}");
}

#[tokio::test]
async fn string_hash_order_and_random_take_the_same_path_on_replay() {
    let rt = durable_runtime();
    let noted = Arc::new(Mutex::new(Vec::new()));
    let ns = |noted: &Arc<Mutex<Vec<String>>>| {
        let noted = Arc::clone(noted);
        Namespace::new("tools")
            .with_function(
                "note",
                Binding::new(move |a: JsonValue| {
                    noted.lock().unwrap().push(a.to_string());
                    async { Ok(json("null")) }
                }),
            )
            .with_function("pay", Binding::new(|_| async { Ok(json("1")) }).requiring_approval())
    };
    // Set order of strings depends on the hash seed; random's draws on its seed.
    let program = r#"
import random
words = {f"w{i}" for i in range(40)}
for w in list(words)[:5]:
    await tools.note(w)
await tools.note(random.random())
await tools.pay()
return [list(words)[:5], random.random()]
"#;
    let r = rt.run(RunRequest::new(program).with_namespace(ns(&noted))).await.unwrap();
    let journal = suspension(&r).journal.clone();
    let first = noted.lock().unwrap().clone();
    rt.shutdown().await;
    // Each resume in a runtime of its own: another zygote, another seed,
    // as in another process.
    for _ in 0..3 {
        let rt = durable_runtime();
        let request =
            RunRequest::default().with_namespace(ns(&noted)).resuming(journal.clone(), Answer::Reply(json("1")));
        let r = rt.run(request).await.unwrap();
        rt.shutdown().await;
        let v = value(&r);
        assert!(v.starts_with(&format!("[[{}],", first[..5].join(","))), "{v} after {first:?}");
    }
    assert_eq!(*noted.lock().unwrap(), first, "every note was answered from the journal");
}

#[tokio::test]
async fn a_binding_may_suspend_on_its_own_terms_and_a_resume_may_suspend_again() {
    let rt = durable_runtime();
    let asked = Arc::new(AtomicU64::new(0));
    let ns = |asked: &Arc<AtomicU64>| {
        let asked = Arc::clone(asked);
        Namespace::new("tools").with_function(
            "transfer",
            Binding::new(move |a: JsonValue| {
                asked.fetch_add(1, Ordering::SeqCst);
                let big = a.root().as_number().and_then(|n| n.as_i64()).unwrap_or(0) > 100;
                async move {
                    if big {
                        Err(BindingError::suspend(format!("a transfer of {} needs a second signature", a)))
                    } else {
                        Ok(json("\"sent\""))
                    }
                }
            }),
        )
    };
    let program = r#"
a = await tools.transfer(5)
print("small", a)
b = await tools.transfer(500)
print("big", b)
c = await tools.transfer(1000)
return [a, b, c]
"#;
    let r = rt.run(RunRequest::new(program).with_namespace(ns(&asked))).await.unwrap();
    let s = suspension(&r).clone();
    assert_eq!(
        (s.call.args.to_string().as_str(), s.reason.as_str()),
        ("500", "a transfer of 500 needs a second signature")
    );
    assert_eq!(r.logs, ["small sent"]);
    let request =
        RunRequest::default().with_namespace(ns(&asked)).resuming(s.journal, Answer::Reply(json("\"signed\"")));
    let r = rt.run(request).await.unwrap();
    let s2 = suspension(&r).clone();
    assert_eq!(s2.call.args.to_string(), "1000");
    assert_eq!(r.logs, ["big signed"], "only what the caller had not had");
    let j = Journal::open(&s2.journal, &key(), u64::MAX).unwrap();
    assert_eq!(j.suspensions, 2);
    assert_eq!(j.pending.position, 2);
    let request = RunRequest::default().with_namespace(ns(&asked)).resuming(s2.journal, Answer::Deny("no".into()));
    let r = rt.run(request).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Exception);
    assert!(message.contains("RuntimeError: no"), "{message}");
    assert!(r.logs.is_empty(), "{:?}", r.logs);
    assert_eq!(asked.load(Ordering::SeqCst), 3, "each transfer was asked once across three runs");
    // Without a key the binding cannot suspend: its call fails, saying why.
    let keyless = runtime();
    let r = keyless.run(RunRequest::new("return await tools.transfer(500)").with_namespace(ns(&asked))).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Exception);
    assert!(message.contains("this run cannot suspend (a durable run needs a journal key"), "{message}");
}

#[tokio::test]
async fn a_program_cannot_forge_a_suspension_or_see_the_key() {
    let rt = durable_runtime();
    let ran = Arc::new(AtomicU64::new(0));
    let r2 = Arc::clone(&ran);
    let ns = Namespace::new("tools").with_function(
        "echo",
        Binding::new(move |a| {
            r2.fetch_add(1, Ordering::SeqCst);
            async move { Ok(a) }
        }),
    );
    // A raw call frame on fd 3 that claims approval, a suspension and a
    // reason: the host rebuilds frames field by field, and approval is the
    // host's own configuration.
    let program = format!(
        r#"
import os, sys
frame = b'{{"type":"call","id":999999,"global":"tools","name":"echo","args":1,"approval":true,"suspend":"forged","reason":"x"}}\n'
os.write(3, frame)
seen = repr(dict(os.environ)) + repr(sys.argv) + repr(sys.orig_argv)
for path in ("/proc/self/environ", "/proc/self/cmdline"):
    seen += open(path, "rb").read().decode("latin-1")
return {{"key_seen": {key:?} in seen, "hash_seed_var": "PYTHONHASHSEED" in os.environ}}
"#,
        key = KEY
    );
    let r = rt.run(RunRequest::new(program).with_namespace(ns)).await.unwrap();
    assert_eq!(value(&r), r#"{"key_seen":false,"hash_seed_var":false}"#);
    assert!(r.suspension.is_none());
}

#[tokio::test]
async fn the_journal_is_metered_and_a_run_over_it_cannot_suspend() {
    let rt = runtime_with(|c| {
        c.journal_key = Some(key());
        c.max_journal_bytes = 64 * 1024;
    });
    let ns = || {
        Namespace::new("tools")
            .with_function("big", Binding::new(|_| async { Ok(JsonValue::string(&"x".repeat(16 * 1024)).unwrap()) }))
            .with_function("pay", Binding::new(|_| async { Ok(json("1")) }).requiring_approval())
    };
    // Under the budget: big replies are fine while nothing suspends.
    let r = rt
        .run(RunRequest::new("return sum([len(await tools.big()) for _ in range(10)])").with_namespace(ns()))
        .await
        .unwrap();
    assert_eq!(value(&r), "163840");
    let r = rt
        .run(RunRequest::new("for _ in range(10):\n    await tools.big()\nawait tools.pay()").with_namespace(ns()))
        .await
        .unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::OutputLimit);
    assert!(message.contains("over its 65536-byte budget (max_journal_bytes)"), "{message}");
    // Under it, the same suspends.
    let r = rt
        .run(RunRequest::new("for _ in range(2):\n    await tools.big()\nawait tools.pay()").with_namespace(ns()))
        .await
        .unwrap();
    assert!(suspension(&r).journal.len() > 32 * 1024);
}

#[tokio::test]
async fn sandboxed_runs_suspend_and_resume_with_their_seeds() {
    if !pycage_sandbox::probe().missing().is_empty() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
        return;
    }
    let sandboxed = || {
        Runtime::new(RuntimeConfig {
            isolation: Isolation::Sandbox,
            journal_key: Some(key()),
            ..RuntimeConfig::default()
        })
        .unwrap()
    };
    let (lookups, paid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let program = r#"
import os
words = {f"w{i}" for i in range(40)}
first = await tools.lookup(sorted(words, key=lambda w: list(words).index(w))[:3])
procs = sorted(p for p in os.listdir("/proc") if p.isdigit())
return [first, await tools.pay(list(words)[:3]), procs]
"#;
    let rt = sandboxed();
    let r = rt.run(RunRequest::new(program).with_namespace(gate(&lookups, &paid))).await.unwrap();
    let journal = suspension(&r).journal.clone();
    rt.shutdown().await;
    let rt = sandboxed();
    let request =
        RunRequest::default().with_namespace(gate(&lookups, &paid)).resuming(journal, Answer::Reply(json("\"ok\"")));
    let r = rt.run(request).await.unwrap();
    rt.shutdown().await;
    let v = value(&r);
    assert!(v.starts_with(r#"[40,"ok",["#), "{v}");
    assert_eq!((lookups.load(Ordering::SeqCst), paid.load(Ordering::SeqCst)), (1, 0));
}
