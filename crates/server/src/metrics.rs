//! `GET /metrics`: the node's figures in OpenMetrics text through `prometheus-client` — engine
//! load and totals, throttle and thermal level from the telemetry sampler, in hub mode the
//! workers, the cluster's peers, each compute device's memory, and each loaded model's layers
//! on the GPU and video memory. Each scrape registers constant samples read from the live
//! state: cheap, read-only.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::state::AppState;
use hearth_base::thermal::ThermalLevel;

/// The content type `prometheus-client`'s text encoder writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let registry = registry(&state);
    let mut out = String::new();
    match encode(&mut out, &registry) {
        Ok(()) => ([(header::CONTENT_TYPE, OPENMETRICS)], out).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn registry(state: &AppState) -> Registry {
    let stats = state.host.stats();
    let t = state.telemetry.borrow().clone();
    let ready = matches!(
        *state.host.state().borrow(),
        hearth_engine::ModelState::Ready(_)
    );
    let thermal = match t.thermal.level {
        ThermalLevel::Nominal => 0,
        ThermalLevel::Fair => 1,
        ThermalLevel::Serious => 2,
        ThermalLevel::Critical => 3,
    };
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let mut r = Registry::default();
    r.register(
        "hearth_model_ready",
        "1 when a model is loaded and serving",
        ConstGauge::new(i64::from(ready)),
    );
    r.register(
        "hearth_slots",
        "Engine slots (parallel sequences)",
        ConstGauge::new(count(stats.slots)),
    );
    r.register(
        "hearth_slots_busy",
        "Slots generating now",
        ConstGauge::new(count(stats.active)),
    );
    r.register(
        "hearth_queue_depth",
        "Requests waiting for a slot",
        ConstGauge::new(count(stats.queued)),
    );
    r.register(
        "hearth_tokens_generated",
        "Tokens generated since start",
        ConstCounter::new(stats.tokens_generated),
    );
    r.register(
        "hearth_requests_finished",
        "Generations finished since start",
        ConstCounter::new(stats.requests_finished),
    );
    let pool = stats.pool;
    let gauge = |n: u64| ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
    r.register(
        "hearth_kv_tokens",
        "Tokens the loaded models' KV pools hold (requests' and idle prefixes)",
        gauge(pool.kv_used),
    );
    r.register(
        "hearth_prompt_cache_entries",
        "Sequences kept in host memory by the prompt cache",
        gauge(pool.cache_entries),
    );
    r.register_with_unit(
        "hearth_prompt_cache",
        "Host memory the prompt cache holds",
        Unit::Bytes,
        gauge(pool.cache_bytes),
    );
    r.register(
        "hearth_prompt_cache_restored_tokens",
        "Prompt tokens restored from the prompt cache instead of prefilled",
        ConstCounter::new(pool.cache_restored_tokens),
    );
    r.register(
        "hearth_requests_parked",
        "Requests set aside while the KV pool was full, resumed later",
        ConstCounter::new(pool.parked),
    );
    r.register(
        "hearth_spec_guessed_tokens",
        "Tokens speculation guessed ahead",
        ConstCounter::new(stats.spec.guessed),
    );
    r.register(
        "hearth_spec_held_tokens",
        "Guessed tokens that were what the sampler chose (kept)",
        ConstCounter::new(stats.spec.held),
    );
    r.register(
        "hearth_spec_speedup",
        "Tokens per second of steps with guesses over the same steps without, measured (0: none yet)",
        ConstGauge::new(stats.spec.speedup),
    );
    r.register(
        "hearth_engine_threads",
        "llama.cpp threads in use (fewer than configured while other programs keep cores busy)",
        ConstGauge::new(count(stats.threads)),
    );
    r.register(
        "hearth_tokens_per_second",
        "Generation rate over the last sample",
        ConstGauge::new(t.tokens_per_s),
    );
    r.register(
        "hearth_throttle",
        "Throttle in force, 0 (paused) to 100",
        ConstGauge::new(i64::from(t.throttle)),
    );
    r.register(
        "hearth_thermal_level",
        "0 nominal, 1 fair, 2 serious, 3 critical",
        ConstGauge::new(thermal),
    );
    r.register(
        "hearth_cpu_percent",
        "CPU use of the whole machine",
        ConstGauge::new(f64::from(t.cpu_percent)),
    );
    r.register_with_unit(
        "hearth_memory_used",
        "Memory in use on the machine",
        Unit::Bytes,
        ConstGauge::new(i64::try_from(t.memory.used_bytes).unwrap_or(i64::MAX)),
    );
    devices(&mut r, state);
    if let Some(hub) = state.router.hub().filter(|h| h.accepts_workers()) {
        hub.snapshot().register_metrics(&mut r);
    }
    if state.cluster.port.is_some() {
        let redispatched = state.router.hub().map_or(0, |h| h.snapshot().redispatched);
        hearth_cluster::metrics::register(
            &mut r,
            &state.cluster.peers.list(),
            state.cluster.peers.traffic(),
            redispatched,
        );
    }
    r
}

/// Each device's memory, and each loaded model's layers on the GPU and video memory.
fn devices(r: &mut Registry, state: &AppState) {
    let bytes = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for d in hearth_engine::devices::devices() {
        let sub = r.sub_registry_with_labels(
            [
                ("device".into(), d.name.clone().into()),
                ("backend".into(), d.backend.clone().into()),
            ]
            .into_iter(),
        );
        sub.register_with_unit(
            "hearth_device_memory_total",
            "Memory of a compute device",
            Unit::Bytes,
            ConstGauge::new(bytes(d.memory_total)),
        );
        sub.register_with_unit(
            "hearth_device_memory_free",
            "Free memory of a compute device",
            Unit::Bytes,
            ConstGauge::new(bytes(d.memory_free)),
        );
    }
    for id in state.host.loaded_models() {
        let Some(info) = state.host.model_info(&id) else {
            continue;
        };
        let p = &info.placement;
        let sub = r.sub_registry_with_label(("model".into(), id.to_string().into()));
        sub.register(
            "hearth_model_gpu_layers",
            "Layers of a loaded model on the GPU (llama.cpp's units: the layers and the output)",
            ConstGauge::new(i64::from(p.layers)),
        );
        sub.register(
            "hearth_model_layers",
            "Layers of a loaded model in all (llama.cpp's units)",
            ConstGauge::new(i64::from(p.layers_total)),
        );
        sub.register_with_unit(
            "hearth_model_vram",
            "Video memory a loaded model took",
            Unit::Bytes,
            ConstGauge::new(bytes(p.vram_bytes)),
        );
    }
}
