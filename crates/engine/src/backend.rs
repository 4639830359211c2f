//! The process-wide llama.cpp backend. llama.cpp must be initialised once per process
//! (`LlamaBackend::init` fails the second time), so the first engine initialises it and
//! routes llama.cpp's own logs into `tracing`; every later engine shares it.
//!
//! Where the backends are libraries (Linux, Windows), they are loaded first, from the first
//! folder that has them: `HEARTH_BACKENDS_DIR`, then `../lib/hearth/backends` beside the
//! program (the installed package), then the folder this build put them in, without the AMX
//! CPU variant unless asked for (`without_amx`). The CPU variant ggml picked and every device
//! found are logged once.

use std::path::PathBuf;
use std::sync::OnceLock;

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::{send_logs_to_tracing, LogOptions};

use crate::cpu::Backends;

static BACKEND: OnceLock<Result<(LlamaBackend, Backends), String>> = OnceLock::new();

/// The process's llama.cpp backend, initialised the first time: every engine's, and that of
/// code in the same process that drives llama.cpp itself (the reference tests).
pub fn backend() -> Result<&'static LlamaBackend, String> {
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
            let dir = libraries().clone();
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

static LIBRARIES: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Load llama.cpp's backend libraries (once per process) as the engine does, for a program
/// that starts llama.cpp itself (the benchmark's floor, the reference test): the same CPU
/// variant, without AMX (`without_amx`). The folder they came from.
pub fn libraries() -> &'static Option<PathBuf> {
    LIBRARIES.get_or_init(load_libraries)
}

/// Load the backend libraries from the first folder that has them; the folder.
#[cfg(any(target_os = "linux", target_os = "windows"))]
fn load_libraries() -> Option<PathBuf> {
    let dir = candidates().into_iter().find(|d| has_backends(d))?;
    match without_amx(&dir) {
        Some(view) => {
            llama_cpp_2::llama_backend::load_backends_from_path(view.path());
            // The libraries are open now; the folder of links is no longer needed.
            drop(view);
        }
        None => llama_cpp_2::llama_backend::load_backends_from_path(&dir),
    }
    Some(dir)
}

/// ggml's variant for AMX processors (Sapphire Rapids and later) runs its matrix products
/// on AMX tiles. Under some hypervisors a thread's tile configuration does not survive a
/// switch between threads, and the next tile instruction kills the process with SIGILL
/// (seen on a Sapphire Rapids VM: `tilezero` in `tinygemm_kernel_amx` on the first decode,
/// although the kernel grants AMX and a single-threaded test of it passes). So in a virtual
/// machine that variant is left out unless `HEARTH_CPU_AMX=1` (and `HEARTH_CPU_AMX=0` leaves
/// it out anywhere): ggml then picks the best of the others (AVX-512 with VNNI and BF16 on
/// those processors). Left out by loading from a temporary folder of links to every library
/// but it, since ggml's loader takes a folder.
#[cfg(unix)]
fn without_amx(dir: &std::path::Path) -> Option<tempfile_view::View> {
    let leave_out = match std::env::var("HEARTH_CPU_AMX").as_deref() {
        Ok("1") => false,
        Ok("0") => true,
        _ => in_a_virtual_machine(),
    };
    if !leave_out {
        return None;
    }
    view_without_amx(dir)
}

/// A temporary folder of links to every library in `dir` but the AMX variant; `None` when
/// there is no AMX variant to leave out.
#[cfg(unix)]
fn view_without_amx(dir: &std::path::Path) -> Option<tempfile_view::View> {
    let entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    let is_amx = |name: &str| name.starts_with("libggml-cpu-sapphirerapids");
    if !entries
        .iter()
        .any(|e| is_amx(&e.file_name().to_string_lossy()))
    {
        return None;
    }
    let view = tempfile_view::View::new().ok()?;
    for e in entries {
        let name = e.file_name();
        if is_amx(&name.to_string_lossy()) {
            continue;
        }
        if std::os::unix::fs::symlink(e.path(), view.path().join(&name)).is_err() {
            return None;
        }
    }
    tracing::debug!(dir = %dir.display(), "the AMX CPU variant is left out (HEARTH_CPU_AMX=1 keeps it)");
    Some(view)
}

/// Whether the processor says it runs under a hypervisor (the `hypervisor` CPU flag).
#[cfg(unix)]
fn in_a_virtual_machine() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
        info.lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|f| f == "hypervisor"))
    })
}

#[cfg(not(unix))]
fn without_amx(_dir: &std::path::Path) -> Option<tempfile_view::View> {
    None
}

/// A folder in the temporary directory, removed when dropped.
mod tempfile_view {
    use std::path::{Path, PathBuf};

    pub(super) struct View(PathBuf);

    /// The prefix of every such folder; the process id follows it.
    const PREFIX: &str = "hearth-backends-";

    impl View {
        pub(super) fn new() -> std::io::Result<Self> {
            sweep(&std::env::temp_dir());
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = std::env::temp_dir()
                .join(format!("hearth-backends-{}-{nanos}", std::process::id()));
            std::fs::create_dir(&path)?;
            Ok(Self(path))
        }

        pub(super) fn path(&self) -> &Path {
            &self.0
        }
    }

    /// Remove the folders of processes that are gone (one killed while it loaded llama.cpp
    /// left its folder behind). Linux only: a process is alive while `/proc/<pid>` exists.
    pub(super) fn sweep(tmp: &Path) {
        if !cfg!(target_os = "linux") {
            return;
        }
        let Ok(entries) = std::fs::read_dir(tmp) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    impl Drop for View {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn the_amx_variant_is_left_out_of_the_folder_ggml_loads() {
        let dir = std::env::temp_dir().join(format!("hearth-amx-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "libggml-cpu-sapphirerapids.so",
            "libggml-cpu-zen4.so",
            "libggml-vulkan.so",
        ] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        let view = view_without_amx(&dir).expect("a folder without the AMX variant");
        let mut names: Vec<String> = std::fs::read_dir(view.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["libggml-cpu-zen4.so", "libggml-vulkan.so"]);
        let path = view.path().to_owned();
        drop(view);
        assert!(!path.exists(), "the folder of links is removed");
        // A folder left by a process that is gone goes at the next start; a live one's stays.
        let tmp = dir.join("tmp");
        let (gone, alive) = (
            tmp.join("hearth-backends-4294967295-1"),
            tmp.join(format!("hearth-backends-{}-1", std::process::id())),
        );
        std::fs::create_dir_all(&gone).unwrap();
        std::fs::create_dir_all(&alive).unwrap();
        tempfile_view::sweep(&tmp);
        assert!(!gone.exists() && alive.exists());
        std::fs::remove_file(dir.join("libggml-cpu-sapphirerapids.so")).unwrap();
        assert!(view_without_amx(&dir).is_none(), "nothing to leave out");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
