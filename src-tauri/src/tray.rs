//! The tray icon: one icon per state (idle, generating, throttled or hot, error), a tooltip
//! with the model and where it computes (the GPU and its layers there, or the CPU), peers,
//! thermal level and tokens/s, and a menu — Open Hearth, Expose to LAN,
//! Pause serving, Quit. A task follows the node's telemetry and model state and updates the
//! icon and tooltip when they change. Which state and text to show is decided by pure
//! functions, tested below.

use hearth_node::telemetry::{Telemetry, ThermalLevel, ThermalSource};
use hearth_node::ModelState;
use hearth_node::Node;
use tauri::image::Image;
use tauri::menu::{CheckMenuItem, Menu, MenuItem, PredefinedMenuItem};
use tauri::tray::{TrayIcon, TrayIconBuilder};
use tauri::AppHandle;

const ICON_IDLE: &[u8] = include_bytes!("../../icons/tray-idle.png");
const ICON_GENERATING: &[u8] = include_bytes!("../../icons/tray-generating.png");
const ICON_HOT: &[u8] = include_bytes!("../../icons/tray-hot.png");
const ICON_ERROR: &[u8] = include_bytes!("../../icons/tray-error.png");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TrayState {
    Idle,
    Generating,
    /// Paused, throttled, or running hot.
    Hot,
    /// The model failed to load, or none is loaded.
    Error,
}

impl TrayState {
    fn icon(self) -> &'static [u8] {
        match self {
            Self::Idle => ICON_IDLE,
            Self::Generating => ICON_GENERATING,
            Self::Hot => ICON_HOT,
            Self::Error => ICON_ERROR,
        }
    }
}

pub(crate) fn state_of(t: &Telemetry, model: &ModelState) -> TrayState {
    match model {
        ModelState::Failed { .. } | ModelState::Unloaded | ModelState::Stopped => TrayState::Error,
        _ if t.paused
            || t.throttle < 100
            || matches!(
                t.thermal.level,
                ThermalLevel::Serious | ThermalLevel::Critical
            ) =>
        {
            TrayState::Hot
        }
        _ if t.active > 0 => TrayState::Generating,
        _ => TrayState::Idle,
    }
}

pub(crate) fn tooltip(t: &Telemetry, model: &ModelState, exposed: bool, peers: usize) -> String {
    let model = match model {
        ModelState::Ready(info) => format!("{} on {}", info.id, placement(&info.placement)),
        ModelState::Loading {
            model, progress, ..
        } => format!("{model} (loading {:.0}%)", progress * 100.0),
        ModelState::Failed { model, .. } => format!("{model} (failed to load)"),
        ModelState::Unloaded | ModelState::Stopped => "no model loaded".to_owned(),
    };
    let level = match t.thermal.level {
        ThermalLevel::Nominal => "nominal",
        ThermalLevel::Fair => "fair",
        ThermalLevel::Serious => "serious",
        ThermalLevel::Critical => "critical",
    };
    let estimated = if t.thermal.source == ThermalSource::Estimated {
        " (estimated)"
    } else {
        ""
    };
    let mut s = format!(
        "Hearth · {model} · peers: {peers} · thermal {level}{estimated} · {:.0} tok/s",
        t.tokens_per_s
    );
    if t.paused {
        s.push_str(" · paused");
    }
    if exposed {
        s.push_str(" · shared on the LAN");
    }
    s
}

/// Where a model computes, in the tray's few words: `GPU 31/31 (Vulkan0, 96 MiB)` or `CPU`.
fn placement(p: &hearth_node::Placement) -> String {
    if p.layers == 0 {
        return "CPU".into();
    }
    let mut at = p.devices.join(", ");
    if p.vram_bytes > 0 {
        at.push_str(&format!(", {} MiB", p.vram_bytes >> 20));
    }
    let kind = if p.backend == "RPC" { "split" } else { "GPU" };
    format!("{kind} {}/{} ({at})", p.layers, p.layers_total)
}

/// Build the tray and start following the node. Returns whether a tray host (a
/// StatusNotifierWatcher) is there to show it.
pub(crate) fn install(app: &AppHandle, node: Node) -> Result<bool, Box<dyn std::error::Error>> {
    let open = MenuItem::with_id(app, "open", "Open Hearth", true, None::<&str>)?;
    let lan = CheckMenuItem::with_id(
        app,
        "lan",
        "Expose to LAN",
        true,
        node.is_exposed(),
        None::<&str>,
    )?;
    let pause = CheckMenuItem::with_id(
        app,
        "pause",
        "Pause serving",
        true,
        node.host().is_paused(),
        None::<&str>,
    )?;
    let quit = MenuItem::with_id(app, "quit", "Quit", true, None::<&str>)?;
    // The status line, greyed out: Linux trays show no tooltip, so the menu carries it too.
    let status = MenuItem::with_id(app, "status", "Hearth · starting", false, None::<&str>)?;
    let menu = Menu::with_items(
        app,
        &[
            &status,
            &PredefinedMenuItem::separator(app)?,
            &open,
            &PredefinedMenuItem::separator(app)?,
            &lan,
            &pause,
            &PredefinedMenuItem::separator(app)?,
            &quit,
        ],
    )?;
    let menu_node = node.clone();
    let (lan_item, pause_item) = (lan.clone(), pause.clone());
    // The appindicator library is loaded when the first tray is built; it panics when it is
    // missing. The app must run on without a tray, so that panic is caught here.
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        TrayIconBuilder::with_id("main")
            .icon(Image::from_bytes(ICON_IDLE)?)
            .tooltip("Hearth")
            .menu(&menu)
            .show_menu_on_left_click(true)
            .on_menu_event(move |app, event| match event.id().as_ref() {
                "open" => crate::desktop::show_main(app),
                "lan" => {
                    // GTK has already toggled the check mark: follow it.
                    let want = lan_item.is_checked().unwrap_or(false);
                    let node = menu_node.clone();
                    let item = lan_item.clone();
                    tauri::async_runtime::spawn(async move {
                        match node.set_exposed(want).await {
                            Ok(addr) => tracing::info!(%addr, exposed = want, "LAN sharing switched from the tray"),
                            Err(e) => {
                                tracing::error!(error = %e, "switching LAN sharing failed");
                                let _ = item.set_checked(node.is_exposed());
                            }
                        }
                    });
                }
                "pause" => {
                    let paused = pause_item.is_checked().unwrap_or(false);
                    menu_node.host().set_paused(paused);
                    tracing::info!(paused, "serving paused from the tray");
                }
                "quit" => app.exit(0),
                _ => {}
            })
            .build(app)
    }));
    let tray = match built {
        Ok(result) => result?,
        Err(_) => {
            return Err(
                "the system tray library (libayatana-appindicator3) is not installed".into(),
            )
        }
    };
    follow(tray, status, node);
    Ok(tray_host_present())
}

/// Whether a StatusNotifier host will show the icon (a desktop panel or shell extension).
fn tray_host_present() -> bool {
    let probe = || -> zbus::Result<bool> {
        let conn = zbus::blocking::Connection::session()?;
        let reply = conn.call_method(
            Some("org.freedesktop.DBus"),
            "/org/freedesktop/DBus",
            Some("org.freedesktop.DBus"),
            "NameHasOwner",
            &("org.kde.StatusNotifierWatcher",),
        )?;
        reply.body().deserialize::<bool>()
    };
    probe().unwrap_or(false)
}

/// Keep the icon, the tooltip and the menu's status line in step with the node.
fn follow(tray: TrayIcon, status: MenuItem<tauri::Wry>, node: Node) {
    tauri::async_runtime::spawn(async move {
        let mut telemetry = node.telemetry();
        let mut model = node.host().state();
        let mut shown: Option<TrayState> = None;
        let mut shown_tip = String::new();
        loop {
            let t = telemetry.borrow_and_update().clone();
            let m = model.borrow_and_update().clone();
            let state = state_of(&t, &m);
            if shown != Some(state) {
                match Image::from_bytes(state.icon()) {
                    Ok(img) => {
                        if let Err(e) = tray.set_icon(Some(img)) {
                            tracing::debug!(error = %e, "tray icon not updated");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "tray icon image is broken"),
                }
                shown = Some(state);
            }
            let tip = tooltip(&t, &m, node.is_exposed(), node.cluster_peer_count());
            if tip != shown_tip {
                let _ = tray.set_tooltip(Some(&tip));
                let _ = status.set_text(&tip);
                shown_tip = tip;
            }
            tokio::select! {
                r = telemetry.changed() => if r.is_err() { return },
                r = model.changed() => if r.is_err() { return },
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_node::telemetry::{Memory, Thermal};
    use hearth_protocol::ModelId;

    fn telemetry(active: usize, throttle: u8, level: ThermalLevel, paused: bool) -> Telemetry {
        Telemetry {
            time: 0,
            cpu_percent: 10.0,
            memory: Memory {
                used_bytes: 1,
                total_bytes: 2,
            },
            thermal: Thermal {
                level,
                source: ThermalSource::Estimated,
                value: 3.0,
            },
            throttle,
            paused,
            slots: 4,
            active,
            queued: 0,
            tokens_per_s: 87.4,
        }
    }

    fn loading() -> ModelState {
        ModelState::Loading {
            model: ModelId("m".into()),
            progress: 0.5,
            elapsed: std::time::Duration::ZERO,
        }
    }

    #[test]
    fn one_state_per_situation() {
        let n = ThermalLevel::Nominal;
        assert_eq!(
            state_of(&telemetry(0, 100, n, false), &loading()),
            TrayState::Idle
        );
        assert_eq!(
            state_of(&telemetry(2, 100, n, false), &loading()),
            TrayState::Generating
        );
        assert_eq!(
            state_of(&telemetry(2, 75, n, false), &loading()),
            TrayState::Hot
        );
        assert_eq!(
            state_of(&telemetry(0, 0, n, true), &loading()),
            TrayState::Hot
        );
        assert_eq!(
            state_of(&telemetry(0, 100, ThermalLevel::Serious, false), &loading()),
            TrayState::Hot
        );
        assert_eq!(
            state_of(&telemetry(0, 100, n, false), &ModelState::Unloaded),
            TrayState::Error
        );
        let failed = ModelState::Failed {
            model: ModelId("m".into()),
            message: "bad file".into(),
        };
        assert_eq!(
            state_of(&telemetry(1, 100, n, false), &failed),
            TrayState::Error
        );
        let icons: std::collections::HashSet<&[u8]> = [
            TrayState::Idle,
            TrayState::Generating,
            TrayState::Hot,
            TrayState::Error,
        ]
        .iter()
        .map(|s| s.icon())
        .collect();
        assert_eq!(icons.len(), 4, "each state has its own icon");
    }

    #[test]
    fn the_model_s_place_is_said_in_few_words() {
        let on = |backend: &str, layers, vram| hearth_node::Placement {
            backend: backend.into(),
            devices: vec!["Vulkan0".into()],
            layers,
            layers_total: 31,
            vram_bytes: vram,
            ..hearth_node::Placement::default()
        };
        assert_eq!(
            placement(&on("Vulkan", 31, 96 << 20)),
            "GPU 31/31 (Vulkan0, 96 MiB)"
        );
        assert_eq!(placement(&on("Vulkan", 12, 0)), "GPU 12/31 (Vulkan0)");
        assert_eq!(placement(&hearth_node::Placement::cpu(31, None)), "CPU");
    }

    #[test]
    fn tooltip_says_model_peers_thermal_and_speed() {
        let tip = tooltip(
            &telemetry(1, 100, ThermalLevel::Fair, true),
            &loading(),
            true,
            2,
        );
        assert_eq!(
            tip,
            "Hearth · m (loading 50%) · peers: 2 · thermal fair (estimated) · 87 tok/s · paused · shared on the LAN"
        );
    }
}
