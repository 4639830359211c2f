//! `GET /metrics`: the node's figures in Prometheus text format — engine load and totals,
//! throttle and thermal level from the telemetry sampler, and in hub mode the workers.
//! Read-only and cheap, like `/api/status`.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use crate::telemetry::ThermalLevel;

pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
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
    let mut out = String::new();
    for (name, kind, help, value) in [
        (
            "hearth_model_ready",
            "gauge",
            "1 when a model is loaded and serving.",
            f64::from(u8::from(ready)),
        ),
        (
            "hearth_slots",
            "gauge",
            "Engine slots (parallel sequences).",
            stats.slots as f64,
        ),
        (
            "hearth_slots_busy",
            "gauge",
            "Slots generating now.",
            stats.active as f64,
        ),
        (
            "hearth_queue_depth",
            "gauge",
            "Requests waiting for a slot.",
            stats.queued as f64,
        ),
        (
            "hearth_tokens_generated_total",
            "counter",
            "Tokens generated since start.",
            stats.tokens_generated as f64,
        ),
        (
            "hearth_requests_finished_total",
            "counter",
            "Generations finished since start.",
            stats.requests_finished as f64,
        ),
        (
            "hearth_engine_threads",
            "gauge",
            "llama.cpp threads in use (fewer than configured while other programs keep cores busy).",
            stats.threads as f64,
        ),
        (
            "hearth_tokens_per_second",
            "gauge",
            "Generation rate over the last sample.",
            t.tokens_per_s,
        ),
        (
            "hearth_throttle",
            "gauge",
            "Throttle in force, 0 (paused) to 100.",
            f64::from(t.throttle),
        ),
        (
            "hearth_thermal_level",
            "gauge",
            "0 nominal, 1 fair, 2 serious, 3 critical.",
            f64::from(thermal),
        ),
        (
            "hearth_cpu_percent",
            "gauge",
            "CPU use of the whole machine.",
            f64::from(t.cpu_percent),
        ),
        (
            "hearth_memory_used_bytes",
            "gauge",
            "Memory in use on the machine.",
            t.memory.used_bytes as f64,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {value}");
    }
    if let Some(hub) = state.router.hub() {
        hub.snapshot().write_prometheus(&mut out);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
}
