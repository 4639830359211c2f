//! This machine in the words of the cluster's `hello` (`Hardware`): its GPU where it has one,
//! else its CPU, in the values the Swift app knows.

use hearth_protocol::cluster::Hardware;

/// A rough figure for CPU memory bandwidth (dual-channel DDR4), not a measurement: peers
/// that rank by it should not rank a CPU node at zero.
const CPU_MEMORY_BANDWIDTH_GBS: f64 = 25.0;

/// This machine as `hello` describes it: its GPU (the first llama.cpp uses: its backend, name
/// and video memory, all GPUs' together) where it has one, else its CPU. ggml reports no core
/// count, so `gpuCoreCount` stays 0.
pub(crate) fn hardware(
    cpu_name: String,
    total_ram_gb: f64,
    gpus: &[hearth_engine::Device],
) -> Hardware {
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let cpu_family = chip_family(std::env::consts::ARCH, &cpu_name);
    let (chip_family, chip_name, gpu_backend, gpu_vram_gb) = match gpus.first() {
        Some(gpu) => (
            gpu_family(&gpu.description).unwrap_or(cpu_family),
            gpu.description.clone(),
            gpu.backend_id(),
            Some(gib(gpus.iter().map(|g| g.memory_total).sum())),
        ),
        None => (cpu_family, cpu_name, "cpu".to_owned(), None),
    };
    Hardware {
        chip_family: chip_family.into(),
        chip_name,
        total_ram_gb,
        gpu_core_count: 0,
        memory_bandwidth_gbs: CPU_MEMORY_BANDWIDTH_GBS,
        tier: Some(match (gpu_vram_gb, total_ram_gb >= 16.0) {
            (Some(_), _) => 1,
            (None, true) => 2,
            (None, false) => 3,
        }),
        gpu_backend: Some(gpu_backend),
        platform: Some(platform(std::env::consts::OS).into()),
        gpu_vram_gb,
    }
}

/// `chipFamily` of a GPU, in the values the document and the Swift app know (others: none).
fn gpu_family(description: &str) -> Option<&'static str> {
    let d = description.to_ascii_lowercase();
    if ["nvidia", "geforce", "quadro", "tesla", "rtx"]
        .iter()
        .any(|n| d.contains(n))
    {
        Some("nvidiaGPU")
    } else if ["amd", "radeon"].iter().any(|n| d.contains(n)) {
        Some("amdGPU")
    } else {
        None
    }
}

/// `chipFamily` in the values the Swift app knows for machines like this one (an unknown one
/// broke discovery in the reference app).
fn chip_family(arch: &str, brand: &str) -> &'static str {
    match arch {
        "x86_64" | "x86" if brand.to_ascii_lowercase().contains("amd") => "amdCPU",
        "x86_64" | "x86" => "intelCPU",
        "aarch64" | "arm" => "armGeneric",
        _ => "unknown",
    }
}

/// `platform` as the Swift app spells it.
fn platform(os: &str) -> &str {
    match os {
        "macos" => "macOS",
        "ios" => "iOS",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_is_described_as_the_document_does() {
        let gpu = |description: &str, backend: &str, gib: u64| hearth_engine::Device {
            name: format!("{backend}0"),
            description: description.into(),
            backend: backend.into(),
            kind: hearth_engine::DeviceKind::Gpu,
            memory_total: gib << 30,
            memory_free: gib << 30,
            index: 1,
            device_id: None,
        };
        let h = hardware(
            "AMD Ryzen 9".into(),
            64.0,
            &[gpu("NVIDIA GeForce RTX 4090", "CUDA", 24)],
        );
        assert_eq!(
            (h.chip_family.as_str(), h.chip_name.as_str()),
            ("nvidiaGPU", "NVIDIA GeForce RTX 4090")
        );
        assert_eq!(h.gpu_backend.as_deref(), Some("cuda"));
        assert_eq!(h.gpu_vram_gb, Some(24.0));
        let v = hardware(
            "x".into(),
            8.0,
            &[
                gpu("AMD Radeon RX 7900 XTX (RADV NAVI31)", "Vulkan", 24),
                gpu("Intel(R) Arc(tm) A770", "Vulkan", 16),
            ],
        );
        assert_eq!(v.chip_family, "amdGPU");
        assert_eq!(v.gpu_backend.as_deref(), Some("vulkan"));
        assert_eq!(v.gpu_vram_gb, Some(40.0));
        let cpu = hardware("Intel(R) Xeon(R)".into(), 8.0, &[]);
        assert_eq!(
            (cpu.chip_family.as_str(), cpu.gpu_backend.as_deref()),
            ("intelCPU", Some("cpu"))
        );
        assert_eq!(cpu.gpu_vram_gb, None);
    }

    #[test]
    fn hardware_is_described_in_the_swift_apps_words() {
        assert_eq!(chip_family("x86_64", "AMD Ryzen 7 5800X"), "amdCPU");
        assert_eq!(
            chip_family("x86_64", "Intel(R) Xeon(R) Processor"),
            "intelCPU"
        );
        assert_eq!(chip_family("aarch64", "Cortex-A76"), "armGeneric");
        assert_eq!(chip_family("riscv64", ""), "unknown");
        assert_eq!(platform("macos"), "macOS");
        assert_eq!(platform("linux"), "linux");
    }
}
