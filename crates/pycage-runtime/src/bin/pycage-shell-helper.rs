//! The sandbox shell helper as a program of its own, for Rust hosts that
//! cannot serve it from their own binary and for this crate's tests: set
//! `RuntimeConfig::shell_helper` to this program's path.

use std::io::Write;

fn main() {
    if let Err(e) = pycage_runtime::serve_shell_helper() {
        // Nowhere else to report to: the helper's stderr is the host's.
        let _ = writeln!(std::io::stderr(), "pycage-shell-helper: {e}");
        std::process::exit(1);
    }
}
