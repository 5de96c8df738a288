//! The Rust↔Python mirror of the fd-3 wire.
//!
//! The child's `python/pycage/_wire.py` is generated from [`FRAME_FIELDS`]
//! and is what the child runs for every frame. Here:
//!
//! - the checked-in module must be exactly what the generator writes
//!   (`PYCAGE_BLESS=1` rewrites it; so does
//!   `cargo run -p pycage-protocol --example gen-wire`);
//! - a real python3 runs the module: each encoder's lines must pass the host's
//!   validator and re-encode to the same bytes, with exactly the table's keys;
//!   each checker must accept what the host's encoders write, and reject every
//!   missing required field, unknown field and wrongly typed value the table
//!   implies; the fd and the marker text must be the host's;
//! - a module generated from a drifted table fails that comparison.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pycage_protocol::{
    display_truncation_marker, log_truncation_marker, parse_child_frame, python_name, python_wire_module,
    python_wire_module_for, write_json_string, BootFrame, ErrorClassEntry, Field, FieldType, FrameFields, JsonValue,
    NamespaceEntry, ReplyFrame, RunBudgets, RunFrame, Sender, FRAME_FIELDS, MAX_CALL_ID, PROTOCOL_FD, PYTHON_WIRE_PATH,
};

const BUDGETS: [u64; 5] = [0, 1, 100, 65536, 18446744073709551615];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python_dir() -> PathBuf {
    repo().join("python")
}

#[test]
fn generated_module_is_current() {
    let path = repo().join(PYTHON_WIRE_PATH);
    let want = python_wire_module();
    if std::env::var_os("PYCAGE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{PYTHON_WIRE_PATH} differs from what the generator writes for FRAME_FIELDS; regenerate it with \
         `cargo run -p pycage-protocol --example gen-wire` (or PYCAGE_BLESS=1 cargo test -p pycage-protocol --test mirror)"
    );
}

// ---- the plan the Python driver executes --------------------------------

fn js(s: &str) -> String {
    let mut v = Vec::new();
    write_json_string(&mut v, s);
    String::from_utf8(v).unwrap()
}

fn type_json(ty: FieldType) -> String {
    let (kind, arg) = match ty {
        FieldType::Tag(t) => ("tag", js(t)),
        FieldType::Str => ("str", "null".into()),
        FieldType::OneOf(v) => ("oneOf", format!("[{}]", v.iter().map(|s| js(s)).collect::<Vec<_>>().join(","))),
        FieldType::Uint => ("uint", "null".into()),
        FieldType::Bool => ("bool", "null".into()),
        FieldType::Const(b) => ("const", b.to_string()),
        FieldType::Json => ("json", "null".into()),
        FieldType::StrList => ("strList", "null".into()),
        FieldType::StrMap => ("strMap", "null".into()),
        FieldType::Object => ("object", "null".into()),
        FieldType::Shape(s) => ("shape", js(s)),
        FieldType::ShapeList(s) => ("shapeList", js(s)),
    };
    format!("{{\"kind\":{},\"arg\":{arg}}}", js(kind))
}

fn table_json(table: &[FrameFields]) -> String {
    let shapes: Vec<String> = table
        .iter()
        .map(|s| {
            let fields: Vec<String> = s
                .fields
                .iter()
                .map(|f| {
                    format!("{{\"name\":{},\"type\":{},\"required\":{}}}", js(f.name), type_json(f.ty), f.required)
                })
                .collect();
            format!(
                "{{\"frame\":{},\"host\":{},\"fields\":[{}]}}",
                js(s.frame),
                s.sender == Sender::Host,
                fields.join(",")
            )
        })
        .collect();
    format!("[{}]", shapes.join(","))
}

/// A sample value for a field the child encodes, as the Python argument
/// (JSON) the driver passes.
fn sample_arg(ty: FieldType) -> String {
    match ty {
        FieldType::Str => js("s \"é\\\n\u{2028}\u{1}"),
        FieldType::OneOf(v) => js(v[v.len() - 1]),
        FieldType::Uint => MAX_CALL_ID.to_string(),
        FieldType::Bool | FieldType::Const(_) => "true".into(),
        // JSON-typed arguments are canonical JSON text.
        FieldType::Json => js("[1,{\"a\":null,\"b\":-0.0,\"c\":123456789012345678901234567890}]"),
        FieldType::StrList => "[\"a\",\"b\"]".into(),
        FieldType::StrMap => "{\"a\":\"b\",\"image/png\":\"iVBORw0KGgo=\"}".into(),
        // JSON-typed arguments are canonical JSON text.
        FieldType::Object => js("{\"image/png\":{\"width\":640,\"n\":[1.50,null]}}"),
        FieldType::Shape(s) => format!("{{\"$encode\":{}}}", encode_case(s, true)),
        FieldType::ShapeList(s) => format!("[{{\"$encode\":{}}}]", encode_case(s, true)),
        FieldType::Tag(_) => unreachable!("tags are not arguments"),
    }
}

/// `{"fn": "encode_<shape>", "args": [...]}`: positional arguments in the
/// generated signature's order (required, then optional; tags and required
/// constants are not arguments), every optional present or absent.
fn encode_case(shape: &str, with_optional: bool) -> String {
    let s = FRAME_FIELDS.iter().find(|s| s.frame == shape).unwrap();
    let mut args = Vec::new();
    for f in s.fields.iter().filter(|f| f.required && !matches!(f.ty, FieldType::Tag(_) | FieldType::Const(_))) {
        args.push(sample_arg(f.ty));
    }
    for f in s.fields.iter().filter(|f| !f.required) {
        args.push(if with_optional {
            sample_arg(f.ty)
        } else if f.ty == FieldType::Const(true) {
            "false".into()
        } else {
            "null".into()
        });
    }
    format!("{{\"fn\":{},\"args\":[{}]}}", js(&format!("encode_{}", python_name(shape))), args.join(","))
}

/// What the host sends, from its own encoders: every host shape and every
/// optional field appears at least once.
fn host_samples() -> Vec<(&'static str, Vec<u8>)> {
    let ns = |full: bool| NamespaceEntry {
        global: "tools".into(),
        names: vec!["search".into(), "my-tool".into(), "".into()],
        error_class: full.then(|| ErrorClassEntry { name: "ToolError".into(), member_name_property: "tool".into() }),
        doc: full.then(|| "The tools.".into()),
        docs: if full { vec![("search".into(), "Search.".into())] } else { vec![] },
    };
    let boot = |session: bool, namespaces: Vec<NamespaceEntry>| {
        let mut out = Vec::new();
        BootFrame {
            cpu_seconds: 30,
            address_space_bytes: 1 << 29,
            max_log_bytes: 65536,
            max_value_bytes: 1 << 20,
            max_display_bytes: 1 << 23,
            namespaces,
            session,
            output: session,
        }
        .encode(&mut out);
        out
    };
    let run = |budgets: Option<RunBudgets>| {
        let mut out = Vec::new();
        RunFrame { program: "return 1".into(), budgets, sys_path: Vec::new(), seed: None }.encode(&mut out);
        out
    };
    let run_with_packages = {
        let mut out = Vec::new();
        RunFrame {
            program: "return 1".into(),
            budgets: None,
            sys_path: vec!["/opt/pycage-packages/x".into()],
            seed: Some(7),
        }
        .encode(&mut out);
        out
    };
    let reply = |r: ReplyFrame| {
        let mut out = Vec::new();
        r.encode(&mut out);
        out
    };
    vec![
        ("boot", boot(true, vec![ns(false), ns(true)])),
        ("boot", boot(false, vec![])),
        ("run", run(None)),
        ("run", run(Some(RunBudgets { cpu_seconds: 1, max_log_bytes: 2, max_value_bytes: 3, max_display_bytes: 4 }))),
        ("run", run_with_packages),
        ("reply", reply(ReplyFrame::Ok { id: 7, value: JsonValue::parse(b"{\"a\":[1,2.5,null]}").unwrap() })),
        ("reply", reply(ReplyFrame::Err { id: MAX_CALL_ID, message: "no \"such\" thing".into() })),
    ]
}

const DRIVER: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from pycage import _wire

plan = json.loads(sys.stdin.read())
shapes = {s["frame"]: s for s in plan["table"]}
out = {
    "fd": _wire.PROTOCOL_FD,
    "markers": [_wire.log_truncation_marker(b) for b in plan["budgets"]],
    "display_markers": [_wire.display_truncation_marker(b) for b in plan["budgets"]],
}


def call(case):
    args = [call(a["$encode"]) if type(a) is dict and "$encode" in a else a for a in case["args"]]
    return getattr(_wire, case["fn"])(*args)


encoded = []
for case in plan["encode"]:
    try:
        line = call(case)
        encoded.append({"line": line.decode("utf-8")} if type(line) is bytes else {"error": "not bytes"})
    except Exception as e:
        encoded.append({"error": f"{type(e).__name__}: {e}"})
out["encoded"] = encoded

WRONG = {
    "tag": ["not-this-type", 1],
    "str": [1, None, ["s"]],
    "oneOf": ["not-a-kind", 1],
    "uint": [-1, "1", 1.5, True, None],
    "bool": [1, "true", None],
    "json": [],
    "strList": ["s", [1], {}],
    "strMap": [["s"], {"a": 1}],
    "object": [[], "x", 1, None],
    "shape": [[], "x", 1],
    "shapeList": [{}, [1], "x"],
}


def wrong_values(t):
    if t["kind"] == "const":
        return [not t["arg"], 1, None]
    return WRONG[t["kind"]]


def top_shape(frame):
    for s in plan["table"]:
        if not s["host"]:
            continue
        fields = {f["name"]: f for f in s["fields"]}
        tag = next((f["type"]["arg"] for f in s["fields"] if f["type"]["kind"] == "tag"), None)
        if tag is None or frame.get("type") != tag:
            continue
        consts = [f for f in s["fields"] if f["type"]["kind"] == "const"]
        if all(frame.get(f["name"]) is f["type"]["arg"] for f in consts):
            return s["frame"]
    return None


def objects(frame, shape):
    """(path, shape) of the frame and every nested object with a shape."""
    todo = [((), frame, shape)]
    while todo:
        path, obj, name = todo.pop()
        yield path, name
        for f in shapes[name]["fields"]:
            if f["name"] not in obj:
                continue
            kind = f["type"]["kind"]
            if kind == "shape":
                todo.append((path + (f["name"],), obj[f["name"]], f["type"]["arg"]))
            elif kind == "shapeList":
                for i, item in enumerate(obj[f["name"]]):
                    todo.append((path + (f["name"], i), item, f["type"]["arg"]))


def at(root, path):
    for p in path:
        root = root[p]
    return root


checks = {"refused": [], "accepted": [], "wrongly_accepted": [], "tried": 0, "visited": []}
for sample in plan["check"]:
    frame = json.loads(sample["line"])
    checker = getattr(_wire, "check_" + sample["fn"])
    problem = checker(frame)
    if problem is not None:
        checks["refused"].append(f"{sample['line']!r}: {problem}")
        continue
    shape = top_shape(frame)
    if shape is None:
        checks["refused"].append(f"{sample['line']!r}: no shape of the table has this type")
        continue
    for path, name in objects(frame, shape):
        checks["visited"].append(name)
        fields = shapes[name]["fields"]
        mutations = [(f"add an unknown field to {name}", lambda o: o.__setitem__("zz-unknown", 1))]
        for f in fields:
            key = f["name"]
            if key not in at(frame, path):
                continue
            if f["required"]:
                mutations.append((f"drop required {name}.{key}", lambda o, k=key: o.pop(k)))
            else:
                probe = json.loads(sample["line"])
                at(probe, path).pop(key)
                if checker(probe) is not None:
                    checks["wrongly_accepted"].append(f"dropping optional {name}.{key} was refused")
            for bad in wrong_values(f["type"]):
                mutations.append((f"{name}.{key} = {bad!r}", lambda o, k=key, b=bad: o.__setitem__(k, b)))
        for what, mutate in mutations:
            probe = json.loads(sample["line"])
            mutate(at(probe, path))
            checks["tried"] += 1
            if checker(probe) is None:
                checks["wrongly_accepted"].append(f"{sample['fn']}: {what}")
out["checks"] = checks
print(json.dumps(out))
"#;

struct Answer {
    fd: i64,
    markers: Vec<String>,
    display_markers: Vec<String>,
    encoded: Vec<Result<String, String>>,
    refused: Vec<String>,
    wrongly_accepted: Vec<String>,
    tried: u64,
    visited: BTreeSet<String>,
}

fn run_driver(python_dir: &Path, encode: &[(String, &'static FrameFields, bool)]) -> Answer {
    let samples = host_samples();
    let check: Vec<String> = samples
        .iter()
        .map(|(tag, line)| {
            let text = std::str::from_utf8(line.strip_suffix(b"\n").unwrap()).unwrap();
            format!("{{\"fn\":{},\"line\":{}}}", js(&python_name(tag)), js(text))
        })
        .collect();
    let plan = format!(
        "{{\"table\":{},\"budgets\":[{}],\"encode\":[{}],\"check\":[{}]}}",
        table_json(FRAME_FIELDS),
        BUDGETS.map(|b| b.to_string()).join(","),
        encode.iter().map(|(c, _, _)| c.as_str()).collect::<Vec<_>>().join(","),
        check.join(",")
    );
    let mut child = Command::new("python3")
        .args(["-I", "-c", DRIVER])
        .arg(python_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().unwrap().write_all(plan.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "driver failed: {}", String::from_utf8_lossy(&out.stderr));
    let v = JsonValue::parse(out.stdout.trim_ascii_end()).unwrap();
    let root = v.root();
    let strings = |x: pycage_protocol::ValueRef<'_>| -> Vec<String> {
        x.as_array().unwrap().map(|s| s.as_str().unwrap().to_string()).collect()
    };
    let checks = root.get("checks").unwrap();
    Answer {
        fd: root.get("fd").unwrap().as_number().unwrap().as_i64().unwrap(),
        markers: strings(root.get("markers").unwrap()),
        display_markers: strings(root.get("display_markers").unwrap()),
        encoded: root
            .get("encoded")
            .unwrap()
            .as_array()
            .unwrap()
            .map(|e| match e.get("line") {
                Some(l) => Ok(l.as_str().unwrap().to_string()),
                None => Err(e.get("error").unwrap().as_str().unwrap().to_string()),
            })
            .collect(),
        refused: strings(checks.get("refused").unwrap()),
        wrongly_accepted: strings(checks.get("wrongly_accepted").unwrap()),
        tried: checks.get("tried").unwrap().as_number().unwrap().as_u64().unwrap(),
        visited: strings(checks.get("visited").unwrap()).into_iter().collect(),
    }
}

/// Keys of a JSON object line.
fn keys(line: &str) -> BTreeSet<String> {
    let v = JsonValue::parse(line.as_bytes()).unwrap();
    v.root().as_object().unwrap().map(|(k, _)| k.to_owned()).collect()
}

fn expected_keys(shape: &FrameFields, with_optional: bool) -> BTreeSet<String> {
    shape.fields.iter().filter(|f: &&Field| f.required || with_optional).map(|f| f.name.to_string()).collect()
}

/// Every difference between the Python module in `python_dir` and the
/// crate's table, encoders and validator.
fn mirror_diffs(python_dir: &Path) -> Vec<String> {
    let encode: Vec<(String, &'static FrameFields, bool)> = FRAME_FIELDS
        .iter()
        .filter(|s| s.sender == Sender::Child && s.tag().is_some())
        .flat_map(|s| [false, true].map(|full| (encode_case(s.frame, full), s, full)))
        .collect();
    let answer = run_driver(python_dir, &encode);
    let mut diffs = Vec::new();
    if answer.fd != i64::from(PROTOCOL_FD) {
        diffs.push(format!("PROTOCOL_FD differs: rust {PROTOCOL_FD}, python {}", answer.fd));
    }
    let markers: Vec<String> = BUDGETS.iter().map(|&b| log_truncation_marker(b)).collect();
    if answer.markers != markers {
        diffs.push(format!("marker text differs: rust {markers:?}, python {:?}", answer.markers));
    }
    let display_markers: Vec<String> = BUDGETS.iter().map(|&b| display_truncation_marker(b)).collect();
    if answer.display_markers != display_markers {
        diffs.push(format!(
            "display marker text differs: rust {display_markers:?}, python {:?}",
            answer.display_markers
        ));
    }
    for ((_, shape, full), got) in encode.iter().zip(&answer.encoded) {
        let what = format!("encode_{}({})", python_name(shape.frame), if *full { "all fields" } else { "required" });
        let line = match got {
            Ok(l) => l,
            Err(e) => {
                diffs.push(format!("{what} failed: {e}"));
                continue;
            }
        };
        let Some(body) = line.strip_suffix('\n') else {
            diffs.push(format!("{what}: the line does not end in a newline"));
            continue;
        };
        let frame = match parse_child_frame(body.as_bytes()) {
            Ok(f) => f,
            Err(e) => {
                diffs.push(format!("{what}: the host's validator drops {body:?}: {e}"));
                continue;
            }
        };
        let mut again = Vec::new();
        frame.encode(&mut again);
        if again != body.as_bytes() {
            diffs.push(format!(
                "{what}: {body:?} is not what the host re-encodes ({:?})",
                String::from_utf8_lossy(&again)
            ));
        }
        if keys(body) != expected_keys(shape, *full) {
            diffs.push(format!("{what}: keys {:?}, table {:?}", keys(body), expected_keys(shape, *full)));
        }
        // Nested shapes are checked through their parent.
        for f in shape.fields.iter().filter(|f| *full || f.required) {
            if let FieldType::Shape(nested) = f.ty {
                let nested_shape = FRAME_FIELDS.iter().find(|s| s.frame == nested).unwrap();
                let v = JsonValue::parse(body.as_bytes()).unwrap();
                let inner: BTreeSet<String> =
                    v.root().get(f.name).unwrap().as_object().unwrap().map(|(k, _)| k.to_owned()).collect();
                if inner != expected_keys(nested_shape, true) {
                    diffs.push(format!("{what}: {} keys {inner:?}", f.name));
                }
            }
        }
    }
    diffs.extend(answer.refused.iter().map(|r| format!("a checker refuses what the host sends: {r}")));
    diffs.extend(answer.wrongly_accepted.iter().map(|w| format!("a checker accepts a malformed frame: {w}")));
    let host_shapes: BTreeSet<String> =
        FRAME_FIELDS.iter().filter(|s| s.sender == Sender::Host).map(|s| s.frame.to_string()).collect();
    if answer.refused.is_empty() && answer.visited != host_shapes {
        diffs.push(format!("checked shapes {:?}, host shapes {host_shapes:?}", answer.visited));
    }
    if answer.refused.is_empty() && answer.tried < 50 {
        diffs.push(format!("only {} malformed frames tried", answer.tried));
    }
    diffs
}

#[test]
fn python_wire_module_agrees_with_the_host() {
    let diffs = mirror_diffs(&python_dir());
    assert!(diffs.is_empty(), "python/pycage/_wire.py and the host disagree:\n{}", diffs.join("\n"));
}

/// A package holding `_private.py` and a `_wire.py` generated from `table`.
fn package_from(table: &[FrameFields]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let pkg = dir.path().join("pycage");
    std::fs::create_dir(&pkg).unwrap();
    std::fs::write(pkg.join("__init__.py"), "").unwrap();
    std::fs::copy(python_dir().join("pycage/_private.py"), pkg.join("_private.py")).unwrap();
    std::fs::write(pkg.join("_wire.py"), python_wire_module_for(table)).unwrap();
    dir
}

fn drifted(frame: &str, fields: &'static [Field]) -> Vec<FrameFields> {
    FRAME_FIELDS.iter().map(|s| if s.frame == frame { FrameFields { fields, ..*s } } else { *s }).collect()
}

const fn f(name: &'static str, ty: FieldType, required: bool) -> Field {
    Field { name, ty, required }
}

#[test]
fn the_mirror_catches_drift() {
    use FieldType::*;
    // The real table through the same path: no difference.
    let same = package_from(FRAME_FIELDS);
    assert_eq!(mirror_diffs(same.path()), Vec::<String>::new());
    const CASES: [(&str, &[Field], &str); 5] = [
        // A renamed field in what the child sends.
        (
            "call",
            &[
                f("type", Tag("call"), true),
                f("id", Uint, true),
                f("global", Str, true),
                f("name", Str, true),
                f("arguments", Json, true),
            ],
            "the host's validator drops",
        ),
        // A dropped optional field.
        ("log", &[f("type", Tag("log"), true), f("text", Str, true)], "encode_log(all fields) failed"),
        // A field the host never sends, required by the child.
        (
            "run",
            &[f("type", Tag("run"), true), f("program", Str, true), f("budget", Uint, true)],
            "run: missing field 'budget'",
        ),
        // An optional field the host sends, unknown to the child.
        (
            "boot",
            &[
                f("type", Tag("boot"), true),
                f("cpuSeconds", Uint, true),
                f("addressSpaceBytes", Uint, true),
                f("maxLogBytes", Uint, true),
                f("maxValueBytes", Uint, true),
                f("maxDisplayBytes", Uint, true),
                f("namespaces", ShapeList("namespace"), true),
            ],
            "boot: unknown field 'session'",
        ),
        // A type loosened: the checker would take any JSON as an id.
        (
            "reply-ok",
            &[f("type", Tag("reply"), true), f("id", Json, true), f("ok", Const(true), true), f("value", Json, true)],
            "a checker accepts a malformed frame: reply: reply-ok.id = -1",
        ),
    ];
    for (frame, fields, expected) in CASES {
        let pkg = package_from(&drifted(frame, fields));
        let diffs = mirror_diffs(pkg.path());
        assert!(diffs.iter().any(|d| d.contains(expected)), "a drifted {frame} went unnoticed: {diffs:#?}");
    }
}
