//! The zygote's side of its protocol matches the Rust table
//! (`pycage_protocol::zygote`): the zygote knows exactly the confinement
//! steps the host can send, and every resource a step or a spawn names.
//! (Every answer the zygote sends is validated key-exactly by the host at
//! run time, where a malformed one retires the zygote: the zygote tests
//! exercise that path with every message type.)
#![allow(clippy::unwrap_used)]

use pycage_protocol::zygote::{Rlimit, CONFINE_FIELDS};

#[test]
fn the_zygote_knows_every_confinement_step_and_no_other() {
    let python_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let out = std::process::Command::new("python3")
        .arg("-I")
        .arg("-c")
        .arg(format!(
            "import sys; sys.path.insert(0, {:?}); from pycage import confine, zygote; \
             print(' '.join(sorted(confine._CONFINE_OPS))); print(' '.join(sorted(zygote._RLIMITS)))",
            python_dir.to_string_lossy()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let ops: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let rlimits: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let mut want: Vec<&str> = CONFINE_FIELDS.iter().map(|(op, _)| *op).collect();
    want.sort_unstable();
    assert_eq!(ops, want);
    for r in [
        Rlimit::Nproc,
        Rlimit::Fsize,
        Rlimit::Nofile,
        Rlimit::Core,
        Rlimit::Sigpending,
        Rlimit::Msgqueue,
        Rlimit::Memlock,
    ] {
        assert!(rlimits.contains(&r.as_str()), "{rlimits:?} lacks {}", r.as_str());
    }
    // The spawn request's rlimits use these two as well.
    assert!(rlimits.contains(&"cpu") && rlimits.contains(&"as"));
}
