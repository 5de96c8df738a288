//! This crate's modules keep the layers its `lib.rs` declares: no module
//! uses one listed after it, its own parent, or the crate root.

#[test]
fn modules_keep_their_layers() {
    pycage_layers::assert_layers(env!("CARGO_MANIFEST_DIR"));
}
