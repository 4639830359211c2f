//! Telemetry: one long-lived sampler task owns `sysinfo::System` and publishes a snapshot
//! every second on a `watch` channel — CPU, memory, thermal level and throttle, and the
//! engine's load and tokens/s. The same figures feed `/api/events` and the cluster's
//! heartbeats. Thermal level comes from one sensor file when `--thermal-zone` names it (the
//! kernel's millidegree format), else from temperature sensors where they exist, else it is
//! estimated from CPU pressure (`/proc/pressure/cpu`) and labelled as an estimate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sysinfo::{Components, System};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

// Part of a sample: the desktop app reads it from here.
pub use hearth_base::thermal::ThermalLevel;

use crate::ModelHost;

/// How often a snapshot is taken.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThermalSource {
    /// Temperature sensors; `value` is the hottest, in °C.
    Sensors,
    /// No sensors; `value` is CPU pressure (some avg10, %), or the load average per core in %
    /// where pressure is not reported.
    Estimated,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thermal {
    pub level: ThermalLevel,
    pub source: ThermalSource,
    pub value: f32,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Memory {
    pub used_bytes: u64,
    pub total_bytes: u64,
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Telemetry {
    pub time: i64,
    pub cpu_percent: f32,
    pub memory: Memory,
    pub thermal: Thermal,
    /// The throttle in force: the lower of the user's (0 when serving is paused) and what the
    /// temperature allows.
    pub throttle: u8,
    pub paused: bool,
    pub slots: usize,
    pub active: usize,
    pub queued: usize,
    pub tokens_per_s: f64,
}

/// Parse `some avg10=…` from `/proc/pressure/cpu`.
pub fn parse_pressure(text: &str) -> Option<f32> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))
        .and_then(|v| v.parse().ok())
}

/// A temperature in the kernel's format (`/sys/class/thermal/thermal_zone*/temp`): an
/// integer of millidegrees Celsius; in °C.
pub fn parse_millidegrees(text: &str) -> Option<f32> {
    let v: i64 = text.trim().parse().ok()?;
    Some(v as f32 / 1000.0)
}

/// The critical temperature (°C) of a kernel thermal zone whose `temp` file is `path`: its
/// trip point of type `critical`, if it has one.
fn critical_trip(path: &Path) -> Option<f32> {
    let dir = path.parent()?;
    (0..16).find_map(|i| {
        let kind = std::fs::read_to_string(dir.join(format!("trip_point_{i}_type"))).ok()?;
        if kind.trim() != "critical" {
            return None;
        }
        let t = std::fs::read_to_string(dir.join(format!("trip_point_{i}_temp"))).ok()?;
        parse_millidegrees(&t).filter(|c| *c > 0.0)
    })
}

/// The level from the one sensor file `path` (`--thermal-zone`), against its zone's critical
/// trip point or else 100 °C; `None` when it cannot be read.
pub fn zone_thermal(path: &Path) -> Option<Thermal> {
    let t = parse_millidegrees(&std::fs::read_to_string(path).ok()?)?;
    let critical = critical_trip(path).unwrap_or(100.0);
    Some(Thermal {
        level: ThermalLevel::from_temperature_ratio(t / critical),
        source: ThermalSource::Sensors,
        value: t,
    })
}

/// Where the sampler reads the thermal level.
struct ThermalInput {
    zone: Option<PathBuf>,
    components: Option<Components>,
    cores: usize,
    /// The zone file failed to read and the estimate stands in (said once).
    zone_failing: bool,
    /// The zone's last reading and the failed reads since: a passing failure (a file being
    /// rewritten) keeps the last level instead of lifting the throttle.
    last_zone: Option<(Thermal, u32)>,
}

/// Failed reads of the zone file that keep its last level.
const ZONE_MISSES_KEPT: u32 = 5;

impl ThermalInput {
    fn read(&mut self) -> Thermal {
        if let Some(path) = &self.zone {
            match zone_thermal(path) {
                Some(t) => {
                    if self.zone_failing {
                        tracing::info!(path = %path.display(), "reading the thermal zone again");
                        self.zone_failing = false;
                    }
                    self.last_zone = Some((t, 0));
                    return t;
                }
                None => {
                    if let Some((t, misses)) = self.last_zone.as_mut() {
                        if *misses < ZONE_MISSES_KEPT {
                            *misses += 1;
                            return *t;
                        }
                    }
                }
            }
            if !self.zone_failing {
                tracing::warn!(path = %path.display(), "the thermal zone cannot be read; estimating from CPU pressure until it can");
                self.zone_failing = true;
            }
            return thermal(&mut None, self.cores);
        }
        thermal(&mut self.components, self.cores)
    }
}

/// Sensors where they exist, else an estimate.
fn thermal(components: &mut Option<Components>, cores: usize) -> Thermal {
    if let Some(c) = components.as_mut() {
        c.refresh(false);
        let hottest = c
            .iter()
            .filter_map(|c| {
                let t = c.temperature()?;
                let crit = c.critical().filter(|v| *v > 0.0).unwrap_or(100.0);
                (t.is_finite() && t > 0.0).then_some((t, t / crit))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((t, ratio)) = hottest {
            return Thermal {
                level: ThermalLevel::from_temperature_ratio(ratio),
                source: ThermalSource::Sensors,
                value: t,
            };
        }
    }
    let pressure = std::fs::read_to_string("/proc/pressure/cpu")
        .ok()
        .and_then(|s| parse_pressure(&s))
        .or_else(|| {
            System::load_average()
                .ok()
                .map(|l| (l.one / cores.max(1) as f64 * 100.0) as f32)
        })
        .unwrap_or(0.0);
    Thermal {
        level: ThermalLevel::from_pressure(pressure),
        source: ThermalSource::Estimated,
        value: pressure,
    }
}

/// Start the sampler; it stops when `shutdown` is cancelled. `zone` is `--thermal-zone`.
pub fn spawn(
    host: Arc<ModelHost>,
    shutdown: CancellationToken,
    zone: Option<PathBuf>,
) -> watch::Receiver<Telemetry> {
    let mut sys = System::new().ok();
    let components = if zone.is_some() {
        None
    } else {
        let c = Components::new_with_refreshed_list()
            .ok()
            .filter(|c| c.iter().any(|c| c.temperature().is_some()));
        if c.is_none() {
            tracing::info!(
                "no temperature sensors: the thermal level is estimated from CPU pressure"
            );
        }
        c
    };
    let mut input = ThermalInput {
        zone,
        components,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        zone_failing: false,
        last_zone: None,
    };
    let first = sample(&mut sys, &mut input, &host, None);
    let (tx, rx) = watch::channel(first);
    tokio::spawn(async move {
        let mut last = (Instant::now(), host.stats().tokens_generated);
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => return,
            }
            let snapshot = sample(&mut sys, &mut input, &host, Some(&mut last));
            tx.send_replace(snapshot);
        }
    });
    rx
}

fn sample(
    sys: &mut Option<System>,
    input: &mut ThermalInput,
    host: &ModelHost,
    last: Option<&mut (Instant, u64)>,
) -> Telemetry {
    let (cpu_percent, memory) = match sys.as_mut() {
        Some(s) => {
            s.refresh_cpu_usage();
            s.refresh_memory();
            (
                s.global_cpu_usage(),
                Memory {
                    used_bytes: s.used_memory(),
                    total_bytes: s.total_memory(),
                },
            )
        }
        None => (
            0.0,
            Memory {
                used_bytes: 0,
                total_bytes: 0,
            },
        ),
    };
    let thermal = input.read();
    // Only real temperatures slow the engine down: an estimate from CPU pressure rises with
    // the engine's own work, and throttling on it would only feed back on itself.
    host.set_thermal(match thermal.source {
        ThermalSource::Sensors => Some(thermal.level),
        ThermalSource::Estimated => None,
    });
    let stats = host.stats();
    let tokens_per_s = match last {
        Some((at, tokens)) => {
            let secs = at.elapsed().as_secs_f64();
            // A new engine restarts its counter: never report a negative rate.
            let delta = stats.tokens_generated.saturating_sub(*tokens);
            *at = Instant::now();
            *tokens = stats.tokens_generated;
            if secs > 0.0 {
                delta as f64 / secs
            } else {
                0.0
            }
        }
        None => 0.0,
    };
    Telemetry {
        time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
        cpu_percent,
        memory,
        thermal,
        throttle: host.throttle(),
        paused: host.is_paused(),
        slots: stats.slots,
        active: stats.active,
        queued: stats.queued,
        tokens_per_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thermal_zone_is_read_in_millidegrees_against_its_critical_trip_point() {
        assert_eq!(parse_millidegrees("45000\n"), Some(45.0));
        assert_eq!(parse_millidegrees("-5000"), Some(-5.0));
        assert_eq!(parse_millidegrees("45.0"), None);
        assert_eq!(parse_millidegrees(""), None);
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join("temp");
        std::fs::write(&temp, "72000\n").unwrap();
        // Against 100 °C: 0.72 is fair.
        let t = zone_thermal(&temp).unwrap();
        assert_eq!(
            (t.level, t.source, t.value),
            (ThermalLevel::Fair, ThermalSource::Sensors, 72.0)
        );
        // Against the zone's own critical trip point (80 °C): 0.9 is serious.
        std::fs::write(dir.path().join("trip_point_0_type"), "passive\n").unwrap();
        std::fs::write(dir.path().join("trip_point_0_temp"), "60000\n").unwrap();
        std::fs::write(dir.path().join("trip_point_1_type"), "critical\n").unwrap();
        std::fs::write(dir.path().join("trip_point_1_temp"), "80000\n").unwrap();
        assert_eq!(zone_thermal(&temp).unwrap().level, ThermalLevel::Serious);
        // A failed read keeps the last level for a few samples, then gives way to the estimate.
        let mut input = ThermalInput {
            zone: Some(temp.clone()),
            components: None,
            cores: 1,
            zone_failing: false,
            last_zone: None,
        };
        assert_eq!(input.read().level, ThermalLevel::Serious);
        std::fs::write(&temp, "not a number").unwrap();
        for _ in 0..ZONE_MISSES_KEPT {
            assert_eq!(input.read().source, ThermalSource::Sensors);
        }
        assert_eq!(input.read().source, ThermalSource::Estimated);
        assert!(zone_thermal(&temp).is_none());
        assert!(zone_thermal(&dir.path().join("missing")).is_none());
    }

    #[test]
    fn levels_and_throttle_follow_the_design_thresholds() {
        assert_eq!(
            ThermalLevel::from_temperature_ratio(0.5),
            ThermalLevel::Nominal
        );
        assert_eq!(
            ThermalLevel::from_temperature_ratio(0.70),
            ThermalLevel::Fair
        );
        assert_eq!(
            ThermalLevel::from_temperature_ratio(0.9),
            ThermalLevel::Serious
        );
        assert_eq!(
            ThermalLevel::from_temperature_ratio(0.95),
            ThermalLevel::Critical
        );
        assert_eq!(ThermalLevel::from_pressure(9.9), ThermalLevel::Nominal);
        assert_eq!(ThermalLevel::from_pressure(10.0), ThermalLevel::Fair);
        assert_eq!(ThermalLevel::from_pressure(79.0), ThermalLevel::Serious);
        assert_eq!(ThermalLevel::from_pressure(80.0), ThermalLevel::Critical);
        let throttles: Vec<u8> = [
            ThermalLevel::Nominal,
            ThermalLevel::Fair,
            ThermalLevel::Serious,
            ThermalLevel::Critical,
        ]
        .iter()
        .map(|l| l.throttle())
        .collect();
        assert_eq!(throttles, vec![100, 75, 25, 0]);
    }

    #[test]
    fn parses_cpu_pressure() {
        let text = "some avg10=12.34 avg60=5.00 avg300=1.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure(text), Some(12.34));
        assert_eq!(parse_pressure("full avg10=1.0"), None);
    }

    #[test]
    fn this_machine_gets_a_thermal_reading() {
        let mut none = None;
        let t = thermal(&mut none, 2);
        assert_eq!(t.source, ThermalSource::Estimated);
        assert!(t.value >= 0.0);
    }
}
