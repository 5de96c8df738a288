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
//! `cargo run -q -p pycage-cli --example token_savings`
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use pycage_bindings::Bindings;
use pycage_runtime::{Isolation, RunRequest, Runtime, RuntimeConfig};
use rmcp::model::CallToolRequestParams;
use serde_json::{json, Value};

struct Count {
    bytes: usize,
    tokens: usize,
}

fn count(text: &str) -> Count {
    Count { bytes: text.len(), tokens: bpe_openai::cl100k_base().count(text) }
}

fn block(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

fn main() {
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

        println!("| | direct tool calls ({} calls) | code mode (1 run_python call) | saved |", calls.len());
        println!("|---|---|---|---|");
        let row = |what: &str, a: &Count, b: &Count| {
            println!(
                "| {what} | {} tokens ({} bytes) | {} tokens ({} bytes) | {:.0} % |",
                a.tokens,
                a.bytes,
                b.tokens,
                b.bytes,
                100.0 * (1.0 - b.tokens as f64 / a.tokens as f64)
            );
        };
        row("tool definitions", &direct_defs, &cm_defs);
        row("round trips (calls and results)", &direct_trips, &cm_trip);
        let total = |a: &Count, b: &Count| Count { bytes: a.bytes + b.bytes, tokens: a.tokens + b.tokens };
        row("context total", &total(&direct_defs, &direct_trips), &total(&cm_defs, &cm_trip));
        println!(
            "| read across turns ({} vs 2 model turns) | {direct_read} tokens | {cm_read} tokens | {:.0} % |",
            calls.len() + 1,
            100.0 * (1.0 - cm_read as f64 / direct_read as f64)
        );
    });
}
