//! How hot a machine runs, in the four levels every part speaks (TealeNet's thermal states):
//! read from sensors or pressure by the telemetry sampler, sent in heartbeats, weighed by
//! placement, and the throttle each level implies.

use serde::Serialize;

/// A machine's thermal state, coolest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThermalLevel {
    Nominal,
    Fair,
    Serious,
    Critical,
}

impl ThermalLevel {
    /// Back from `level as u8`.
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Nominal,
            1 => Self::Fair,
            2 => Self::Serious,
            _ => Self::Critical,
        }
    }

    /// From temperature over critical temperature (DESIGN.md §5, ENVIRONMENT.md).
    pub fn from_temperature_ratio(r: f32) -> Self {
        match r {
            r if r < 0.70 => Self::Nominal,
            r if r < 0.85 => Self::Fair,
            r if r < 0.95 => Self::Serious,
            _ => Self::Critical,
        }
    }

    /// From CPU pressure `some avg10`, in percent.
    pub fn from_pressure(p: f32) -> Self {
        match p {
            p if p < 10.0 => Self::Nominal,
            p if p < 40.0 => Self::Fair,
            p if p < 80.0 => Self::Serious,
            _ => Self::Critical,
        }
    }

    /// The throttle a level implies (TealeNet's mapping: fair 75, serious 25, critical 0).
    pub fn throttle(self) -> u8 {
        match self {
            Self::Nominal => 100,
            Self::Fair => 75,
            Self::Serious => 25,
            Self::Critical => 0,
        }
    }
}
