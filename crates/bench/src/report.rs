//! Turning samples into the report: medians and spreads, ratios against the floor, the
//! printed table, `bench/results.json`, the throughput chart (SVG drawn here, no plotting
//! service) and the table inside `docs/PERFORMANCE.md`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

/// A figure measured several times.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figure {
    pub(crate) name: String,
    pub(crate) unit: &'static str,
    pub(crate) samples: Vec<f64>,
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// The floor figure this one is compared with, and the median of the per-pair ratios
    /// (what the target is judged on) with their spread.
    pub(crate) floor: Option<String>,
    pub(crate) ratio: Option<f64>,
    pub(crate) ratio_min: Option<f64>,
    pub(crate) ratio_max: Option<f64>,
    /// The target, as text (`>= 0.97 x floor`), and whether it was met.
    pub(crate) target: Option<String>,
    pub(crate) pass: Option<bool>,
}

pub(crate) fn median(v: &[f64]) -> f64 {
    percentile(v, 50.0)
}

/// Nearest-rank percentile of unsorted samples.
pub(crate) fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

impl Figure {
    pub(crate) fn new(name: impl Into<String>, unit: &'static str, samples: Vec<f64>) -> Self {
        let median = median(&samples);
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Self {
            name: name.into(),
            unit,
            samples,
            median,
            min,
            max,
            floor: None,
            ratio: None,
            ratio_min: None,
            ratio_max: None,
            target: None,
            pass: None,
        }
    }

    /// Compare with the floor: `ratios` has one entry per sample, each against the floor
    /// runs right around that sample. The median ratio is judged against `min_ratio`.
    pub(crate) fn against(mut self, floor: &str, ratios: Vec<f64>, min_ratio: Option<f64>) -> Self {
        let ratio = median(&ratios);
        self.floor = Some(floor.to_owned());
        self.ratio = Some(ratio);
        self.ratio_min = ratios.iter().copied().reduce(f64::min);
        self.ratio_max = ratios.iter().copied().reduce(f64::max);
        if let Some(min) = min_ratio {
            self.target = Some(format!(">= {min:.2} x floor"));
            self.pass = Some(ratio >= min);
        }
        self
    }

    /// An absolute target (for figures with no floor).
    pub(crate) fn at_most(mut self, limit: f64) -> Self {
        self.target = Some(format!("<= {limit} {}", self.unit));
        self.pass = Some(self.median <= limit);
        self
    }

    pub(crate) fn at_least(mut self, limit: f64) -> Self {
        self.target = Some(format!(">= {limit} {}", self.unit));
        self.pass = Some(self.median >= limit);
        self
    }
}

fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A Markdown table (also what the terminal shows).
pub(crate) fn table(figures: &[Figure]) -> String {
    let mut out = String::new();
    out.push_str("| figure | median | spread (min-max) | unit | vs floor | ratio (median) | ratio spread | target | met |\n");
    out.push_str("|---|---:|---:|---|---|---:|---:|---|---|\n");
    for f in figures {
        let _ = writeln!(
            out,
            "| {} | {} | {}-{} | {} | {} | {} | {} | {} | {} |",
            f.name,
            fmt_num(f.median),
            fmt_num(f.min),
            fmt_num(f.max),
            f.unit,
            f.floor.as_deref().unwrap_or(""),
            f.ratio.map(|r| format!("{r:.3}")).unwrap_or_default(),
            match (f.ratio_min, f.ratio_max) {
                (Some(a), Some(b)) => format!("{a:.3}-{b:.3}"),
                _ => String::new(),
            },
            f.target.as_deref().unwrap_or(""),
            match f.pass {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            }
        );
    }
    out
}

/// Replace the text between the bench markers in `docs/PERFORMANCE.md`.
pub(crate) fn update_doc(path: &Path, block: &str) -> Result<()> {
    const BEGIN: &str = "<!-- bench:begin -->";
    const END: &str = "<!-- bench:end -->";
    let doc =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let (a, b) = (
        doc.find(BEGIN).context("no bench:begin marker")?,
        doc.find(END).context("no bench:end marker")?,
    );
    let updated = format!("{}{BEGIN}\n{block}{}", &doc[..a], &doc[b..]);
    std::fs::write(path, updated)?;
    Ok(())
}

/// Aggregate tokens/s against concurrency, floor and node, as an SVG line chart.
pub(crate) fn throughput_svg(floor: &[(usize, f64)], node: &[(usize, f64)]) -> String {
    let (w, h, left, right, top, bottom) = (640.0, 400.0, 70.0, 20.0, 40.0, 50.0);
    let max_c = floor.iter().chain(node).map(|p| p.0).max().unwrap_or(1) as f64;
    let max_y = floor
        .iter()
        .chain(node)
        .map(|p| p.1)
        .fold(1.0_f64, f64::max)
        * 1.15;
    let x = |c: f64| left + (c - 1.0) / (max_c - 1.0).max(1.0) * (w - left - right);
    let y = |v: f64| h - bottom - v / max_y * (h - top - bottom);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">Aggregate decode throughput vs concurrency</text>
"##,
        w / 2.0
    );
    // Axes and grid.
    for i in 0..=5 {
        let v = max_y / 5.0 * f64::from(i);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{:.0}</text>"##,
            w - right,
            y(v),
            y(v),
            left - 6.0,
            y(v) + 4.0,
            v
        );
    }
    let mut cs: Vec<usize> = floor.iter().chain(node).map(|p| p.0).collect();
    cs.sort_unstable();
    cs.dedup();
    for c in &cs {
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" text-anchor="middle">{c}</text>"##,
            x(*c as f64),
            h - bottom + 18.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle">concurrent streams (node) / sequences in one batch (floor)</text>
<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">tokens / s</text>"##,
        (left + w - right) / 2.0,
        h - 12.0,
        h / 2.0,
        h / 2.0
    );
    for (points, color, label, ly) in [
        (floor, "#888", "llama.cpp floor", 60.0),
        (node, "#d2691e", "hearth-node", 78.0),
    ] {
        let path: Vec<String> = points
            .iter()
            .map(|(c, v)| format!("{:.1},{:.1}", x(*c as f64), y(*v)))
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline fill="none" stroke="{color}" stroke-width="2.5" points="{}"/>"##,
            path.join(" ")
        );
        for (c, v) in points {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"/>"##,
                x(*c as f64),
                y(*v)
            );
        }
        let _ = writeln!(
            s,
            r##"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2.5"/><text x="{}" y="{}">{label}</text>"##,
            left + 10.0,
            left + 34.0,
            left + 40.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_ratios() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&v), 3.0);
        assert_eq!(percentile(&v, 95.0), 5.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        let node = Figure::new("node", "tok/s", vec![98.0, 110.0, 99.0]).against(
            "floor",
            vec![0.98, 1.0, 1.1],
            Some(0.97),
        );
        assert_eq!(node.ratio, Some(1.0));
        assert_eq!((node.ratio_min, node.ratio_max), (Some(0.98), Some(1.1)));
        assert_eq!(node.pass, Some(true));
        let slow = Figure::new("node", "tok/s", vec![90.0]).against("floor", vec![0.9], Some(0.97));
        assert_eq!(slow.pass, Some(false));
        let t = table(&[node, slow]);
        assert!(t.contains("**no**") && t.contains("| 0.900 |"), "{t}");
    }

    #[test]
    fn svg_has_both_series() {
        let svg = throughput_svg(&[(1, 100.0), (8, 200.0)], &[(1, 98.0), (8, 195.0)]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
    }
}
