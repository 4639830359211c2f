//! Where a model's layers go: how many to this machine's GPUs (`--gpu-layers auto|N|0`, on
//! `--device`), and what happens when that fails. `auto` is llama.cpp's own fitting
//! (`fit_params`): the layers that the free video memory holds, less a margin, at the context
//! the node asks for. A load or a context that fails on the GPU (out of video memory, a driver
//! error) is tried again with half the layers, then on the CPU, and [`Placement::note`] says
//! so: never a crash, never a silent CPU fallback.

use std::ffi::CString;
use std::pin::Pin;
use std::sync::Mutex;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::model::params::LlamaModelParams;
use serde::Serialize;

use crate::config::{DeviceChoice, EngineConfig, GpuLayers};
use crate::devices::{self, Device};

/// What fitting keeps free on each GPU first: the margin (`--gpu-margin`), and room for the
/// model's projector, which goes to the GPU with a model loaded there whole (a split's worker
/// runs its projector on the CPU). Kept on every GPU: mtmd takes the first GPU-type device,
/// which need not be the first of those chosen.
fn kept_free(config: &EngineConfig) -> u64 {
    let projector = config
        .projector
        .as_deref()
        .filter(|_| config.remote.is_none())
        .map_or(0, crate::media::projector_bytes);
    config.offload.margin.saturating_add(projector)
}

/// Where a loaded model's layers are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// The backend that computes the offloaded layers (`Vulkan`, `CUDA`, `Metal`), or `CPU`.
    pub backend: String,
    /// The devices holding them (ggml's names, e.g. `Vulkan0`), and what they are.
    pub devices: Vec<String>,
    pub device_descriptions: Vec<String>,
    /// llama.cpp's offloaded units: the model's layers, then its output layer.
    pub layers: u32,
    pub layers_total: u32,
    /// Bytes of video memory the model took when it loaded (weights, cache, buffers).
    pub vram_bytes: u64,
    /// Why fewer layers than asked are on the GPU, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Placement {
    /// Every layer on this machine's GPU (a split model's remote devices do not count).
    pub fn on_gpu_whole(&self) -> bool {
        self.layers > 0 && self.layers >= self.layers_total && self.backend != "RPC"
    }

    /// On the CPU only.
    pub fn cpu(layers_total: u32, note: Option<String>) -> Self {
        Self {
            backend: "CPU".into(),
            layers_total,
            note,
            ..Self::default()
        }
    }
}

/// `fit_params` changes llama.cpp's global logger: one at a time in the process.
static FITTING: Mutex<()> = Mutex::new(());

/// The attempts of one load: what the next one asks for, and what went wrong before.
#[derive(Debug)]
pub(crate) struct Plan {
    /// After a failure: this many layers at most.
    at_most: Option<u32>,
    notes: Vec<String>,
}

impl Plan {
    pub(crate) fn new() -> Self {
        Self {
            at_most: None,
            notes: Vec::new(),
        }
    }

    /// The last attempt (with `placed`) failed for `why`: the next one takes half the layers,
    /// then none. False when it was on the CPU already (nothing is left to try).
    pub(crate) fn fewer(&mut self, placed: &Placement, why: String) -> bool {
        if placed.layers == 0 {
            return false;
        }
        let next = placed.layers / 2;
        // Halving a few layers is not worth another failed try: the CPU then.
        let next = if next < 4 { 0 } else { next };
        tracing::warn!(
            layers = placed.layers,
            next,
            devices = ?placed.devices,
            %why,
            "the model did not load on the GPU; trying again with fewer layers there"
        );
        self.notes.push(format!(
            "{} of {} layers on {} failed ({why})",
            placed.layers,
            placed.layers_total,
            placed.devices.join(", ")
        ));
        self.at_most = Some(next);
        true
    }

    /// Model parameters for the next attempt (`base()` with devices and layers set; pinned, as
    /// fitting points them at buffers of their own) and what they place. `ctx` is the context
    /// the node will ask for, which fitting leaves as it is.
    pub(crate) fn params(
        &self,
        config: &EngineConfig,
        base: &dyn Fn() -> LlamaModelParams,
        ctx: &LlamaContextParams,
        layers_total: u32,
    ) -> (Pin<Box<LlamaModelParams>>, Placement) {
        let offload = &config.offload;
        let gpus = chosen(&devices::gpus(), &offload.device);
        let mut notes = self.notes.clone();
        if let (DeviceChoice::Named(name), true) = (&offload.device, gpus.is_empty()) {
            notes.push(format!("no device is named {name}"));
        }
        let asked = match (offload.layers, self.at_most) {
            (_, Some(0)) | (GpuLayers::Count(0), _) => None,
            _ if gpus.is_empty() => None,
            (GpuLayers::Count(n), at_most) => {
                Some(n.min(layers_total).min(at_most.unwrap_or(u32::MAX)))
            }
            (GpuLayers::Auto, Some(at_most)) => Some(at_most.min(layers_total)),
            (GpuLayers::Auto, None) => {
                return self.fit(config, base, ctx, layers_total, &gpus, notes)
            }
        };
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        match asked {
            Some(n) if n > 0 => on_gpus(base, &gpus, n, layers_total, note),
            _ => cpu_only(base, layers_total, note),
        }
    }

    /// `auto`: llama.cpp's fitting on `gpus`, keeping the margin free on each.
    fn fit(
        &self,
        config: &EngineConfig,
        base: &dyn Fn() -> LlamaModelParams,
        ctx: &LlamaContextParams,
        layers_total: u32,
        gpus: &[Device],
        mut notes: Vec<String>,
    ) -> (Pin<Box<LlamaModelParams>>, Placement) {
        let indices: Vec<usize> = gpus.iter().map(|d| d.index).collect();
        let mut params = match base().with_devices(&indices) {
            Ok(p) => Box::pin(p),
            Err(e) => {
                notes.push(format!("the GPU devices: {e}"));
                return cpu_only(base, layers_total, Some(notes.join("; ")));
            }
        };
        let Ok(path) = CString::new(config.model_path.to_string_lossy().as_bytes()) else {
            return cpu_only(
                base,
                layers_total,
                Some("a model path with a NUL byte".into()),
            );
        };
        let mut kept = kept_free(config);
        let mut fitted = fit_once(&mut params, &path, ctx, kept, layers_total);
        // The projector goes to the GPU only with a model loaded there whole: when the room kept
        // for it leaves layers on the CPU, the layers take that room (the projector then runs on
        // the CPU).
        if kept != config.offload.margin && fitted.as_ref().is_ok_and(|l| *l < layers_total) {
            if let Ok(p) = base().with_devices(&indices) {
                let mut again = Box::pin(p);
                let margin = config.offload.margin;
                let refit = fit_once(&mut again, &path, ctx, margin, layers_total);
                if refit.is_ok() {
                    (params, fitted, kept) = (again, refit, margin);
                }
            }
        }
        match fitted {
            Ok(layers) => {
                let note = (!notes.is_empty()).then(|| notes.join("; "));
                if layers == 0 {
                    let why = format!(
                        "no layer fits the free video memory of {} with {} MiB left free",
                        names(gpus),
                        kept >> 20
                    );
                    return cpu_only(base, layers_total, Some(join(note, why)));
                }
                let placement = placement(gpus, layers, layers_total, note);
                (params, placement)
            }
            Err(e) => {
                let why = format!(
                    "the model does not fit the free video memory of {} with {} MiB left free ({e}): on the CPU",
                    names(gpus),
                    kept >> 20
                );
                tracing::warn!(%why, "fitting the model to the GPU");
                notes.push(why);
                cpu_only(base, layers_total, Some(notes.join("; ")))
            }
        }
    }
}

/// One run of llama.cpp's fitting on `params` (its devices chosen), keeping `kept` bytes free
/// on each: the layers it puts on the GPUs, or why it failed.
fn fit_once(
    params: &mut Pin<Box<LlamaModelParams>>,
    path: &CString,
    ctx: &LlamaContextParams,
    kept: u64,
    layers_total: u32,
) -> Result<u32, String> {
    // fit_params reads at least llama_max_devices() margins.
    let mut margins = vec![usize::try_from(kept).unwrap_or(usize::MAX); 256];
    let mut cparams = ctx.clone();
    let n_ctx = ctx.n_ctx().map_or(0, std::num::NonZeroU32::get);
    let _one = FITTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    params
        .as_mut()
        .fit_params(
            path,
            &mut cparams,
            &mut margins,
            n_ctx,
            llama_cpp_sys_2::GGML_LOG_LEVEL_INFO,
        )
        .map_err(|e| e.to_string())?;
    let n = params.n_gpu_layers();
    Ok(if n < 0 {
        layers_total
    } else {
        (n as u32).min(layers_total)
    })
}

fn join(note: Option<String>, why: String) -> String {
    match note {
        Some(n) => format!("{n}; {why}"),
        None => why,
    }
}

fn names(gpus: &[Device]) -> String {
    gpus.iter()
        .map(|d| format!("{} ({})", d.name, d.description))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The GPUs a model goes to under `offload` (none when it stays on the CPU).
pub fn chosen_gpus(offload: &crate::config::Offload) -> Vec<Device> {
    if offload.layers == GpuLayers::Count(0) {
        return Vec::new();
    }
    chosen(&devices::gpus(), &offload.device)
}

/// The GPUs `choice` names among `gpus`.
fn chosen(gpus: &[Device], choice: &DeviceChoice) -> Vec<Device> {
    match choice {
        DeviceChoice::Any => gpus.to_vec(),
        DeviceChoice::None => Vec::new(),
        DeviceChoice::Named(name) => {
            let lower = name.to_lowercase();
            gpus.iter()
                .filter(|d| {
                    d.name.eq_ignore_ascii_case(name)
                        || d.description.to_lowercase().contains(&lower)
                })
                .cloned()
                .collect()
        }
    }
}

fn placement(gpus: &[Device], layers: u32, layers_total: u32, note: Option<String>) -> Placement {
    Placement {
        backend: gpus.first().map(|d| d.backend.clone()).unwrap_or_default(),
        devices: gpus.iter().map(|d| d.name.clone()).collect(),
        device_descriptions: gpus.iter().map(|d| d.description.clone()).collect(),
        layers,
        layers_total,
        vram_bytes: 0,
        note,
    }
}

fn on_gpus(
    base: &dyn Fn() -> LlamaModelParams,
    gpus: &[Device],
    layers: u32,
    layers_total: u32,
    note: Option<String>,
) -> (Pin<Box<LlamaModelParams>>, Placement) {
    let indices: Vec<usize> = gpus.iter().map(|d| d.index).collect();
    match base().with_devices(&indices) {
        Ok(p) => (
            Box::pin(p.with_n_gpu_layers(layers)),
            placement(gpus, layers, layers_total, note),
        ),
        Err(e) => cpu_only(
            base,
            layers_total,
            Some(join(note, format!("the GPU devices: {e}"))),
        ),
    }
}

/// No device but the CPU: none of its work goes to a GPU (not even large batches, which
/// llama.cpp would otherwise offload).
fn cpu_only(
    base: &dyn Fn() -> LlamaModelParams,
    layers_total: u32,
    note: Option<String>,
) -> (Pin<Box<LlamaModelParams>>, Placement) {
    // An empty device list is always accepted (none past llama.cpp's maximum, none unknown);
    // were it not, no layer on a GPU is the next best.
    let params = base()
        .with_devices(&[])
        .unwrap_or_else(|_| base())
        .with_n_gpu_layers(0);
    (Box::pin(params), Placement::cpu(layers_total, note))
}

/// Bytes of video memory taken on `devices` (ggml names) since `before` was read.
pub(crate) fn taken_since(before: &[Device], devices: &[String]) -> u64 {
    let now = devices::devices();
    devices
        .iter()
        .filter_map(|name| {
            let then = before.iter().find(|d| &d.name == name)?;
            let now = now.iter().find(|d| &d.name == name)?;
            Some(then.memory_free.saturating_sub(now.memory_free))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::DeviceKind;

    /// Fitting leaves room for the projector that follows a model loaded whole on the GPU, and
    /// none for a split's worker, whose projector stays on the CPU.
    #[test]
    fn fitting_keeps_the_projectors_room_free() {
        let dir = tempfile::tempdir().unwrap();
        let projector = dir.path().join("mmproj-m.gguf");
        std::fs::write(&projector, vec![0u8; 3 << 20]).unwrap();
        let mut config = EngineConfig::new(dir.path().join("m.gguf"));
        config.offload.margin = 512 << 20;
        assert_eq!(kept_free(&config), 512 << 20);
        config.projector = Some(projector);
        assert_eq!(kept_free(&config), (512 << 20) + (6 << 20));
        config.remote = Some(crate::config::Remote {
            endpoints: vec!["127.0.0.1:50052".into()],
            layers: 10,
            shares: vec![10],
        });
        assert_eq!(kept_free(&config), 512 << 20);
    }

    fn gpu(name: &str, description: &str) -> Device {
        Device {
            name: name.into(),
            description: description.into(),
            backend: "Vulkan".into(),
            kind: DeviceKind::Gpu,
            memory_total: 8 << 30,
            memory_free: 7 << 30,
            index: 1,
            device_id: None,
        }
    }

    #[test]
    fn a_device_is_chosen_by_name_or_description() {
        let all = [
            gpu("Vulkan0", "AMD Radeon RX 7900"),
            gpu("Vulkan1", "NVIDIA GeForce RTX 4090"),
        ];
        assert_eq!(chosen(&all, &DeviceChoice::Any).len(), 2);
        assert!(chosen(&all, &DeviceChoice::None).is_empty());
        let by_name = chosen(&all, &DeviceChoice::Named("vulkan1".into()));
        assert_eq!(by_name[0].description, "NVIDIA GeForce RTX 4090");
        let by_description = chosen(&all, &DeviceChoice::Named("7900".into()));
        assert_eq!(by_description[0].name, "Vulkan0");
        assert!(chosen(&all, &DeviceChoice::Named("Metal".into())).is_empty());
    }

    #[test]
    fn a_failed_offload_halves_then_goes_to_the_cpu() {
        let mut plan = Plan::new();
        let placed = |layers| Placement {
            layers,
            layers_total: 33,
            devices: vec!["Vulkan0".into()],
            ..Placement::default()
        };
        assert!(plan.fewer(&placed(33), "out of device memory".into()));
        assert_eq!(plan.at_most, Some(16));
        assert!(plan.fewer(&placed(16), "out of device memory".into()));
        assert_eq!(plan.at_most, Some(8));
        assert!(plan.fewer(&placed(6), "x".into()));
        assert_eq!(plan.at_most, Some(0), "fewer than four: the CPU");
        assert!(!plan.fewer(&placed(0), "x".into()), "nothing left to try");
        assert!(plan.notes[0].contains("33 of 33 layers on Vulkan0 failed (out of device memory)"));
    }
}
