//! Builds `pycage-join`'s shared library (`pycage-helper-build`) and hands
//! its path to the runtime (`PYCAGE_NATIVE_JOIN_LIBRARY`), which embeds it
//! and writes it beside the bootstrap's Python files, where a zygote loads
//! it for its sandboxed children's join (`python/pycage/confine.py`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    pycage_helper_build::bundle_native_join("PYCAGE_NATIVE_JOIN_LIBRARY");
}
