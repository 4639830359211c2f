//! Builds the OpenMP shim of `src/omp.rs` (Linux with glibc, where llama.cpp is built with
//! GCC's OpenMP). Elsewhere the engine runs without it and never lowers its thread count.

fn main() {
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
