//! The sandbox shell helper as a program of its own, for Rust hosts that
//! cannot serve it from their own binary, for the Python package (which
//! embeds it) and for the runtime's tests: set
//! `RuntimeConfig::shell_helper` to this program's path. It links the
//! sandbox alone, not the runtime.

use std::io::Write;

fn main() {
    if let Err(e) = pycage_sandbox::helper::serve_fd3() {
        // Nowhere else to report to: the helper's stderr is the host's.
        let _ = writeln!(std::io::stderr(), "pycage-shell-helper: {e}");
        std::process::exit(1);
    }
}
