//! Which CPU backend llama.cpp runs on: the variant ggml picked for this processor among the
//! libraries loaded at start, what it was built with, and where the backend libraries came
//! from ([`Backends`]). The lookup that `llama-cpp-2` does not wrap (the CPU backend's
//! features) is the module's `unsafe`.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr};
use std::path::PathBuf;

use serde::Serialize;

/// The backends as loaded at start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Backends {
    /// Where the backend libraries were loaded from (none: built into the program).
    pub dir: Option<PathBuf>,
    /// The CPU variant ggml picked for this processor (`haswell`, `skylakex`, `icelake`...),
    /// when it is one library of several.
    pub cpu_variant: Option<String>,
    /// What that variant was built with (`AVX2`, `AVX512`, `FMA`...).
    pub cpu_features: Vec<String>,
}

/// The CPU backend's features, from its `ggml_backend_get_features` (a list of name/value
/// pairs ending with a null name): those whose value is `1`.
pub(crate) fn cpu_features() -> Vec<String> {
    type GetFeatures = unsafe extern "C" fn(
        llama_cpp_sys_2::ggml_backend_reg_t,
    ) -> *const llama_cpp_sys_2::ggml_backend_feature;
    // SAFETY: plain lookups in ggml's registry, initialised by the backend held by the caller;
    // the names are NUL-terminated literals.
    let (reg, address) = unsafe {
        let reg = llama_cpp_sys_2::ggml_backend_reg_by_name(c"CPU".as_ptr());
        if reg.is_null() {
            return Vec::new();
        }
        let address = llama_cpp_sys_2::ggml_backend_reg_get_proc_address(
            reg,
            c"ggml_backend_get_features".as_ptr(),
        );
        (reg, address)
    };
    if address.is_null() {
        return Vec::new();
    }
    // SAFETY: ggml's CPU backend exports this name with exactly this signature
    // (`ggml_backend_get_features_t` in ggml-backend.h).
    let get: GetFeatures =
        unsafe { std::mem::transmute::<*mut std::ffi::c_void, GetFeatures>(address) };
    let mut out = Vec::new();
    // SAFETY: the list is static data of the loaded CPU backend, ended by a null name; each
    // name and value is a NUL-terminated string.
    unsafe {
        let mut f = get(reg);
        while !f.is_null() && !(*f).name.is_null() {
            let text = |p: *const c_char| {
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            if text((*f).value) == "1" {
                out.push(text((*f).name));
            }
            f = f.add(1);
        }
    }
    out
}

/// The CPU variant loaded in this process, from the library's name (`libggml-cpu-icelake.so`:
/// `icelake`), as the process's memory map shows it.
pub(crate) fn cpu_variant() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    variant_in(&maps)
}

fn variant_in(maps: &str) -> Option<String> {
    maps.lines()
        .filter_map(|l| l.rsplit('/').next())
        .find_map(|file| {
            file.strip_prefix("libggml-cpu-")?
                .strip_suffix(".so")
                .map(str::to_owned)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_variant_is_read_from_the_library_mapped() {
        let maps = "7f00-7f01 r--p 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f02-7f03 r-xp 0 08:01 2 /opt/hearth/backends/libggml-cpu-icelake.so\n";
        assert_eq!(variant_in(maps), Some("icelake".into()));
        assert_eq!(
            variant_in("7f00-7f01 r--p 0 08:01 1 /lib/libggml-cpu.so\n"),
            None
        );
    }
}
