//! The Rust↔Python mirror: `python/pycage/protocol.py` must declare the same
//! frames, the same required and optional fields, the same `PROTOCOL_FD`
//! and the same marker text as this crate. Spawns a real python3.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use pycage_protocol::{log_truncation_marker, JsonValue, FRAME_FIELDS, PROTOCOL_FD};

const BUDGETS: [u64; 5] = [0, 1, 100, 65536, 18446744073709551615];

/// One side's view: frame → (required, optional), the fd, the markers.
#[derive(Debug, PartialEq, Eq)]
struct Mirror {
    frames: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>,
    fd: i64,
    markers: Vec<String>,
}

fn rust_side() -> Mirror {
    Mirror {
        frames: FRAME_FIELDS
            .iter()
            .map(|f| {
                (
                    f.frame.to_string(),
                    (
                        f.required.iter().map(|s| s.to_string()).collect(),
                        f.optional.iter().map(|s| s.to_string()).collect(),
                    ),
                )
            })
            .collect(),
        fd: i64::from(PROTOCOL_FD),
        markers: BUDGETS.iter().map(|&b| log_truncation_marker(b)).collect(),
    }
}

fn python_side() -> Mirror {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let script = format!(
        r#"
import json, sys
sys.path.insert(0, {dir:?})
from pycage import protocol
print(json.dumps({{
    "frames": {{k: [sorted(t.__required_keys__), sorted(t.__optional_keys__)] for k, t in protocol.FRAMES.items()}},
    "fd": protocol.PROTOCOL_FD,
    "markers": [protocol.log_truncation_marker(b) for b in {budgets:?}],
}}))
"#,
        dir = dir.to_string_lossy(),
        budgets = BUDGETS,
    );
    let out = Command::new("python3").args(["-I", "-c", &script]).output().expect("python3 runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = JsonValue::parse(out.stdout.trim_ascii_end()).unwrap();
    let root = v.root();
    let strings = |x: pycage_protocol::ValueRef<'_>| -> BTreeSet<String> {
        x.as_array().unwrap().map(|s| s.as_str().unwrap().to_string()).collect()
    };
    Mirror {
        frames: root
            .get("frames")
            .unwrap()
            .as_object()
            .unwrap()
            .map(|(k, v)| {
                let mut it = v.as_array().unwrap();
                (k.to_string(), (strings(it.next().unwrap()), strings(it.next().unwrap())))
            })
            .collect(),
        fd: root.get("fd").unwrap().as_number().unwrap().as_i64().unwrap(),
        markers: root.get("markers").unwrap().as_array().unwrap().map(|s| s.as_str().unwrap().to_string()).collect(),
    }
}

/// Every difference between the two sides, as readable lines.
fn compare(rust: &Mirror, python: &Mirror) -> Vec<String> {
    let mut diffs = Vec::new();
    let names: BTreeSet<&String> = rust.frames.keys().chain(python.frames.keys()).collect();
    for name in names {
        match (rust.frames.get(name), python.frames.get(name)) {
            (Some(r), Some(p)) => {
                if r.0 != p.0 {
                    diffs.push(format!("{name}: required fields differ: rust {:?}, python {:?}", r.0, p.0));
                }
                if r.1 != p.1 {
                    diffs.push(format!("{name}: optional fields differ: rust {:?}, python {:?}", r.1, p.1));
                }
            }
            (Some(_), None) => diffs.push(format!("{name}: missing in protocol.py FRAMES")),
            (None, Some(_)) => diffs.push(format!("{name}: missing in FRAME_FIELDS")),
            (None, None) => {}
        }
    }
    if rust.fd != python.fd {
        diffs.push(format!("PROTOCOL_FD differs: rust {}, python {}", rust.fd, python.fd));
    }
    if rust.markers != python.markers {
        diffs.push(format!("marker text differs: rust {:?}, python {:?}", rust.markers, python.markers));
    }
    diffs
}

#[test]
fn python_mirror_matches_rust() {
    let diffs = compare(&rust_side(), &python_side());
    assert!(diffs.is_empty(), "protocol.py and the Rust frames disagree:\n{}", diffs.join("\n"));
}

#[test]
fn comparison_catches_every_kind_of_drift() {
    let base = rust_side();
    let mutate = |f: &dyn Fn(&mut Mirror)| {
        let mut m = rust_side();
        f(&mut m);
        compare(&base, &m)
    };
    assert!(compare(&base, &rust_side()).is_empty());
    // Renamed field.
    let d = mutate(&|m| {
        let call = m.frames.get_mut("call").unwrap();
        call.0.remove("args");
        call.0.insert("arguments".into());
    });
    assert_eq!(d.len(), 1, "{d:?}");
    // Dropped field.
    assert_eq!(
        mutate(&|m| {
            m.frames.get_mut("log").unwrap().1.remove("truncated");
        })
        .len(),
        1
    );
    // Added field.
    assert_eq!(
        mutate(&|m| {
            m.frames.get_mut("done").unwrap().1.insert("extra".into());
        })
        .len(),
        1
    );
    // Required/optional flip (shows up on both sets).
    let d = mutate(&|m| {
        let ns = m.frames.get_mut("namespace").unwrap();
        ns.1.remove("errorClass");
        ns.0.insert("errorClass".into());
    });
    assert_eq!(d.len(), 2, "{d:?}");
    // Dropped frame, fd, marker.
    assert_eq!(
        mutate(&|m| {
            m.frames.remove("boot-ack");
        })
        .len(),
        1
    );
    assert_eq!(mutate(&|m| m.fd = 4).len(), 1);
    assert_eq!(mutate(&|m| m.markers[2] = "[pycage] log truncated at 100 bytes".into()).len(), 1);
}
