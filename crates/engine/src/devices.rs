//! The devices llama.cpp computes on. Its backends are libraries loaded at start where this
//! build has them so (Linux, Windows: ggml's `GGML_BACKEND_DL`): every x86-64 CPU variant, of
//! which ggml keeps the best this processor runs, and the GPU backends, each of which loads
//! only where its driver is found. This module says what came of it: the devices (name, kind,
//! memory); the CPU variant and its features are `cpu`'s. The lookups that `llama-cpp-2` does
//! not wrap are the module's `unsafe`.
#![allow(unsafe_code)]

use std::ffi::CStr;

use llama_cpp_2::{list_llama_ggml_backend_devices, LlamaBackendDeviceType};
use serde::Serialize;

/// What a device is, as ggml reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Cpu,
    Gpu,
    IntegratedGpu,
    Accelerator,
    /// A device of another machine, through llama.cpp's RPC backend (a split model).
    Remote,
    Unknown,
}

/// One device llama.cpp can place a model's layers on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    /// ggml's name, e.g. `Vulkan0`, `CUDA0`, `CPU`.
    pub name: String,
    /// What the driver calls it, e.g. `NVIDIA GeForce RTX 4090`.
    pub description: String,
    /// The backend it belongs to: `Vulkan`, `CUDA`, `Metal`, `CPU`, `RPC`.
    pub backend: String,
    pub kind: DeviceKind,
    /// Bytes of memory, and free now.
    pub memory_total: u64,
    pub memory_free: u64,
    /// Its index in ggml's device list (what a model's device list names).
    #[serde(skip)]
    pub index: usize,
    /// The physical device's id where the driver gives one (a PCI bus id): one card seen by
    /// two backends (CUDA and Vulkan) has the same.
    #[serde(skip)]
    pub device_id: Option<String>,
}

impl Device {
    /// A device of this machine that computes a model's layers faster than its CPU can: a GPU
    /// or accelerator (never the CPU, nor another machine's device).
    pub fn is_gpu(&self) -> bool {
        matches!(
            self.kind,
            DeviceKind::Gpu | DeviceKind::IntegratedGpu | DeviceKind::Accelerator
        )
    }

    /// The backend's name in the cluster's words (`gpuBackend`): `vulkan`, `cuda`, `metal`...
    pub fn backend_id(&self) -> String {
        self.backend.to_ascii_lowercase()
    }
}

/// Every device ggml has now, with its memory free now.
pub fn devices() -> Vec<Device> {
    if crate::backend::backend().is_err() {
        return Vec::new();
    }
    list_llama_ggml_backend_devices()
        .into_iter()
        .map(|d| Device {
            kind: if d.backend.eq_ignore_ascii_case("RPC") {
                DeviceKind::Remote
            } else {
                match d.device_type {
                    LlamaBackendDeviceType::Cpu => DeviceKind::Cpu,
                    LlamaBackendDeviceType::Gpu => DeviceKind::Gpu,
                    LlamaBackendDeviceType::IntegratedGpu => DeviceKind::IntegratedGpu,
                    LlamaBackendDeviceType::Accelerator => DeviceKind::Accelerator,
                    LlamaBackendDeviceType::Unknown => DeviceKind::Unknown,
                }
            },
            name: d.name,
            description: d.description,
            backend: d.backend,
            memory_total: d.memory_total as u64,
            memory_free: cpu_free(d.device_type, d.memory_total as u64, d.memory_free as u64),
            device_id: device_id(d.index),
            index: d.index,
        })
        .collect()
}

/// The CPU's free memory: ggml's CPU device reports all of it free (a model loaded there then
/// shows "0 used"), so where it does the system's available memory says it instead.
fn cpu_free(kind: LlamaBackendDeviceType, total: u64, free: u64) -> u64 {
    if kind != LlamaBackendDeviceType::Cpu || free < total {
        return free;
    }
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| mem_available(&m))
        .map_or(free, |available| available.min(total))
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

/// The id of ggml's device `index`, when its driver gives one.
fn device_id(index: usize) -> Option<String> {
    // SAFETY: `index` is below ggml's device count (it came from its list, which only grows);
    // the properties are plain data filled in by the call, valid all zeros before it, and the
    // id, when there is one, a NUL-terminated string the device owns.
    unsafe {
        let dev = llama_cpp_sys_2::ggml_backend_dev_get(index);
        if dev.is_null() {
            return None;
        }
        let mut props: llama_cpp_sys_2::ggml_backend_dev_props = std::mem::zeroed();
        llama_cpp_sys_2::ggml_backend_dev_get_props(dev, &raw mut props);
        (!props.device_id.is_null()).then(|| {
            CStr::from_ptr(props.device_id)
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// This machine's GPUs (and accelerators), in ggml's order, as llama.cpp picks them by
/// default: a card seen by two backends once (by the first, CUDA before Vulkan), and
/// integrated GPUs only where there is no discrete one.
pub fn gpus() -> Vec<Device> {
    distinct(devices().into_iter().filter(Device::is_gpu).collect())
}

fn distinct(all: Vec<Device>) -> Vec<Device> {
    let discrete = all.iter().any(|d| d.kind != DeviceKind::IntegratedGpu);
    let mut out: Vec<Device> = Vec::new();
    for d in all {
        let seen = d.device_id.is_some() && out.iter().any(|o| o.device_id == d.device_id);
        let passed_over = discrete && d.kind == DeviceKind::IntegratedGpu;
        if !(seen || passed_over) {
            out.push(d);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_available_memory() {
        let m = "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(m), Some(20_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn a_cpu_reported_all_free_gets_the_system_figure() {
        let gpu = cpu_free(LlamaBackendDeviceType::Gpu, 100, 100);
        assert_eq!(gpu, 100, "a GPU's figure is its driver's");
        assert_eq!(cpu_free(LlamaBackendDeviceType::Cpu, 100, 40), 40);
        if std::path::Path::new("/proc/meminfo").exists() {
            let total = u64::MAX / 2;
            assert!(cpu_free(LlamaBackendDeviceType::Cpu, total, total) < total);
        }
    }

    #[test]
    fn a_card_seen_by_two_backends_is_used_once_and_integrated_gpus_only_alone() {
        let dev = |name: &str, kind, id: Option<&str>| Device {
            name: name.into(),
            description: String::new(),
            backend: name.trim_end_matches(char::is_numeric).into(),
            kind,
            memory_total: 1,
            memory_free: 1,
            index: 0,
            device_id: id.map(str::to_owned),
        };
        let names = |d: Vec<Device>| d.into_iter().map(|d| d.name).collect::<Vec<_>>();
        let cuda = dev("CUDA0", DeviceKind::Gpu, Some("0000:01:00.0"));
        let vulkan = dev("Vulkan0", DeviceKind::Gpu, Some("0000:01:00.0"));
        let other = dev("Vulkan1", DeviceKind::Gpu, Some("0000:02:00.0"));
        let igpu = dev("Vulkan2", DeviceKind::IntegratedGpu, None);
        assert_eq!(
            names(distinct(vec![
                cuda.clone(),
                vulkan.clone(),
                other.clone(),
                igpu.clone()
            ])),
            ["CUDA0", "Vulkan1"]
        );
        assert_eq!(names(distinct(vec![igpu.clone()])), ["Vulkan2"]);
        // Without ids nothing is taken for the same card.
        let a = dev("Vulkan0", DeviceKind::Gpu, None);
        let b = dev("Vulkan1", DeviceKind::Gpu, None);
        assert_eq!(names(distinct(vec![a, b])), ["Vulkan0", "Vulkan1"]);
    }

    #[test]
    fn this_machine_has_a_cpu_device_and_its_variant_is_known() {
        let all = devices();
        assert!(all.iter().any(|d| d.kind == DeviceKind::Cpu), "{all:?}");
        let features = crate::cpu::cpu_features();
        #[cfg(all(
            target_arch = "x86_64",
            any(target_os = "linux", target_os = "windows")
        ))]
        {
            // The variant this processor runs best, with at least SSE4.2's successors.
            let b = crate::backend::loaded();
            assert!(b.cpu_variant.is_some(), "{b:?}");
            assert!(!features.is_empty(), "{b:?}");
        }
        let _ = features;
    }
}
