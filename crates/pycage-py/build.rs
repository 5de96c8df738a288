//! With the `bundled-shell-helper` feature (the wheel's build turns it on:
//! `pyproject.toml`), builds `pycage-sandbox`'s `pycage-shell-helper`
//! program for the same target (`pycage-helper-build`) and hands its path
//! to the module (`PYCAGE_BUNDLED_SHELL_HELPER`), which embeds it. A
//! sandboxed runtime then starts that program as its shell helper instead
//! of an interpreter loading this module: every sandbox shell is two forks
//! of the helper, and a fork and an exit of a process cost in proportion
//! to its memory (about 0.8 MiB against 3.5 MiB of an interpreter's;
//! BENCHMARKS.md).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_BUNDLED_SHELL_HELPER").is_none() {
        return;
    }
    pycage_helper_build::bundle_shell_helper("PYCAGE_BUNDLED_SHELL_HELPER");
}
