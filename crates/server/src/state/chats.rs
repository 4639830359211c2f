//! What the UI's chat door (`crate::chat`) keeps between requests: the answers streaming right
//! now, one per conversation, so a second message waits and a stop finds its answer. Held
//! here, apart from the door, because [`AppState`](super::AppState) holds it and the door reads
//! `AppState`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hearth_route::Control;

/// Answers streaming right now, by conversation.
#[derive(Debug, Default)]
pub struct Chats {
    running: Mutex<HashMap<String, RunningChat>>,
}

/// One answer streaming (or one turn of a tool loop): its message now, the control that stops
/// its generation, whether a stop was asked, and the token that cancels its MCP calls.
#[derive(Debug, Clone)]
pub(crate) struct RunningChat {
    pub(crate) message_id: String,
    /// `None` between a loop's answers (its calls deciding or running).
    pub(crate) control: Option<Control>,
    pub(crate) stop_requested: Arc<std::sync::atomic::AtomicBool>,
    pub(crate) cancel: tokio_util::sync::CancellationToken,
}

impl Chats {
    pub(crate) fn begin(&self, conversation: &str, chat: RunningChat) -> bool {
        let mut running = self.running.lock().expect("chats lock");
        if running.contains_key(conversation) {
            return false;
        }
        running.insert(conversation.to_owned(), chat);
        true
    }

    /// The loop's next answer in the same conversation: its message and control.
    pub(crate) fn replace(&self, conversation: &str, chat: RunningChat) {
        self.running
            .lock()
            .expect("chats lock")
            .insert(conversation.to_owned(), chat);
    }

    pub(crate) fn end(&self, conversation: &str) {
        self.running
            .lock()
            .expect("chats lock")
            .remove(conversation);
    }

    pub(crate) fn is_running(&self, conversation: &str) -> bool {
        self.running
            .lock()
            .expect("chats lock")
            .contains_key(conversation)
    }

    pub(crate) fn by_message(&self, message_id: &str) -> Option<RunningChat> {
        self.running
            .lock()
            .expect("chats lock")
            .values()
            .find(|c| c.message_id == message_id)
            .cloned()
    }
}
