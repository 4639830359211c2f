//! Release builds embed `ui/dist` (rust-embed, `src/ui.rs`): rebuild when it changes,
//! including when it appears after a build made without it.

fn main() {
    println!("cargo:rerun-if-changed=../../ui/dist");
}
