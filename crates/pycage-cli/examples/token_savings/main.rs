//! Prints the token counts of examples/code-mode both ways, as the tables
//! README.md and examples/code-mode/README.md carry (see `counts.rs`).
//!
//! `cargo run -q -p pycage-cli --example token_savings`
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

mod counts;

fn main() {
    let savings = counts::measure();
    println!("README.md:\n\n{}", savings.readme_table());
    println!("examples/code-mode/README.md:\n\n{}", savings.code_mode_table());
}
