//! Tauri's build step. `tauri.conf.json` stays at the repository root (next to `icons/` and
//! `ui/`), so the build points tauri-build at it instead of copying it here; the app's
//! commands are declared from the same list the capability test reads.

include!("src/commands_list.rs");

fn main() {
    println!("cargo:rerun-if-changed=../tauri.conf.json");
    println!("cargo:rerun-if-changed=../ui/dist");
    println!("cargo:rerun-if-changed=../icons");
    println!("cargo:rerun-if-changed=capabilities");
    println!("cargo:rerun-if-changed=src/commands_list.rs");
    let attributes = tauri_build::Attributes::new()
        // Only the directory is used: tauri-build reads `<dir>/tauri.conf.json`.
        .config_path("../tauri.conf.json")
        .app_manifest(tauri_build::AppManifest::new().commands(COMMANDS));
    tauri_build::try_build(attributes).expect("tauri-build failed");
    // llama.cpp's shared libraries, as for hearth-node, whose build script hands their
    // folders on (see crates/node/build.rs).
    if let Ok(dirs) = std::env::var("DEP_HEARTH_NODE_LIB_DIRS") {
        if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
            let rpath = format!("$ORIGIN/../lib/hearth:{dirs}");
            println!("cargo:rustc-link-arg-bins=-Wl,--disable-new-dtags,-rpath,{rpath}");
        }
    }
}
