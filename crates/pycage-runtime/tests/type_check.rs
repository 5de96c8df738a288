//! The type check before a run (`RuntimeConfig::type_check`), with the real
//! `ty` from the data-science venv (`.ci/datasci-deps.sh`,
//! `$PYCAGE_DATASCI_VENV`, default `target/datasci-venv`; without it these
//! tests say so and pass, except under `PYCAGE_REQUIRE_ALL_TESTS=1`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use pycage_runtime::*;

#[allow(clippy::print_stderr)] // a skip says so where the test output shows it
fn datasci_venv() -> Option<PathBuf> {
    let venv = std::env::var_os("PYCAGE_DATASCI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/datasci-venv").components().collect()
    });
    if venv.join("bin/python").symlink_metadata().is_ok() && venv.join("bin/ty").exists() {
        return Some(venv);
    }
    assert!(
        std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(),
        "no ty in the data-science venv at {}: run .ci/datasci-deps.sh",
        venv.display()
    );
    eprintln!("skipped: no ty in the data-science venv at {} (run .ci/datasci-deps.sh)", venv.display());
    None
}

/// A runtime that checks every run, with ty from the data-science venv
/// (the interpreter stays `python3`: ty is configured by path).
fn checking(venv: &Path, f: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
    runtime_with(|c| {
        c.type_check = true;
        c.ty = Some(venv.join("bin/ty"));
        f(c);
    })
}

/// `tools.search(*, query: str, limit: int = 10)`, typed as pycage-bindings
/// would type it from a schema, answering `{"items": [query], "total": 1}`;
/// and the count of its calls.
fn search_tools() -> (Namespace, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let ns = Namespace::new("tools")
        .with_function(
            "search",
            Binding::new(move |args| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    let q = args.root().get("query").and_then(|q| q.as_str()).unwrap_or("?").to_owned();
                    Ok(JsonValue::parse(format!("{{\"items\":[{q:?}],\"total\":1}}").as_bytes()).unwrap())
                }
            }),
        )
        .with_error_class(ErrorClass { name: "ToolError".into(), member_name_property: "tool".into() })
        .with_stub(
            "class SearchResult(TypedDict):\n    items: list[str]\n    total: NotRequired[int]\n\n\
             class tools:\n    \"\"\"1 function.\"\"\"\n\n    \
             async def search(*, query: str, limit: int = 10) -> SearchResult:\n        \"\"\"Search.\"\"\"\n",
        );
    (ns, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_keyword_a_wrong_type_and_int_plus_str_are_one_type_error_and_nothing_is_called() {
    let Some(venv) = datasci_venv() else { return };
    let rt = checking(&venv, |_| {});
    let (ns, calls) = search_tools();
    let program = "import asyncio\n\
                   hits = await tools.search(query=\"pycage\", limt=5)\n\
                   more = await tools.search(query=42)\n\
                   summary = \"found: \" + len(hits[\"items\"])\n\
                   return summary\n";
    let r = rt.run(RunRequest::new(program).with_namespace(ns)).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::TypeError, "{message}");
    assert!(message.starts_with("the type check (ty) found 3 errors"), "{message}");
    assert!(message.contains("<program>:2:43: error[unknown-argument] Argument `limt` does not match"), "{message}");
    assert!(message.contains(" 2 | hits = await tools.search(query=\"pycage\", limt=5)\n"), "{message}");
    assert!(message.contains("<program>:3:27: error[invalid-argument-type]"), "{message}");
    assert!(message.contains("Expected `str`, found `Literal[42]`"), "{message}");
    assert!(message.contains("<program>:4:11: error[unsupported-operator]"), "{message}");
    assert!(
        message.contains("declared as `async def search(*, query: str, limit: int = 10) -> SearchResult`"),
        "{message}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no binding may be called");
    assert!(r.logs.is_empty(), "the program must not have started: {:?}", r.logs);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_program_with_top_level_await_return_and_a_final_expression_passes_and_runs() {
    let Some(venv) = datasci_venv() else { return };
    let rt = checking(&venv, |_| {});
    let (ns, calls) = search_tools();
    let program = "import asyncio\n\
                   r = await tools.search(query=\"x\")\n\
                   if not r[\"items\"]:\n    return \"none\"\n\
                   async def both():\n    return [await tools.search(query=q) for q in (\"a\", \"b\")]\n\
                   pair = await both()\n\
                   display(\"checked\")\n\
                   try:\n    await tools.search(query=\"y\", limit=2)\nexcept ToolError as e:\n    print(e.tool)\n\
                   len(pair) + r.get(\"total\", 0)\n";
    let result = rt.run(RunRequest::new(program).with_namespace(ns.clone())).await.unwrap();
    assert_eq!(value(&result), "3");
    assert!(result.diagnostics.is_empty(), "{:?}", result.diagnostics);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let returned = rt.run(RunRequest::new("return await tools.search(query=\"z\")").with_namespace(ns.clone())).await;
    assert_eq!(value(&returned.unwrap()), "{\"items\":[\"z\"],\"total\":1}");
    // `await` in a plain `def` is a mistake, not a script form.
    let in_def = "def f():\n    return await tools.search(query=\"q\")\nf()\n";
    let r = rt.run(RunRequest::new(in_def).with_namespace(ns)).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::TypeError, "{message}");
    assert!(
        message.contains("<program>:2:12: error[invalid-syntax] `await` outside of an asynchronous function"),
        "{message}"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numpy_and_pandas_through_the_venv_pass_and_a_numpy_signature_misuse_is_caught() {
    let Some(venv) = datasci_venv() else { return };
    let rt = checking(&venv, |c| c.venv = Some(venv.clone()));
    let program = "import numpy as np\nimport pandas as pd\n\
                   a = np.arange(12).reshape(3, 4)\n\
                   df = pd.DataFrame(a, columns=[\"w\", \"x\", \"y\", \"z\"])\n\
                   df[\"sum\"] = df.sum(axis=1)\n\
                   float(df[\"sum\"].mean()) + float(np.linalg.norm(a[0]))\n";
    let r = rt.run(RunRequest::new(program)).await.unwrap();
    assert!(value(&r).starts_with("25.74"), "{r:?}");
    let misuse = "import numpy as np\nxs = np.linspace(0, 1, num=\"ten\")\nxs.sum()\n";
    let r = rt.run(RunRequest::new(misuse)).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::TypeError, "{message}");
    assert!(
        message.contains("<program>:2:6: error[no-matching-overload] No overload of function `linspace`"),
        "{message}"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_checks_its_cells_as_one_program_and_forgets_a_cell_that_failed_its_check() {
    let Some(venv) = datasci_venv() else { return };
    let rt = checking(&venv, |_| {});
    let (ns, calls) = search_tools();
    let session = rt.session(SessionOptions::default().with_namespace(ns)).unwrap();
    // A top-level `return` ends its cell only: later cells are still checked.
    let first =
        session.run("hits = await tools.search(query=\"a\")\nif hits[\"items\"]:\n    return 1\n").await.unwrap();
    assert_eq!(value(&first), "1");
    let known = session.run("hits[\"items\"][0].upper()").await.unwrap();
    assert_eq!(value(&known), "\"A\"");
    let bad = session.run("extra = 2\nhits[\"total\"] + \"x\"\n").await.unwrap();
    let (kind, message) = failure(&bad);
    assert_eq!(kind, FailureKind::TypeError, "{message}");
    assert!(message.contains("<program>:2:1: error[unsupported-operator]"), "{message}");
    let forgotten = session.run("extra + 1").await.unwrap();
    let (kind, message) = failure(&forgotten);
    assert_eq!(kind, FailureKind::TypeError, "{message}");
    assert!(message.contains("error[unresolved-reference] Name `extra` used when not defined"), "{message}");
    // A cell that failed at run time still defined what came before.
    let raised = session.run("partial = 5\nraise ValueError(\"boom\")\n").await.unwrap();
    assert_eq!(failure(&raised).0, FailureKind::Exception);
    let after = session.run("partial + len(hits[\"items\"])").await.unwrap();
    assert_eq!(value(&after), "6");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    session.close().await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_ty_is_a_clear_misuse_error() {
    let missing = PathBuf::from("/nonexistent/pycage-test/ty");
    let rt = runtime_with(|c| c.ty = Some(missing.clone()));
    let e = rt.run(RunRequest::new("1").with_type_check(true)).await.unwrap_err();
    assert!(matches!(e, MisuseError::TypeCheck(_)), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("/nonexistent/pycage-test/ty") && text.contains("pip install ty==0.0.104"), "{text}");
    // Without a check the runtime runs as before.
    assert_eq!(value(&rt.run(RunRequest::new("1")).await.unwrap()), "1");
    rt.shutdown().await;
    let mut config = common::config();
    config.type_check = true;
    config.ty = Some(missing);
    let Err(e) = Runtime::new(config) else { panic!("a runtime that checks every run needs ty") };
    assert!(e.to_string().contains("pip install ty==0.0.104"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_source_reads_nothing_outside_the_environment_runs_nothing_and_stays_within_the_wall_clock() {
    let Some(venv) = datasci_venv() else { return };
    let parent = tempfile::tempdir().unwrap();
    let secret_dir = parent.path().join("secrets");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("secret_mod.py"), "SECRET = \"hunter2-in-a-module\"\n").unwrap();
    std::fs::write(parent.path().join("secret_mod.py"), "SECRET = \"hunter2-beside-the-workspace\"\n").unwrap();
    // Configuration a checker that walks up from its workspace would read.
    let pyproject = format!(
        "[tool.ty.environment]\nextra-paths = [{:?}]\n[tool.ty.rules]\ninvalid-argument-type = \"ignore\"\n",
        secret_dir.display().to_string()
    );
    std::fs::write(parent.path().join("pyproject.toml"), &pyproject).unwrap();
    std::fs::write(parent.path().join("ty.toml"), pyproject.replace("tool.ty.", "")).unwrap();
    // A venv whose site-packages has a `.pth` with code: a checker that ran
    // the interpreter to find its paths would run it.
    let marker = parent.path().join("pth-ran");
    let fake = parent.path().join("venv");
    let python = std::fs::canonicalize(venv.join("bin/python")).unwrap();
    let home = python.parent().unwrap();
    let lib = std::fs::read_dir(venv.join("lib")).unwrap().flatten().next().unwrap().file_name();
    let site = fake.join("lib").join(lib).join("site-packages");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::create_dir_all(fake.join("bin")).unwrap();
    std::os::unix::fs::symlink(&python, fake.join("bin/python")).unwrap();
    std::fs::write(
        fake.join("pyvenv.cfg"),
        format!("home = {}\ninclude-system-site-packages = false\n", home.display()),
    )
    .unwrap();
    std::fs::write(
        site.join("evil.pth"),
        format!("import os; open({:?}, 'w').close()\n", marker.display().to_string()),
    )
    .unwrap();
    std::fs::write(site.join("harmless.py"), "VALUE: int = 1\n").unwrap();
    let rt = checking(&venv, |c| {
        c.python = Some(fake.join("bin/python"));
        c.run_dir_parent = Some(parent.path().to_path_buf());
        c.wall_time = Duration::from_secs(3);
    });
    let (ns, calls) = search_tools();
    let program = format!(
        "# /// script\n# [tool.ty.environment]\n# extra-paths = [{:?}]\n# ///\n\
         import harmless\nimport secret_mod\nfrom . import secret_mod as a\nfrom .. import secret_mod as b\n\
         from ... import secret_mod as c\nsecret_mod.SECRET + 1\na.SECRET + 1\n\
         b.SECRET + 1\nc.SECRET + 1\nharmless.VALUE + \"x\"\n",
        secret_dir.display().to_string()
    );
    let r = rt.run(RunRequest::new(program).with_namespace(ns.clone())).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::TypeError, "{message}");
    let everything = format!("{message}\n{}", r.diagnostics.join("\n"));
    assert!(!everything.contains("hunter2"), "the checker read a host file: {everything}");
    assert!(message.contains("<program>:14:1: error[unsupported-operator]"), "the environment is read: {message}");
    assert!(!marker.exists(), "the checker ran code of the environment");
    // A program that keeps ty busy for long ends with the run's wall clock.
    let mut slow = String::from("await tools.search(query=\"before\")\nx = 1\n");
    for _ in 0..40 {
        slow.push_str("x = (x, x)\n");
    }
    slow.push_str("x + 1\n");
    let r = rt.run(RunRequest::new(slow).with_namespace(ns.clone())).await.unwrap();
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Timeout, "{message}");
    assert!(message.contains("while the program was type-checked"), "{message}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The next check gets a new checker.
    let r = rt.run(RunRequest::new("await tools.search(query=\"after\")").with_namespace(ns)).await.unwrap();
    assert_eq!(value(&r), "{\"items\":[\"after\"],\"total\":1}");
    rt.shutdown().await;
}
