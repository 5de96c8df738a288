//! Counts what a model reads to answer "which SKUs are low anywhere?"
//! against `examples/code-mode/warehouse_server.py`, two ways:
//!
//! - direct tool calls: the server's tool definitions, then 22 round trips
//!   (`list_warehouses`, `list_skus`, 20 × `get_stock`), each a `tool_use`
//!   block and a `tool_result` block holding the call's text result;
//! - code mode: the `run_python` definition (rules and stubs), then one
//!   round trip: the program (`examples/code-mode/low_stock.py`) and its result.
//!
//! Everything is produced for real: the results come from calling the
//! server (directly through an MCP client, and through a pycage run), the
//! `run_python` description is the one `pycage mcp` serves. Blocks are
//! serialized as the compact JSON of Anthropic-style `tool_use` /
//! `tool_result` content blocks. Tokens are counted with OpenAI's
//! `cl100k_base` encoding (the `bpe-openai` crate ships it); other models'
//! tokenizers differ by some percent, the ratio far less.
//!
//! "Context" is what the transcript adds; "read across turns" assumes one
//! model turn per tool call (plus a final one), each re-reading the
//! definitions and every earlier round trip, without prompt caching.
//!
//! `cargo run -q -p pycage-cli --example token_savings` prints the tables;
//! the test `token_tables_in_the_docs_are_current` (crates/pycage-cli/tests/
//! code_mode.rs) includes this file and checks that README.md and
//! examples/code-mode/README.md carry exactly these tables.

use std::path::Path;

use pycage_bindings::Bindings;
use pycage_runtime::{Isolation, RunRequest, Runtime, RuntimeConfig};
use rmcp::model::CallToolRequestParams;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub bytes: usize,
    pub tokens: usize,
}

/// Both ways of answering, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Savings {
    /// Direct tool calls made.
    pub calls: usize,
    pub direct_defs: Count,
    pub direct_trips: Count,
    pub direct_read: usize,
    pub code_mode_defs: Count,
    pub code_mode_trip: Count,
    pub code_mode_read: usize,
}

fn count(text: &str) -> Count {
    Count { bytes: text.len(), tokens: bpe_openai::cl100k_base().count(text) }
}

fn block(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

/// Makes every call for real and counts what the model reads.
pub fn measure() -> Savings {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/code-mode");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let bindings = Bindings::load(&dir.join("bindings.toml")).await.unwrap();
        let server = &bindings.servers[0];
        let peer = server.upstream.peer().await.unwrap();

        // Direct: tool definitions as a client hands them to the model.
        let defs: Vec<Value> = server
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": *t.input_schema}))
            .collect();
        let direct_defs = count(&block(&Value::Array(defs)));
        let mut calls = vec![("list_warehouses", json!({})), ("list_skus", json!({}))];
        for w in ["berlin", "lyon", "porto", "turin"] {
            for s in ["A-1", "B-7", "C-3", "D-9", "E-2"] {
                calls.push(("get_stock", json!({"warehouse": w, "sku": s})));
            }
        }
        let mut round_trips = Vec::new();
        for (i, (name, input)) in calls.iter().enumerate() {
            let id = format!("toolu_{i:02}");
            let r = peer
                .call_tool(CallToolRequestParams::new(*name).with_arguments(input.as_object().unwrap().clone()))
                .await
                .unwrap();
            let text: String = r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect();
            let use_block = json!({"type": "tool_use", "id": id, "name": name, "input": input});
            let result_block = json!({"type": "tool_result", "tool_use_id": id, "content": text});
            round_trips.push(count(&(block(&use_block) + &block(&result_block))));
        }

        // Code mode: the run_python definition and one round trip.
        let runtime = Runtime::new(RuntimeConfig { isolation: Isolation::Process, ..RuntimeConfig::default() }).unwrap();
        let options = pycage_mcp::ServerOptions::default();
        let description =
            pycage_mcp::description(&runtime, &bindings, options.max_description_bytes, options.session_idle);
        let cm_def = json!([{
            "name": "run_python",
            "description": description,
            "input_schema": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        }]);
        let cm_defs = count(&block(&cm_def));
        let program = std::fs::read_to_string(dir.join("low_stock.py")).unwrap();
        // The model writes the program without the comment header.
        let program: String = program.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
        let result = runtime
            .run(RunRequest { program: program.clone(), bindings: bindings.namespaces.clone(), cancel: None, ..RunRequest::default() })
            .await
            .unwrap();
        assert!(result.error.is_none(), "{:?}", result.error);
        let use_block = json!({"type": "tool_use", "id": "toolu_00", "name": "run_python", "input": {"code": program}});
        let result_block = json!({"type": "tool_result", "tool_use_id": "toolu_00", "content": result.to_json().to_canonical_string()});
        let cm_trip = count(&(block(&use_block) + &block(&result_block)));
        runtime.shutdown().await;
        bindings.close().await;

        let direct_trips = Count {
            bytes: round_trips.iter().map(|c| c.bytes).sum(),
            tokens: round_trips.iter().map(|c| c.tokens).sum(),
        };
        // One model turn per tool call plus a final turn; each reads the
        // definitions and all earlier round trips.
        let mut direct_read = 0;
        let mut history = 0;
        for trip in &round_trips {
            direct_read += direct_defs.tokens + history;
            history += trip.tokens;
        }
        direct_read += direct_defs.tokens + history;
        let cm_read = cm_defs.tokens + (cm_defs.tokens + cm_trip.tokens);

        Savings {
            calls: calls.len(),
            direct_defs,
            direct_trips,
            direct_read,
            code_mode_defs: cm_defs,
            code_mode_trip: cm_trip,
            code_mode_read: cm_read,
        }
    })
}

/// `1,234`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn saved(direct: usize, code_mode: usize) -> String {
    format!("{:.0} %", 100.0 * (1.0 - code_mode as f64 / direct as f64))
}

fn total(a: Count, b: Count) -> Count {
    Count { bytes: a.bytes + b.bytes, tokens: a.tokens + b.tokens }
}

impl Savings {
    /// The table in README.md.
    pub fn readme_table(&self) -> String {
        let (dt, ct) = (total(self.direct_defs, self.direct_trips), total(self.code_mode_defs, self.code_mode_trip));
        let t = |n: usize| format!("{} tokens", grouped(n));
        let rows = [
            format!("| | {} direct tool calls | 1 `run_python` call | saved |", self.calls),
            "|---|---|---|---|".to_owned(),
            format!(
                "| tool definitions | {} | {} (rules and stubs) | {} |",
                t(self.direct_defs.tokens),
                t(self.code_mode_defs.tokens),
                saved(self.direct_defs.tokens, self.code_mode_defs.tokens)
            ),
            format!(
                "| calls and results | {} | {} | {} |",
                t(self.direct_trips.tokens),
                t(self.code_mode_trip.tokens),
                saved(self.direct_trips.tokens, self.code_mode_trip.tokens)
            ),
            format!("| context total | {} | {} | {} |", t(dt.tokens), t(ct.tokens), saved(dt.tokens, ct.tokens)),
            format!(
                "| read across turns ({} vs 2 model turns, no caching) | {} | {} | {} |",
                self.calls + 1,
                t(self.direct_read),
                t(self.code_mode_read),
                saved(self.direct_read, self.code_mode_read)
            ),
        ];
        rows.join("\n") + "\n"
    }

    /// The table in examples/code-mode/README.md (with bytes).
    pub fn code_mode_table(&self) -> String {
        let (dt, ct) = (total(self.direct_defs, self.direct_trips), total(self.code_mode_defs, self.code_mode_trip));
        let c = |c: Count| format!("{} tokens ({} bytes)", grouped(c.tokens), grouped(c.bytes));
        let row = |what: &str, a: Count, b: Count| {
            format!("| {what} | {} | {} | {} |", c(a), c(b), saved(a.tokens, b.tokens))
        };
        let rows = [
            format!("| | {} direct tool calls | 1 `run_python` call | saved |", self.calls),
            "|---|---|---|---|".to_owned(),
            row("tool definitions", self.direct_defs, self.code_mode_defs),
            row("calls and results", self.direct_trips, self.code_mode_trip),
            row("context total", dt, ct),
            format!(
                "| read across turns ({} vs 2 model turns) | {} tokens | {} tokens | {} |",
                self.calls + 1,
                grouped(self.direct_read),
                grouped(self.code_mode_read),
                saved(self.direct_read, self.code_mode_read)
            ),
        ];
        rows.join("\n") + "\n"
    }
}
