//! What the window, the tray and the commands share ([`Desktop`]: the node once it runs,
//! whether a tray shows our icon, whether the app is quitting), and bringing the main window to
//! the front.

use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

use hearth_node::Node;
use tauri::Manager;

/// What the window, tray and commands share.
#[derive(Debug, Default)]
pub(crate) struct Desktop {
    pub(crate) node: OnceLock<Node>,
    /// Whether a tray host shows our icon; without one, closing the window quits.
    pub(crate) tray_visible: AtomicBool,
    /// Set when quitting starts stopping the node: a second request to quit meanwhile (the
    /// tray's Quit after a SIGTERM) waits for it.
    pub(crate) quitting: AtomicBool,
    /// Set once the node has stopped: the exit that follows goes through.
    pub(crate) stopped: AtomicBool,
}

/// Bring the main window to the front.
pub(crate) fn show_main(app: &tauri::AppHandle) {
    if let Some(w) = app.get_webview_window("main") {
        let _ = w.show();
        let _ = w.unminimize();
        let _ = w.set_focus();
    }
}
