//! The reserved globals are listed once, in `names.rs`; this test spawns the
//! interpreter a runtime would use and checks that list against the
//! bootstrap's own (`_RESERVED_GLOBALS`, what the child refuses at boot) and
//! the builtin list against the interpreter's real `builtins` module.

use std::collections::BTreeSet;
use std::path::Path;

use pycage_runtime::names::{PYTHON_BUILTINS, RUNTIME_GLOBALS};
use pycage_runtime::JsonValue;

const QUERY: &str = r#"
import builtins, json, sys
real = set(dir(builtins))
sys.path.insert(0, sys.argv[1])
from pycage import bootstrap
print(json.dumps({
    "reserved": sorted(bootstrap._RESERVED_GLOBALS),
    "seeded": sorted(bootstrap._SEEDED_GLOBALS),
    "builtins": sorted(n for n in real if n.isidentifier()),
    "added": sorted(set(dir(builtins)) - real),
}))
"#;

fn strings(v: &JsonValue, key: &str) -> BTreeSet<String> {
    v.root().get(key).unwrap().as_array().unwrap().map(|s| s.as_str().unwrap().to_owned()).collect()
}

#[test]
fn reserved_globals_match_the_bootstrap_and_the_interpreter() {
    let python = pycage_runtime::interpreter::probe(None).unwrap().executable;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let out = std::process::Command::new(&python).args(["-I", "-c", QUERY]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = JsonValue::parse(out.stdout.trim_ascii_end()).unwrap();

    let ours: BTreeSet<String> = RUNTIME_GLOBALS.iter().map(|s| s.to_string()).collect();
    assert_eq!(ours, strings(&v, "reserved"), "names.rs RUNTIME_GLOBALS vs bootstrap._RESERVED_GLOBALS");
    // Everything the bootstrap seeds into a program's globals is reserved.
    assert!(strings(&v, "seeded").is_subset(&ours));
    // So is every builtin the child adds (`display`): a namespace of that
    // name would hide it.
    let added = strings(&v, "added");
    assert!(added.is_subset(&ours), "the child adds builtins names.rs does not reserve: {added:?}");

    let builtins = strings(&v, "builtins");
    let missing: Vec<&String> = builtins.iter().filter(|b| !PYTHON_BUILTINS.contains(&b.as_str())).collect();
    assert!(missing.is_empty(), "{} has builtins names.rs does not list: {missing:?}", python.display());
    // The list is not padded with names no interpreter has: every name is a
    // builtin of this interpreter or of a version the list documents.
    let version_specific = ["BaseExceptionGroup", "ExceptionGroup", "PythonFinalizationError", "_IncompleteInputError"];
    for name in PYTHON_BUILTINS {
        assert!(builtins.contains(*name) || version_specific.contains(name), "{name} is no builtin");
    }
}
