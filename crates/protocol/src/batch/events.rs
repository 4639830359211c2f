//! Server -> client messages: [`BatchEvent`], one event of one prompt, and the JSON arrays
//! they travel in ([`to_json`]), including the whole-message failure with a null
//! `request_id` ([`message_error`]).

use serde::{Deserialize, Serialize};

/// Server -> client: one event of one prompt. Messages are arrays of these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BatchEvent {
    /// Passed validation; queued for execution.
    Accepted { request_id: String },
    /// Picked up: handed to the engine.
    Started { request_id: String },
    /// Prefilled; generating. `text` is empty with `only_new_tokens`, else the prompt.
    Initialized { request_id: String, text: String },
    /// The text one new token released.
    Progress { request_id: String, text: String },
    /// The summary at the end.
    Complete {
        request_id: String,
        /// Generated text, after the prompt unless `only_new_tokens`.
        text: String,
        /// Generation ended at end-of-sequence (not at `max_new_tokens` or the context's end).
        is_eos: bool,
        new_tokens_count: u32,
        /// Seconds, from submission to the last token.
        execution_time: f64,
    },
    /// The request failed (or, with `request_id: null`, the whole message did).
    Error {
        request_id: Option<String>,
        error: String,
    },
}

impl BatchEvent {
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Self::Accepted { request_id }
            | Self::Started { request_id }
            | Self::Initialized { request_id, .. }
            | Self::Progress { request_id, .. }
            | Self::Complete { request_id, .. } => Some(request_id.as_str()),
            Self::Error { request_id, .. } => request_id.as_deref(),
        }
    }
}

/// One server message: a JSON array of events.
pub fn to_json(events: &[BatchEvent]) -> String {
    // Serializing these types cannot fail: plain structs and strings, finite floats.
    serde_json::to_string(events).unwrap_or_else(|e| message_error_json(&e.to_string()))
}

/// A whole-message failure: `[{"type":"ERROR","request_id":null,"error":"..."}]`, which
/// carries both the reference's `error` key and this protocol's event shape.
pub fn message_error(message: &str) -> String {
    to_json(&[BatchEvent::Error {
        request_id: None,
        error: message.to_owned(),
    }])
}

fn message_error_json(message: &str) -> String {
    serde_json::json!([{"type": "ERROR", "request_id": null, "error": message}]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn events_match_the_documents_shapes() {
        let events = vec![
            BatchEvent::Accepted {
                request_id: "2835f3c5".into(),
            },
            BatchEvent::Started {
                request_id: "2835f3c5".into(),
            },
            BatchEvent::Initialized {
                request_id: "2835f3c5".into(),
                text: "[INST] Lorem Impsum...".into(),
            },
            BatchEvent::Progress {
                request_id: "2835f3c5".into(),
                text: "The".into(),
            },
            BatchEvent::Complete {
                request_id: "2835f3c5".into(),
                text: "In the land of cats...".into(),
                is_eos: false,
                new_tokens_count: 100,
                execution_time: 1.711,
            },
            BatchEvent::Error {
                request_id: Some("9099dc5e".into()),
                error: "boom".into(),
            },
        ];
        let v: Value = serde_json::from_str(&to_json(&events)).unwrap();
        assert_eq!(
            v,
            json!([
                {"request_id": "2835f3c5", "type": "ACCEPTED"},
                {"request_id": "2835f3c5", "type": "STARTED"},
                {"request_id": "2835f3c5", "type": "INITIALIZED", "text": "[INST] Lorem Impsum..."},
                {"request_id": "2835f3c5", "type": "PROGRESS", "text": "The"},
                {"request_id": "2835f3c5", "type": "COMPLETE", "text": "In the land of cats...",
                    "is_eos": false, "new_tokens_count": 100, "execution_time": 1.711},
                {"request_id": "9099dc5e", "type": "ERROR", "error": "boom"}
            ])
        );
        let back: Vec<BatchEvent> = serde_json::from_value(v).unwrap();
        assert_eq!(back, events);
        assert_eq!(events[5].request_id(), Some("9099dc5e"));
    }

    #[test]
    fn whole_message_error_has_type_and_null_id() {
        let v: Value = serde_json::from_str(&message_error("Invalid JSON received")).unwrap();
        assert_eq!(
            v,
            json!([{"type": "ERROR", "request_id": null, "error": "Invalid JSON received"}])
        );
        let v: Value = serde_json::from_str(&message_error_json("x\"y")).unwrap();
        assert_eq!(v[0]["error"], "x\"y");
    }
}
