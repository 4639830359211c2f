//! hearth-bench finds llama.cpp's shared libraries where this build put them (see
//! crates/node/build.rs).

fn main() {
    if let Ok(dirs) = std::env::var("DEP_HEARTH_ENGINE_LIB_DIRS") {
        if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
            println!("cargo:rustc-link-arg-bins=-Wl,--disable-new-dtags,-rpath,{dirs}");
        }
    }
}
