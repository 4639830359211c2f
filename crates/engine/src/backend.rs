//! The process-wide llama.cpp backend. llama.cpp must be initialised once per process
//! (`LlamaBackend::init` fails the second time), so the first engine initialises it and
//! routes llama.cpp's own logs into `tracing`; every later engine shares it.
//!
//! Where the backends are libraries (Linux, Windows), they are loaded first, from the first
//! folder that has them: `HEARTH_BACKENDS_DIR`, then `../lib/hearth/backends` beside the
//! program (the installed package), then the folder this build put them in. The CPU variant
//! ggml picked and every device found are logged once.

use std::path::PathBuf;
use std::sync::OnceLock;

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::{send_logs_to_tracing, LogOptions};

use crate::cpu::Backends;

static BACKEND: OnceLock<Result<(LlamaBackend, Backends), String>> = OnceLock::new();

pub(crate) fn backend() -> Result<&'static LlamaBackend, String> {
    init().map(|(b, _)| b)
}

/// The backends as loaded at start (empty before any engine started one).
pub fn loaded() -> Backends {
    init().map(|(_, b)| b.clone()).unwrap_or_default()
}

fn init() -> Result<&'static (LlamaBackend, Backends), String> {
    BACKEND
        .get_or_init(|| {
            send_logs_to_tracing(LogOptions::default());
            let dir = load_libraries();
            let backend = LlamaBackend::init().map_err(|e| e.to_string())?;
            let backends = Backends {
                dir,
                cpu_variant: crate::cpu::cpu_variant(),
                cpu_features: crate::cpu::cpu_features(),
            };
            tracing::info!(
                dir = ?backends.dir,
                cpu_variant = backends.cpu_variant.as_deref().unwrap_or("built in"),
                cpu_features = %backends.cpu_features.join(","),
                "llama.cpp backends loaded"
            );
            Ok((backend, backends))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Load the backend libraries from the first folder that has them; the folder.
#[cfg(any(target_os = "linux", target_os = "windows"))]
fn load_libraries() -> Option<PathBuf> {
    let dir = candidates().into_iter().find(|d| has_backends(d))?;
    llama_cpp_2::llama_backend::load_backends_from_path(&dir);
    Some(dir)
}

/// Backends are built into the program here (Metal on macOS).
#[cfg(not(any(target_os = "linux", target_os = "windows")))]
fn load_libraries() -> Option<PathBuf> {
    None
}

#[cfg(any(target_os = "linux", target_os = "windows"))]
fn candidates() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("HEARTH_BACKENDS_DIR") {
        dirs.push(PathBuf::from(d));
    }
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(ToOwned::to_owned))
    {
        dirs.push(exe_dir.join("../lib/hearth/backends"));
        dirs.push(exe_dir.join("backends"));
    }
    if let Some(built) = llama_cpp_sys_2::BACKENDS_DIR {
        dirs.push(PathBuf::from(built));
    }
    dirs
}

/// Whether `dir` holds a CPU backend library (every build has one).
#[cfg(any(target_os = "linux", target_os = "windows"))]
fn has_backends(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(if cfg!(windows) {
                    "ggml-cpu"
                } else {
                    "libggml-cpu"
                })
        })
    })
}
