//! # hearth-desktop
//!
//! The desktop app: a Tauri 2 window showing the web UI and a tray icon, around a Hearth node
//! that runs in this process on the same tokio runtime. It is the only crate that names
//! `tauri`; it talks to the node only through `hearth_node::Node`'s public handle.
//!
//! ## Layout
//! - `main`: runtime, node start-up in `setup`, window behaviour (single instance, hide on
//!   close, size and position remembered), graceful quit (from the tray, or on SIGTERM or
//!   Ctrl-C).
//! - [`desktop`]: what the window, tray and commands share, and bringing the window to the
//!   front.
//! - [`tray`]: the tray icon (one per state), its tooltip and menu (open, expose to LAN,
//!   pause serving, quit).
//! - [`commands`]: the Tauri commands the UI may call, with typed `{code, message}` errors;
//!   `commands_list.rs` names them for the ACL (build.rs) and the capability test.
//!
//! The node is configured from the same `HEARTH_*` variables as `hearth-node serve`.

mod commands;
mod desktop;
mod tray;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use desktop::{show_main, Desktop};
use hearth_node::Node;
use tauri::{Manager, RunEvent, WindowEvent};

/// How long quitting waits for the node to finish (streams get their final message first).
const QUIT_WAIT: Duration = Duration::from_secs(6);

fn main() -> anyhow::Result<()> {
    // Started by the node to read a document in a process of its own: that, and nothing else.
    if let Some(code) = hearth_node::read_document_if_asked() {
        std::process::exit(code);
    }
    hearth_node::logging::init();
    let config = hearth_node::cli::EnvOnly::read().context("reading HEARTH_* settings")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Tauri's async work (commands, our tasks) runs on the node's runtime.
    tauri::async_runtime::set(runtime.handle().clone());
    let desktop = Arc::new(Desktop::default());

    let setup_desktop = desktop.clone();
    let app = tauri::Builder::default()
        // First: a second launch hands over to the running app and exits here.
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| {
            tracing::info!("a second launch: showing the running app");
            show_main(app);
        }))
        .plugin(
            tauri_plugin_window_state::Builder::new()
                // Not VISIBLE: a window hidden to the tray at quit must come back shown.
                .with_state_flags(
                    tauri_plugin_window_state::StateFlags::SIZE
                        | tauri_plugin_window_state::StateFlags::POSITION
                        | tauri_plugin_window_state::StateFlags::MAXIMIZED,
                )
                .build(),
        )
        .manage(desktop.clone())
        .invoke_handler(tauri::generate_handler![commands::node_url])
        .on_window_event(|window, event| {
            if let WindowEvent::CloseRequested { api, .. } = event {
                let desktop = window.state::<Arc<Desktop>>();
                if window.label() == "main" && desktop.tray_visible.load(Ordering::Acquire) {
                    api.prevent_close();
                    let _ = window.hide();
                } else {
                    // No tray to come back from: closing the window quits.
                    window.app_handle().exit(0);
                }
            }
        })
        .setup(move |app| {
            // The node starts here, after single-instance had its say, so a second launch
            // never races the first for the port.
            let node = tauri::async_runtime::block_on(Node::start(config))
                .context("starting the node")?;
            tracing::info!(url = %node.local_url(), "node started inside the desktop app");
            // SIGTERM (a `kill`, the session ending) and Ctrl-C quit as the tray's Quit does:
            // the node stops gracefully, its MCP servers with it. A second signal does not wait.
            let handle = app.handle().clone();
            tauri::async_runtime::spawn(async move {
                hearth_node::shutdown_signal().await;
                tracing::info!("asked to stop by a signal: quitting");
                handle.exit(0);
                hearth_node::shutdown_signal().await;
                tracing::warn!("asked again: exiting without waiting for the node");
                std::process::exit(1);
            });
            let _ = setup_desktop.node.set(node.clone());
            match tray::install(app.handle(), node) {
                Ok(visible) => {
                    setup_desktop.tray_visible.store(visible, Ordering::Release);
                    if !visible {
                        tracing::warn!("no StatusNotifier host on this desktop: the tray icon is unavailable (its menu is still exported on D-Bus); closing the window quits");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the tray icon is unavailable; closing the window quits"),
            }
            Ok(())
        })
        .build(tauri::generate_context!("../tauri.conf.json"))
        .context("starting the desktop app")?;

    let code = app.run_return(move |handle, event| {
        if let RunEvent::ExitRequested { api, code, .. } = &event {
            // Quit stops the node gracefully first: open streams get a final message and the
            // port closes; then the app exits for real. A request meanwhile waits for that.
            if let Some(node) = desktop.node.get().cloned() {
                if !desktop.quitting.swap(true, Ordering::AcqRel) {
                    api.prevent_exit();
                    let handle = handle.clone();
                    let code = code.unwrap_or(0);
                    let desktop = desktop.clone();
                    tauri::async_runtime::spawn(async move {
                        if tokio::time::timeout(QUIT_WAIT, node.shutdown())
                            .await
                            .is_err()
                        {
                            tracing::warn!("the node did not stop in time");
                        }
                        desktop.stopped.store(true, Ordering::Release);
                        handle.exit(code);
                    });
                } else if !desktop.stopped.load(Ordering::Acquire) {
                    api.prevent_exit();
                }
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    include!("commands_list.rs");

    fn json(path: &Path) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// Every command is allowed by the capability files, and nothing else is.
    #[test]
    fn capabilities_allow_exactly_the_apps_commands() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut granted = BTreeSet::new();
        for entry in std::fs::read_dir(root.join("capabilities")).unwrap() {
            let cap = json(&entry.unwrap().path());
            assert_eq!(cap["windows"], serde_json::json!(["main"]), "{cap}");
            assert!(
                cap.get("remote").is_none(),
                "no remote origin may call commands"
            );
            for p in cap["permissions"].as_array().unwrap() {
                granted.insert(p.as_str().expect("plain permission ids").to_owned());
            }
        }
        let declared: BTreeSet<String> = COMMANDS
            .iter()
            .map(|c| format!("allow-{}", c.replace('_', "-")))
            .collect();
        assert_eq!(granted, declared);
        // The handler list in main() names the same commands.
        let main = std::fs::read_to_string(root.join("src/main.rs")).unwrap();
        let handlers = main
            .split("generate_handler![")
            .nth(1)
            .and_then(|s| s.split(']').next())
            .unwrap();
        let handled: BTreeSet<&str> = handlers
            .split(',')
            .map(|h| h.trim().rsplit("::").next().unwrap())
            .filter(|h| !h.is_empty())
            .collect();
        assert_eq!(handled, COMMANDS.iter().copied().collect::<BTreeSet<_>>());
    }

    /// The config uses only that capability, and the CSP allows no data: or blob: scripts.
    #[test]
    fn config_is_locked_down() {
        let conf = json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tauri.conf.json"));
        let security = &conf["app"]["security"];
        assert_eq!(security["capabilities"], serde_json::json!(["main"]));
        let csp = security["csp"].as_str().unwrap();
        let script_src = csp
            .split(';')
            .map(str::trim)
            .find(|d| d.starts_with("script-src"))
            .or_else(|| {
                csp.split(';')
                    .map(str::trim)
                    .find(|d| d.starts_with("default-src"))
            })
            .unwrap();
        assert!(
            !script_src.contains("data:") && !script_src.contains("blob:"),
            "{script_src}"
        );
        assert!(!script_src.contains("unsafe-eval") && !script_src.contains("unsafe-inline"));
        assert!(csp.contains("object-src 'none'"));
        for plugin in ["shell", "fs"] {
            assert!(conf["plugins"].get(plugin).is_none(), "no {plugin} plugin");
        }
    }
}
