//! The Tauri commands the web UI may call. Each is a thin adapter over the node's handle and
//! fails with a typed `{code, message}` the UI can act on. The ACL allows exactly the names in
//! `commands_list.rs`.

use std::sync::Arc;

use serde::Serialize;

use crate::desktop::Desktop;

/// An error the UI can act on: a stable SCREAMING_SNAKE code and a sentence for people.
#[derive(Debug, Serialize, thiserror::Error)]
#[error("{message}")]
pub(crate) struct CommandError {
    code: &'static str,
    message: String,
}

/// Where the node's HTTP API listens, for this machine's own UI (loopback, even when the node
/// is shared on the LAN).
#[tauri::command]
pub(crate) fn node_url(desktop: tauri::State<'_, Arc<Desktop>>) -> Result<String, CommandError> {
    desktop
        .node
        .get()
        .map(|n| n.local_url())
        .ok_or_else(|| CommandError {
            code: "NODE_NOT_STARTED",
            message: "the node has not started yet".into(),
        })
}
