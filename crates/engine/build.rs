//! Builds the OpenMP shim of `src/omp.rs` (Linux with glibc, where llama.cpp is built with
//! GCC's OpenMP). Elsewhere the engine runs without it and never lowers its thread count.
//!
//! Where llama.cpp is built as shared libraries (its backends loaded at run time), tells the
//! crates that link this one where they are (`DEP_HEARTH_ENGINE_LIB_DIRS`, `:`-separated), so
//! their programs find them without `LD_LIBRARY_PATH` (see `crates/node/build.rs`).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_BACKENDS_DIR");
    if let Ok(backends) = std::env::var("DEP_LLAMA_BACKENDS_DIR") {
        if let Some(out) = std::path::Path::new(&backends).parent() {
            let dirs = [out.join("lib"), out.join("build").join("common")];
            let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            println!("cargo:lib_dirs={}", dirs.join(":"));
        }
        remove_dangling_links();
    }
    println!("cargo:rerun-if-changed=csrc/thread_limit.c");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    println!("cargo::rustc-check-cfg=cfg(hearth_omp)");
    if os == "linux" && env == "gnu" {
        cc::Build::new()
            .file("csrc/thread_limit.c")
            .flag("-fopenmp")
            .compile("hearth_thread_limit");
        // llama-cpp-sys-2 links libgomp too; naming it here keeps the link order right.
        println!("cargo:rustc-link-lib=gomp");
        println!("cargo:rustc-cfg=hearth_omp");
    }
}

/// llama-cpp-sys-2 0.1.161 hard-links its `lib*.so` files, which are symbolic links to the
/// versioned libraries, into the profile's folder (`target/debug`, `deps`, `examples`): links
/// that lead nowhere there. Its next build into another folder (a change of features or
/// settings) then finds the name taken by a link it does not see (`exists()` follows it) and
/// panics. Those dangling links are removed once it has built; nothing uses them (the
/// programs find the libraries through their run-time path, tests through Cargo's).
fn remove_dangling_links() {
    let Ok(out) = std::env::var("OUT_DIR") else {
        return;
    };
    // OUT_DIR is <profile dir>/build/hearth-engine-<hash>/out.
    let Some(profile) = std::path::Path::new(&out).ancestors().nth(3) else {
        return;
    };
    for dir in [
        profile.to_path_buf(),
        profile.join("deps"),
        profile.join("examples"),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let ours = ["libllama", "libggml", "libmtmd"]
                .iter()
                .any(|lib| name.starts_with(lib));
            let dangling = e.file_type().is_ok_and(|t| t.is_symlink()) && !e.path().exists();
            if ours && dangling && name.ends_with(".so") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
