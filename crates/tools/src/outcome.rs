//! What a tool call gave back, folded for a chat: text, images (kept whole for a model that
//! sees), resources as links, the server's `isError` flag; capped at [`MAX_OUTCOME_BYTES`] with
//! a note to the model saying how much was cut. Pure: no I/O.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde::{Deserialize, Serialize};

/// The most a folded result may hold (issue 51: "1 MiB a result"), counted as the bytes of its
/// text, image data (base64) and link fields.
pub const MAX_OUTCOME_BYTES: usize = 1 << 20;

/// Room kept under the cap for the note that says what was cut.
const NOTE_ROOM: usize = 256;

/// One part of a folded result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum McpContent {
    Text {
        text: String,
    },
    /// `data` is base64, as MCP carries it.
    Image {
        mime_type: String,
        data: String,
    },
    /// A resource link, or an embedded resource (its contents are not kept: a link is what the
    /// chat shows and what the model is told).
    Link {
        uri: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

impl McpContent {
    fn size(&self) -> usize {
        match self {
            McpContent::Text { text } => text.len(),
            McpContent::Image { mime_type, data } => mime_type.len() + data.len(),
            McpContent::Link {
                uri,
                name,
                mime_type,
            } => uri.len() + name.len() + mime_type.as_ref().map_or(0, String::len),
        }
    }
}

/// A tool call's result, folded and capped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolOutcome {
    pub parts: Vec<McpContent>,
    /// The server said the tool failed (MCP's `isError`); the parts say how.
    pub is_error: bool,
    /// Bytes left out by the cap (0 when nothing was cut); the last part is then a note.
    pub cut_bytes: usize,
}

impl McpToolOutcome {
    /// Folds a `tools/call` result, then caps it.
    pub(crate) fn from_result(result: CallToolResult) -> Self {
        let mut parts: Vec<McpContent> = result.content.into_iter().filter_map(fold).collect();
        // A tool that answers only with structured content still tells the model something.
        if parts.is_empty() {
            if let Some(value) = result.structured_content {
                parts.push(McpContent::Text {
                    text: value.to_string(),
                });
            }
        }
        Self::capped(parts, result.is_error.unwrap_or(false), MAX_OUTCOME_BYTES)
    }

    /// Keeps parts in order until `limit` bytes; a text that does not fit is cut at a character
    /// boundary, an image or link that does not fit is left out whole; then a note says how much.
    pub fn capped(parts: Vec<McpContent>, is_error: bool, limit: usize) -> Self {
        let total: usize = parts.iter().map(McpContent::size).sum();
        if total <= limit {
            return Self {
                parts,
                is_error,
                cut_bytes: 0,
            };
        }
        let mut budget = limit.saturating_sub(NOTE_ROOM);
        let mut kept = Vec::with_capacity(parts.len() + 1);
        for part in parts {
            let size = part.size();
            if size <= budget {
                budget -= size;
                kept.push(part);
            } else if let McpContent::Text { text } = part {
                let mut end = budget.min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                if end > 0 {
                    kept.push(McpContent::Text {
                        text: text[..end].to_owned(),
                    });
                }
                budget -= end;
            }
        }
        let kept_bytes: usize = kept.iter().map(McpContent::size).sum();
        let cut_bytes = total - kept_bytes;
        kept.push(McpContent::Text {
            text: format!(
                "[Hearth cut this tool result: {cut_bytes} of its {total} bytes were left out \
                 (the limit is {limit} bytes).]"
            ),
        });
        Self {
            parts: kept,
            is_error,
            cut_bytes,
        }
    }

    /// The result as one text for a model that reads only text: texts in order, an image as a
    /// line naming its type, a link as `name <uri>`.
    pub fn text_for_model(&self) -> String {
        let lines: Vec<String> = self
            .parts
            .iter()
            .map(|part| match part {
                McpContent::Text { text } => text.clone(),
                McpContent::Image { mime_type, .. } => format!("[image: {mime_type}]"),
                McpContent::Link { uri, name, .. } => format!("{name} <{uri}>"),
            })
            .collect();
        lines.join("\n")
    }

    /// The total size of the kept parts, in the cap's bytes.
    pub fn size(&self) -> usize {
        self.parts.iter().map(McpContent::size).sum()
    }
}

fn fold(block: ContentBlock) -> Option<McpContent> {
    Some(match block {
        ContentBlock::Text(t) => McpContent::Text { text: t.text },
        ContentBlock::Image(i) => McpContent::Image {
            mime_type: i.mime_type,
            data: i.data,
        },
        ContentBlock::Audio(a) => McpContent::Text {
            text: format!("[audio: {}, not kept]", a.mime_type),
        },
        ContentBlock::ResourceLink(r) => McpContent::Link {
            name: r.title.unwrap_or(r.name),
            uri: r.uri,
            mime_type: r.mime_type,
        },
        ContentBlock::Resource(e) => {
            let (uri, mime_type) = match e.resource {
                ResourceContents::TextResourceContents { uri, mime_type, .. }
                | ResourceContents::BlobResourceContents { uri, mime_type, .. } => (uri, mime_type),
                _ => return None,
            };
            let name = uri.rsplit('/').next().unwrap_or(&uri).to_owned();
            McpContent::Link {
                uri,
                name,
                mime_type,
            }
        }
        // rmcp's enum is non-exhaustive: a content kind of a later MCP is skipped, not fatal.
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> McpContent {
        McpContent::Text { text: s.into() }
    }

    #[test]
    fn a_result_under_the_cap_is_kept_whole() {
        let outcome = McpToolOutcome::capped(vec![text("hello")], true, 1000);
        assert_eq!(outcome.parts, vec![text("hello")]);
        assert!(outcome.is_error);
        assert_eq!(outcome.cut_bytes, 0);
    }

    #[test]
    fn a_long_text_is_cut_on_a_character_boundary_with_a_note() {
        let long = "é".repeat(1000); // 2000 bytes
        let outcome = McpToolOutcome::capped(vec![text(&long)], false, 1000);
        let McpContent::Text { text: kept } = &outcome.parts[0] else {
            panic!("{outcome:?}")
        };
        assert!(kept.len() <= 1000 - NOTE_ROOM && kept.chars().all(|c| c == 'é'));
        assert_eq!(outcome.cut_bytes, 2000 - kept.len());
        let McpContent::Text { text: note } = outcome.parts.last().unwrap() else {
            panic!()
        };
        assert!(
            note.contains(&format!("{} of its 2000 bytes", outcome.cut_bytes)),
            "{note}"
        );
        assert!(outcome.size() <= 1000, "{}", outcome.size());
    }

    #[test]
    fn an_image_that_does_not_fit_is_left_out_whole() {
        let image = McpContent::Image {
            mime_type: "image/png".into(),
            data: "A".repeat(5000),
        };
        let outcome =
            McpToolOutcome::capped(vec![text("before"), image, text("after")], false, 1000);
        assert_eq!(outcome.parts[..2], [text("before"), text("after")]);
        assert_eq!(outcome.cut_bytes, 5009);
    }

    #[test]
    fn folding_keeps_images_and_turns_resources_into_links() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "data": "iVBO", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "test://static/resource/1", "name": "Resource 1", "mimeType": "text/plain"},
                {"type": "resource", "resource": {"uri": "file:///tmp/a.txt", "text": "body"}}
            ],
            "isError": false
        }))
        .unwrap();
        let outcome = McpToolOutcome::from_result(result);
        assert_eq!(
            outcome.parts,
            vec![
                text("hi"),
                McpContent::Image {
                    mime_type: "image/png".into(),
                    data: "iVBO".into()
                },
                McpContent::Link {
                    uri: "test://static/resource/1".into(),
                    name: "Resource 1".into(),
                    mime_type: Some("text/plain".into())
                },
                McpContent::Link {
                    uri: "file:///tmp/a.txt".into(),
                    name: "a.txt".into(),
                    mime_type: None
                },
            ]
        );
        assert_eq!(
            outcome.text_for_model(),
            "hi\n[image: image/png]\nResource 1 <test://static/resource/1>\na.txt <file:///tmp/a.txt>"
        );
    }

    #[test]
    fn structured_content_alone_becomes_text() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [], "structuredContent": {"sum": 3}
        }))
        .unwrap();
        assert_eq!(
            McpToolOutcome::from_result(result).parts,
            vec![text("{\"sum\":3}")]
        );
    }
}
