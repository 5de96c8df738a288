//! For the build script of a crate that embeds the sandbox shell helper
//! (the Python package's native module, the `pycage` CLI): builds
//! `pycage-sandbox`'s `pycage-shell-helper` program for the build's target
//! and says where it is ([`bundle_shell_helper`]).
//!
//! A runtime started with that program as its shell helper forks every
//! sandbox shell from it: two forks and two exits of the helper per shell,
//! each costing in proportion to the forked process's memory (about 0.2 MiB
//! of anonymous memory, against 0.8 MiB of the CLI's own binary run as the
//! helper and 3.5 MiB of an interpreter's).
//!
//! The helper is built by a nested `cargo build` in a target directory of
//! its own beside the calling build's (the outer build holds the lock on
//! its own directory), so its compiled dependencies are kept between
//! builds. On a glibc target it is linked statically where it can be.
//!
//! Also for the runtime crate's build script: the shared library of
//! `pycage-join`, the native join of a sandboxed zygote child
//! ([`bundle_native_join`]), built the same way.

// Its output is the calling build script's: `cargo:` directives on stdout.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// From a build script whose crate lies in this workspace's `crates/`:
/// builds the helper and sets the compile-time variable `env_var` of the
/// crate to the program's path (for `include_bytes!(env!(...))`), with
/// the `rerun-if` lines that rebuild it when the sandbox crate changes.
/// Panics (failing the build) when no helper could be built.
pub fn bundle_shell_helper(env_var: &str) {
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    println!("cargo:rerun-if-env-changed=RUSTFLAGS");
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("cargo did not set {name}"));
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.join("../..");
    for watched in ["crates/pycage-sandbox", "crates/pycage-protocol", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    let out_dir = PathBuf::from(env("OUT_DIR"));
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<crate>-<hash>/out.
    let profile_dir = out_dir.ancestors().nth(3).map(PathBuf::from).unwrap_or_else(|| out_dir.clone());
    let target = env("TARGET");
    // Linked statically (a static PIE) on glibc: a shell is two forks and
    // two exits of the helper, and the shared libraries were more than half
    // of its mappings (31 against 14) and nearly half of its anonymous
    // memory (344 against 180 kB); the shells' CPU per sandboxed run fell
    // by about 7 % (BENCHMARKS.md). The helper calls nothing of glibc that
    // needs a shared library (NSS, iconv, dlopen). A system without a
    // static libc (`libc.a`: Fedora's `glibc-static` is not installed by
    // default) gets the dynamic helper, with a warning.
    let static_link = std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    let built = static_link
        .then(|| build_helper(&workspace, &profile_dir.join("shell-helper-target-static"), &target, true))
        .flatten()
        .or_else(|| build_helper(&workspace, &profile_dir.join("shell-helper-target"), &target, false))
        .unwrap_or_else(|| panic!("building pycage-shell-helper failed (the cargo output above says why)"));
    println!("cargo:rustc-env={env_var}={}", built.display());
}

/// Builds the helper with a nested `cargo build` into `target_dir`; its
/// path, or None when the build failed.
fn build_helper(workspace: &Path, target_dir: &Path, target: &str, static_link: bool) -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut nested = Command::new(cargo);
    nested
        .args(["build", "--release", "-p", "pycage-sandbox", "--bin", "pycage-shell-helper", "--target", target])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .env_remove("CARGO_TARGET_DIR");
    // The outer build's flags for its target, from every source (RUSTFLAGS,
    // `.cargo/config.toml`): cargo hands a build script only this encoded
    // form (RUSTFLAGS is not in its environment), and the nested cargo
    // takes it before any other source.
    let mut flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if static_link {
        if !flags.is_empty() {
            flags.push('\x1f');
        }
        flags.push_str("-Ctarget-feature=+crt-static");
        // A static program needs nothing of the system's glibc, so this
        // machine's own linker links it: a cross linker the outer build was
        // given (the release wheels' zig, scripts/build-wheels.sh) linked
        // it dynamically, without a word.
        nested.env_remove(format!("CARGO_TARGET_{}_LINKER", target.to_uppercase().replace(['-', '.'], "_")));
    }
    nested.env("CARGO_ENCODED_RUSTFLAGS", flags);
    let status = nested.status().unwrap_or_else(|e| panic!("could not run cargo to build pycage-shell-helper: {e}"));
    if !status.success() {
        if static_link {
            println!(
                "cargo:warning=pycage-shell-helper: the static build failed ({status}); building it dynamically instead"
            );
        }
        return None;
    }
    let built = target_dir.join(target).join("release").join("pycage-shell-helper");
    assert!(built.is_file(), "cargo built no {}", built.display());
    Some(built)
}

/// The build environment's variable that makes a missing native join fatal.
const REQUIRE_NATIVE_JOIN: &str = "PYCAGE_REQUIRE_NATIVE_JOIN";

/// From the runtime crate's build script: builds `pycage-join` as the
/// shared library a zygote loads for its sandboxed children's join
/// (`libpycage_join.so`, a few kilobytes: no std, no unwinding) and sets
/// the compile-time variable `env_var` to its path, with the `rerun-if`
/// lines that rebuild it when that crate changes. When it cannot be built,
/// warns and points `env_var` at an empty file: a runtime without the
/// library gives its zygotes the Python join, which does the same steps
/// more slowly.
///
/// With `PYCAGE_REQUIRE_NATIVE_JOIN=1` in the build's environment (the
/// release wheels, CI), a library that cannot be built fails the build.
pub fn bundle_native_join(env_var: &str) {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("cargo did not set {name}"));
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.join("../..");
    for watched in ["crates/pycage-join", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    println!("cargo:rerun-if-env-changed={REQUIRE_NATIVE_JOIN}");
    let out_dir = PathBuf::from(env("OUT_DIR"));
    let profile_dir = out_dir.ancestors().nth(3).map(PathBuf::from).unwrap_or_else(|| out_dir.clone());
    let target = env("TARGET");
    let target_dir = profile_dir.join("native-join-target");
    let built = target_dir.join(&target).join("release").join("libpycage_join.so");
    // Also rerun when the library is gone: a build that failed for a
    // passing reason (no linker yet) is tried again, not kept.
    println!("cargo:rerun-if-changed={}", built.display());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // `cargo rustc` makes the shared library of a crate whose manifest
    // names only an rlib, with `panic=abort` for it alone: a `no_std`
    // library cannot unwind, and the workspace's own builds of the crate
    // (its tests, clippy) keep the workspace's profile.
    let mut flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("musl") {
        // musl targets link statically by default, and a static C library
        // makes no shared library: this one uses the process's.
        if !flags.is_empty() {
            flags.push('\x1f');
        }
        flags.push_str("-Ctarget-feature=-crt-static");
    }
    let mut nested = Command::new(cargo);
    nested
        .args(["rustc", "--release", "-p", "pycage-join", "--lib", "--crate-type", "cdylib", "--target", &target])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--", "-C", "panic=abort"])
        .env_remove("CARGO_TARGET_DIR")
        .env("CARGO_ENCODED_RUSTFLAGS", flags);
    let path = match nested.status() {
        Ok(status) if status.success() && built.is_file() => built,
        outcome if std::env::var_os(REQUIRE_NATIVE_JOIN).is_some_and(|v| v == "1") => {
            panic!("pycage-join: the native join library could not be built ({outcome:?}), and {REQUIRE_NATIVE_JOIN}=1")
        }
        outcome => {
            println!(
                "cargo:warning=pycage-join: the native join library could not be built ({outcome:?}); \
                 sandboxed zygote children will join in Python (slower, the same steps)"
            );
            let empty = out_dir.join("no-native-join");
            std::fs::write(&empty, b"").unwrap_or_else(|e| panic!("cannot write {}: {e}", empty.display()));
            empty
        }
    };
    println!("cargo:rustc-env={env_var}={}", path.display());
}
