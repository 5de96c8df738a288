//! With the `bundled-shell-helper` feature (on by default), builds
//! `pycage-sandbox`'s `pycage-shell-helper` program for the same target
//! (`pycage-helper-build`) and hands its path to the CLI
//! (`PYCAGE_BUNDLED_SHELL_HELPER`), which embeds it and starts it as its
//! runtimes' shell helper (`common::shell_helper`). Without it the helper
//! is this binary itself, run with `__shell-helper`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_BUNDLED_SHELL_HELPER").is_none() {
        return;
    }
    pycage_helper_build::bundle_shell_helper("PYCAGE_BUNDLED_SHELL_HELPER");
}
