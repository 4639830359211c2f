//! The programs find llama.cpp's shared libraries through their run-time search path: first
//! `../lib/hearth` beside them (the installed package), then where this build put them. An
//! RPATH, not a RUNPATH, so that it also serves the libraries those libraries need. The
//! folders go on to the desktop app as `DEP_HEARTH_NODE_LIB_DIRS` (this crate's `links`):
//! cargo hands a build script's metadata to direct dependents only, and the desktop app
//! depends on this crate alone.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(dirs) = std::env::var("DEP_HEARTH_ENGINE_LIB_DIRS") {
        println!("cargo:lib_dirs={dirs}");
        if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
            let rpath = format!("$ORIGIN/../lib/hearth:{dirs}");
            println!("cargo:rustc-link-arg-bins=-Wl,--disable-new-dtags,-rpath,{rpath}");
        }
    }
}
