//! The latency a type check adds to a run, p50 over several checks, each
//! beside the cold command line (`ty check`) on the same text, from the same
//! run of this benchmark:
//!
//! - warm, a 30-line program against typed bindings (each check a new text);
//! - warm, a pandas program;
//! - the first check of a new checker (the server starts cold).
//!
//! Needs ty and the data-science venv (`.ci/datasci-deps.sh`, or
//! `PYCAGE_DATASCI_VENV`). Figures mean something on a quiet machine only.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use pycage_typecheck::{CheckRequest, Checker, CheckerConfig, NamespaceDecl};

const STUB: &str = concat!(
    "class SearchResult(TypedDict):\n    items: list[str]\n    total: int\n\n",
    "class tools:\n",
    "    async def search(*, query: str, limit: int = 10) -> SearchResult: ...\n",
    "    async def fetch(*, url: str, timeout: float = 5.0) -> str: ...\n",
    "    async def save(*, name: str, rows: list[dict[str, Any]]) -> bool: ...\n",
);

/// A correct 30-line program; `n` makes each one a new text.
fn program(n: usize) -> String {
    let mut p = format!("import asyncio\nimport json\nLIMIT = {n}\n");
    p.push_str("queries = ['alpha', 'beta', 'gamma']\n");
    p.push_str("results = await asyncio.gather(*[tools.search(query=q, limit=LIMIT) for q in queries])\n");
    p.push_str("rows: list[dict[str, object]] = []\n");
    p.push_str("for q, r in zip(queries, results):\n");
    p.push_str("    for item in r['items']:\n");
    p.push_str("        rows.append({'query': q, 'item': item, 'len': len(item)})\n");
    p.push_str("def score(row: dict[str, object]) -> int:\n");
    p.push_str("    value = row['len']\n");
    p.push_str("    return value if isinstance(value, int) else 0\n");
    p.push_str("rows.sort(key=score, reverse=True)\n");
    p.push_str("best = rows[:5]\n");
    p.push_str("page = await tools.fetch(url='https://example.com/' + str(LIMIT))\n");
    p.push_str("words = page.split()\n");
    p.push_str("counts: dict[str, int] = {}\n");
    p.push_str("for w in words:\n");
    p.push_str("    counts[w] = counts.get(w, 0) + 1\n");
    p.push_str("top = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[:3]\n");
    p.push_str("saved = await tools.save(name='report', rows=[dict(r) for r in best])\n");
    p.push_str("summary = {\n");
    p.push_str("    'total': sum(r['total'] for r in results),\n");
    p.push_str("    'best': best,\n");
    p.push_str("    'top_words': top,\n");
    p.push_str("    'saved': saved,\n");
    p.push_str("}\n");
    p.push_str("print(json.dumps(summary)[:200])\n");
    p.push_str("if not saved:\n    return None\nsummary\n");
    p
}

fn pandas_program(n: usize) -> String {
    format!(
        "import numpy as np\nimport pandas as pd\nrng = np.random.default_rng({n})\n\
         df = pd.DataFrame({{'a': rng.normal(size=100), 'b': rng.integers(0, 10, size=100)}})\n\
         df['c'] = df['a'] * 2 + df['b']\ng = df.groupby('b')['c'].agg(['mean', 'count'])\n\
         top = g.sort_values('mean', ascending=False).head(3)\nfloat(top['mean'].iloc[0])\n"
    )
}

fn p50(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let venv = std::env::var_os("PYCAGE_DATASCI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/datasci-venv").components().collect()
    });
    let ty = venv.join("bin/ty");
    assert!(ty.exists(), "no ty at {}: run .ci/datasci-deps.sh", ty.display());
    let config = CheckerConfig {
        ty: ty.clone(),
        python: venv.join("bin/python"),
        python_version: (3, 11),
        extra_paths: Vec::new(),
        memory_bytes: pycage_typecheck::DEFAULT_MEMORY_BYTES,
        work_dir_parent: None,
    };
    let ns = vec![NamespaceDecl {
        global: "tools".into(),
        members: vec!["search".into(), "fetch".into(), "save".into()],
        error_class: Some(("ToolError".into(), "tool".into())),
        stub: Some(STUB.into()),
    }];
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let far = || tokio::time::Instant::now() + Duration::from_secs(60);
    let check = |checker: &Checker, text: &str| -> Duration {
        let request = CheckRequest { program: text, namespaces: &ns, own_packages: None, history: None };
        let t = Instant::now();
        let checked = rt.block_on(checker.check(request, far())).unwrap();
        let took = t.elapsed();
        assert!(checked.report.passed(), "{}", checked.report.message());
        took
    };
    let cli = |text: &str| -> Duration {
        let dir = tempfile::tempdir().unwrap();
        let request = CheckRequest { program: text, namespaces: &ns, own_packages: None, history: None };
        let file = pycage_typecheck::write_cli_workspace(&config, &request, dir.path()).unwrap();
        let t = Instant::now();
        let out = Command::new(&ty)
            .args(["check", "--output-format", "concise"])
            .arg(&file)
            .current_dir(dir.path())
            .env_clear()
            .output()
            .unwrap();
        let took = t.elapsed();
        // The command line reports pycage's script forms (top-level
        // `await`, `return`) as errors; nothing else may be there.
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.lines().filter(|l| l.contains("error[")).all(|l| l.contains("invalid-syntax")), "{text}");
        took
    };
    let n = 30;
    let checker = Checker::new(config.clone());
    check(&checker, &program(0)); // started and warm
    let warm: Vec<Duration> = (1..=n).map(|i| check(&checker, &program(i))).collect();
    let warm_cli: Vec<Duration> = (1..=10).map(|i| cli(&program(i))).collect();
    check(&checker, &pandas_program(0));
    let pandas: Vec<Duration> = (1..=n).map(|i| check(&checker, &pandas_program(i))).collect();
    let pandas_cli: Vec<Duration> = (1..=10).map(|i| cli(&pandas_program(i))).collect();
    rt.block_on(checker.close());
    let cold: Vec<Duration> = (0..10)
        .map(|i| {
            let checker = Checker::new(config.clone());
            let took = check(&checker, &program(1000 + i));
            rt.block_on(checker.close());
            took
        })
        .collect();
    println!("type check added latency, p50 (ty {}):", pycage_typecheck::TESTED_TY_VERSION);
    println!("| case | warm server (`ty server`) | cold `ty check` |");
    println!("|---|---|---|");
    println!("| 30-line program with bindings | {} | {} |", ms(p50(warm)), ms(p50(warm_cli.clone())));
    println!("| pandas program | {} | {} |", ms(p50(pandas)), ms(p50(pandas_cli)));
    println!("| first check (server starts) | {} | {} |", ms(p50(cold)), ms(p50(warm_cli)));
}
