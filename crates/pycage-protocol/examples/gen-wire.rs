//! Writes `python/pycage/_wire.py`, the child's wire module, from the
//! frame table (`src/table.rs`). Run after changing the table:
//! `cargo run -p pycage-protocol --example gen-wire`.
// A command-line tool: it reports the path it wrote.
#![allow(clippy::expect_used, clippy::print_stdout)]

use std::path::Path;

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(pycage_protocol::PYTHON_WIRE_PATH);
    std::fs::write(&path, pycage_protocol::python_wire_module()).expect("write the wire module");
    println!("wrote {}", path.display());
}
