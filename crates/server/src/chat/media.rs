//! What the UI's chat door does with the images and audio clips of a message: read and checked
//! as every door checks them before anything of the turn is kept, refused for a model that
//! cannot see or hear them, and each turn's newest sent to the model with the history, with a
//! note in the place of each one left out.

use std::collections::HashMap;

use axum::http::StatusCode;
use hearth_engine::{ModelInfo, PromptError};
use hearth_protocol::audio::{Audio, AudioError, MAX_AUDIO_BYTES, MAX_CLIPS};
use hearth_protocol::media::{
    as_text, check_count, Image, ImageError, MAX_IMAGES, MAX_IMAGE_BYTES,
};
use hearth_protocol::ChatMessage;
use hearth_store::{Message, NewAudio, NewImage};

use crate::api::ApiFailure;

/// The most bytes of image files one turn sends with its history: with the history's text,
/// in base64, it stays within an HTTP body and a cluster frame, so it can go to a peer.
pub(super) const TURN_IMAGE_BYTES: u64 = MAX_IMAGE_BYTES as u64;
/// The most bytes of audio files one message carries, and one turn sends: clips are heard on
/// this node only, so only its memory bounds them; a message stays within an HTTP body.
pub(super) const TURN_AUDIO_BYTES: u64 = MAX_AUDIO_BYTES as u64;

/// The files of a new message, read and checked.
#[derive(Debug, Default)]
pub(super) struct Attached {
    pub(super) images: Vec<NewImage>,
    pub(super) audio: Vec<NewAudio>,
}

impl Attached {
    /// Read the body's `images` and `audio` (data URIs or bare base64) as every door reads
    /// them; each message's within [`TURN_IMAGE_BYTES`] and [`TURN_AUDIO_BYTES`].
    pub(super) fn read(images: &[String], audio: &[String]) -> Result<Self, ApiFailure> {
        Ok(Self {
            images: read_images(images)?,
            audio: read_audio(audio)?,
        })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.images.is_empty() && self.audio.is_empty()
    }
}

/// What the model answering takes in: images where some place serving it sees them (the
/// route sends them there), audio only on this node's own copy (clips go nowhere else).
#[derive(Debug, Clone, Copy)]
pub(super) struct Takes {
    pub(super) images: bool,
    pub(super) audio: bool,
}

impl Takes {
    /// `local`: this node's model, when it is the one asked for; `sees`: whether some place
    /// serving the model sees images (`Router::sees_images`).
    pub(super) fn of(local: Option<&ModelInfo>, sees: bool) -> Self {
        Self {
            images: sees,
            audio: local.is_some_and(|i| i.audio),
        }
    }
}

/// Files go with a new message, to a model that takes them (`local`: this node's model, when
/// it is the one asked for; `takes`: what some place serving it takes).
pub(super) fn check(
    attached: &Attached,
    new_message: bool,
    local: Option<&ModelInfo>,
    takes: Takes,
    model: &hearth_protocol::ModelId,
) -> Result<(), ApiFailure> {
    if attached.is_empty() {
        return Ok(());
    }
    if !new_message {
        return Err(ApiFailure::bad_request(
            "images and audio go with a new message: {\"content\", \"images\", \"audio\"}",
        ));
    }
    let refused = |code: &'static str, e: PromptError| {
        Err(ApiFailure::new(
            StatusCode::BAD_REQUEST,
            code,
            e.to_string(),
        ))
    };
    if !attached.images.is_empty() && !takes.images {
        return refused(
            "no_vision",
            PromptError::NoVision {
                model: model.clone(),
                why: local.and_then(|i| i.projector_refused.clone()),
            },
        );
    }
    if !attached.audio.is_empty() {
        match local {
            None => {
                return Err(ApiFailure::new(
                    StatusCode::BAD_REQUEST,
                    "no_audio",
                    format!("the model {model} is not loaded on this node, and audio is heard only on the node it is sent to"),
                ))
            }
            Some(info) if !info.audio => {
                return refused(
                    "no_audio",
                    PromptError::NoAudio {
                        model: info.id.clone(),
                        why: info.projector_refused.clone(),
                    },
                )
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The images of a new message, read and checked as every door checks them.
fn read_images(images: &[String]) -> Result<Vec<NewImage>, ApiFailure> {
    check_count(images.len()).map_err(|e| ApiFailure::bad_request(format!("images: {e}")))?;
    let read = |text: &String| -> Result<NewImage, ImageError> {
        let image = Image::from_base64(text)?;
        let (width, height) = image.probe()?;
        Ok(NewImage {
            mime: image.media_type()?.to_owned(),
            width,
            height,
            bytes: image.0,
        })
    };
    let read = images
        .iter()
        .enumerate()
        .map(|(i, text)| {
            read(text).map_err(|e| ApiFailure::bad_request(format!("images[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bytes: usize = read.iter().map(|i| i.bytes.len()).sum();
    if bytes as u64 > TURN_IMAGE_BYTES {
        return Err(ApiFailure::bad_request(format!(
            "images: {bytes} bytes together; a message's images may have {} MiB together",
            TURN_IMAGE_BYTES >> 20
        )));
    }
    Ok(read)
}

/// The clips of a new message: WAV or MP3 by their first bytes, as the OpenAI door reads
/// them (their samples are decoded where the model runs).
fn read_audio(clips: &[String]) -> Result<Vec<NewAudio>, ApiFailure> {
    hearth_protocol::audio::check_count(clips.len())
        .map_err(|e| ApiFailure::bad_request(format!("audio: {e}")))?;
    let read = |text: &String| -> Result<NewAudio, AudioError> {
        // A data URI's payload; its stated type is not trusted, the bytes say the format.
        let payload = match text.strip_prefix("data:") {
            Some(rest) => rest
                .split_once(";base64,")
                .map(|(_, b64)| b64)
                .ok_or_else(|| AudioError::Base64("a data URI without ;base64,".into()))?,
            None => text,
        };
        let clip = Audio::from_base64(payload)?;
        Ok(NewAudio {
            format: clip.probe()?.name().to_owned(),
            bytes: clip.0,
        })
    };
    let read = clips
        .iter()
        .enumerate()
        .map(|(i, text)| {
            read(text).map_err(|e| ApiFailure::bad_request(format!("audio[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bytes: usize = read.iter().map(|c| c.bytes.len()).sum();
    if bytes as u64 > TURN_AUDIO_BYTES {
        return Err(ApiFailure::bad_request(format!(
            "audio: {bytes} bytes together; a message's clips may have {} MiB together",
            TURN_AUDIO_BYTES >> 20
        )));
    }
    Ok(read)
}

/// The files a turn sends, by message id: the conversation's newest images and clips (only
/// those the model takes are read).
#[derive(Debug, Default)]
pub(super) struct TurnFiles {
    pub(super) images: HashMap<String, Vec<Vec<u8>>>,
    pub(super) audio: HashMap<String, Vec<Vec<u8>>>,
}

/// The conversation as the model reads it this turn: the system prompt, then every message
/// but empty failed answers, user messages with the images and clips of theirs in `files` (the
/// newest of the conversation, [`MAX_IMAGES`] and [`TURN_IMAGE_BYTES`], [`MAX_CLIPS`] and
/// [`TURN_AUDIO_BYTES`] at most). Each file left out, and every one the model cannot take,
/// leaves a note in its message's place instead, so the model knows something was there.
pub(super) fn turn_prompt(
    system_prompt: &str,
    history: &[Message],
    mut files: TurnFiles,
    takes: Takes,
) -> Vec<ChatMessage> {
    let mut prompt = Vec::with_capacity(history.len() + 1);
    // The room a turn has for pictures of tool results: only the newest answer's, beside the
    // user's images the turn sends.
    let user_images: usize = files.images.values().map(Vec::len).sum();
    let newest = history.iter().rposition(|m| m.role == "assistant");
    if !system_prompt.trim().is_empty() {
        prompt.push(ChatMessage::new("system", system_prompt.to_owned()));
    }
    for (i, m) in history.iter().enumerate() {
        // Failed answers with nothing in them are not part of the conversation (an answer that
        // only called tools is).
        if m.role == "assistant" && m.content.is_empty() && m.tool_calls.is_none() {
            continue;
        }
        // The chat page's images stand before the words, which hold no places of their own.
        let mut message = ChatMessage::new(m.role.clone(), as_text(&m.content));
        let sent = files.images.remove(&m.id).unwrap_or_default();
        message.images = sent.into_iter().map(Image).collect();
        let sent = files.audio.remove(&m.id).unwrap_or_default();
        message.audio = sent.into_iter().map(Audio).collect();
        let mut notes = Vec::new();
        let left = m.images.len().saturating_sub(message.images.len());
        if left > 0 {
            let why = if takes.images {
                format!(
                    "a turn carries the newest {MAX_IMAGES} images, {} MiB together, at most",
                    TURN_IMAGE_BYTES >> 20
                )
            } else {
                "this model cannot see images".to_owned()
            };
            notes.push(format!("[{left} image(s) attached here, not shown: {why}]"));
        }
        let left = m.audio.len().saturating_sub(message.audio.len());
        if left > 0 {
            let why = if takes.audio {
                format!(
                    "a turn carries the newest {MAX_CLIPS} clips, {} MiB together, at most",
                    TURN_AUDIO_BYTES >> 20
                )
            } else {
                "this model cannot hear audio here".to_owned()
            };
            notes.push(format!(
                "[{left} audio clip(s) attached here, not heard: {why}]"
            ));
        }
        if !notes.is_empty() {
            message.content = format!("{}\n{}", notes.join("\n"), message.content);
        }
        let mut room = if takes.images && newest == Some(i) {
            MAX_IMAGES.saturating_sub(user_images)
        } else {
            0
        };
        prompt.extend(super::tool_loop::expand(m, message, &mut room));
    }
    prompt
}

/// The files a turn sends with its history: the conversation's newest images and clips (through
/// message `through`, for an edit), none of a kind the model does not take.
pub(super) async fn turn_files(
    state: &crate::state::AppState,
    conversation_id: &str,
    through: Option<String>,
    takes: Takes,
) -> Result<TurnFiles, hearth_store::StoreError> {
    let mut files = TurnFiles::default();
    if takes.images {
        files.images = state
            .store
            .newest_image_files(
                conversation_id.to_owned(),
                through.clone(),
                MAX_IMAGES,
                TURN_IMAGE_BYTES,
            )
            .await?;
    }
    if takes.audio {
        files.audio = state
            .store
            .newest_audio_files(
                conversation_id.to_owned(),
                through,
                MAX_CLIPS,
                TURN_AUDIO_BYTES,
            )
            .await?;
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_store::MessageStatus;
    use serde_json::Value;

    fn message(id: &str, role: &str, content: &str) -> Message {
        Message {
            id: id.into(),
            conversation_id: "c".into(),
            role: role.into(),
            content: content.into(),
            status: MessageStatus::Complete,
            model: None,
            node: None,
            error: None,
            stats: None,
            created_at: 0,
            images: Vec::new(),
            audio: Vec::new(),
            tool_calls: None,
            sources: None,
            seq: 0,
        }
    }

    /// `m` with `n` images listed.
    fn with_images(mut m: Message, n: usize) -> Message {
        m.images = (0..n)
            .map(|i| hearth_store::ImageInfo {
                id: format!("i{i}"),
                mime: "image/png".into(),
                width: 1,
                height: 1,
                size: 1,
            })
            .collect();
        m
    }

    /// `m` with `n` clips listed.
    fn with_audio(mut m: Message, n: usize) -> Message {
        m.audio = (0..n)
            .map(|i| hearth_store::AudioInfo {
                id: format!("a{i}"),
                format: "wav".into(),
                size: 1,
            })
            .collect();
        m
    }

    const SEES: Takes = Takes {
        images: true,
        audio: true,
    };

    #[test]
    fn a_turn_carries_the_images_it_was_given_and_says_where_the_others_were() {
        let history = [
            with_images(message("u1", "user", "first"), 3),
            message("a1", "assistant", "seen"),
            message("a2", "assistant", ""),
            with_images(message("u2", "user", "second"), 2),
        ];
        // The store gave the newest: the last of u1's, both of u2's.
        let files = TurnFiles {
            images: [
                ("u1".to_owned(), vec![vec![2u8]]),
                ("u2".to_owned(), vec![vec![3u8], vec![4u8]]),
            ]
            .into(),
            audio: HashMap::new(),
        };
        let prompt = turn_prompt("be brief", &history, files, SEES);
        let roles: Vec<&str> = prompt.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(prompt[1].images, vec![Image(vec![2])]);
        assert_eq!(
            prompt[1].content,
            "[2 image(s) attached here, not shown: a turn carries the newest 16 images, 8 MiB together, at most]\nfirst"
        );
        assert_eq!(prompt[3].images, vec![Image(vec![3]), Image(vec![4])]);
        assert_eq!(prompt[3].content, "second");

        // A model that cannot see gets every image as a note, and the words.
        let blind = Takes {
            images: false,
            audio: true,
        };
        let blind = turn_prompt("", &history, TurnFiles::default(), blind);
        assert_eq!(blind.len(), 3);
        assert!(blind[0].images.is_empty());
        assert_eq!(
            blind[0].content,
            "[3 image(s) attached here, not shown: this model cannot see images]\nfirst"
        );
    }

    /// A 1x1 PNG, base64 as MCP carries a picture.
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

    /// An answer whose call gave `n` pictures.
    fn with_picture_results(mut m: Message, n: usize) -> Message {
        let parts: Vec<serde_json::Value> = (0..n)
            .map(|_| serde_json::json!({"type": "image", "mime_type": "image/png", "data": PNG}))
            .collect();
        m.tool_calls = Some(serde_json::json!([{"id": "call_1", "name": "s__shot",
            "server": "s", "tool": "shot", "arguments": {}, "state": "done", "consent": "once",
            "reason": null, "error": null,
            "outcome": {"parts": parts, "is_error": false, "cut_bytes": 0}}]));
        m
    }

    #[test]
    fn the_model_reads_each_calls_result_a_denial_with_its_reason_and_a_call_that_never_ran() {
        let mut answer = message("a1", "assistant", "");
        let call = |id: &str, state: &str, reason: Value, outcome: Value, error: Value| {
            serde_json::json!({"id": id, "name": "s__t", "server": "s", "tool": "t",
                "arguments": {"x": 1}, "state": state, "consent": null, "reason": reason,
                "outcome": outcome, "error": error})
        };
        answer.tool_calls = Some(Value::Array(vec![
            call("c1", "denied", "not now".into(), Value::Null, Value::Null),
            call(
                "c2",
                "done",
                Value::Null,
                serde_json::json!({"parts": [{"type": "text", "text": "42"}], "is_error": false, "cut_bytes": 0}),
                Value::Null,
            ),
            call(
                "c3",
                "skipped",
                Value::Null,
                Value::Null,
                "the step limit".into(),
            ),
            call("c4", "pending", Value::Null, Value::Null, Value::Null),
        ]));
        let history = [message("u1", "user", "go"), answer];
        let prompt = turn_prompt("", &history, TurnFiles::default(), SEES);
        let results: Vec<(&str, &str)> = prompt[2..]
            .iter()
            .map(|m| (m.tool_call_id.as_deref().unwrap(), m.content.as_str()))
            .collect();
        assert_eq!(
            results,
            [
                ("c1", "The user denied this call: not now"),
                ("c2", "42"),
                ("c3", "The call failed: the step limit"),
                ("c4", "The call failed: it did not run"),
            ]
        );
        assert_eq!(prompt[1].tool_calls.len(), 4);
        assert_eq!(
            prompt[1].tool_calls[0].arguments,
            serde_json::json!({"x": 1})
        );
    }

    #[test]
    fn a_tool_results_pictures_go_to_a_model_that_sees_from_the_newest_answer_only() {
        let history = [
            message("u1", "user", "look"),
            with_picture_results(message("a1", "assistant", ""), 1),
            with_picture_results(message("a2", "assistant", ""), 2),
        ];
        let prompt = turn_prompt("", &history, TurnFiles::default(), SEES);
        let roles: Vec<&str> = prompt.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant", "tool"]);
        assert_eq!(prompt[1].tool_calls[0].name, "s__shot");
        assert_eq!(prompt[2].tool_call_id.as_deref(), Some("call_1"));
        // An older answer's picture is a note; the newest's are shown.
        assert!(prompt[2].images.is_empty());
        let note = "[1 image(s) in this result, not shown]";
        assert!(prompt[2].content.starts_with(note), "{}", prompt[2].content);
        assert_eq!(prompt[4].images.len(), 2);
        assert_eq!(prompt[4].images[0], Image::from_base64(PNG).unwrap());
        // The room is what the user's images leave of a turn's 16.
        let files = TurnFiles {
            images: [("u1".to_owned(), vec![vec![9u8]; MAX_IMAGES - 1])].into(),
            audio: HashMap::new(),
        };
        let history = [
            with_images(message("u1", "user", "look"), MAX_IMAGES - 1),
            with_picture_results(message("a2", "assistant", ""), 2),
        ];
        let full = turn_prompt("", &history, files, SEES);
        assert_eq!(full[2].images.len(), 1);
        assert!(full[2].content.starts_with(note), "{}", full[2].content);
        // A model that cannot see gets notes only.
        let blind = Takes {
            images: false,
            audio: false,
        };
        let blind = turn_prompt("", &history, TurnFiles::default(), blind);
        assert!(blind[2].images.is_empty());
        assert!(blind[2]
            .content
            .starts_with("[2 image(s) in this result, not shown]"));
    }

    #[test]
    fn a_turn_carries_the_clips_it_was_given_and_says_where_the_others_were() {
        let history = [
            with_images(with_audio(message("u1", "user", "first"), 2), 1),
            message("a1", "assistant", "heard"),
            with_audio(message("u2", "user", "second"), 1),
        ];
        let files = TurnFiles {
            images: [("u1".to_owned(), vec![vec![9u8]])].into(),
            audio: [
                ("u1".to_owned(), vec![vec![2u8]]),
                ("u2".to_owned(), vec![vec![3u8]]),
            ]
            .into(),
        };
        let prompt = turn_prompt("", &history, files, SEES);
        assert_eq!(prompt[0].audio, vec![Audio(vec![2])]);
        assert_eq!(prompt[0].images, vec![Image(vec![9])]);
        assert_eq!(
            prompt[0].content,
            "[1 audio clip(s) attached here, not heard: a turn carries the newest 4 clips, 8 MiB together, at most]\nfirst"
        );
        assert_eq!(prompt[2].audio, vec![Audio(vec![3])]);
        assert_eq!(prompt[2].content, "second");

        let deaf = Takes {
            images: false,
            audio: false,
        };
        let deaf = turn_prompt("", &history, TurnFiles::default(), deaf);
        assert!(deaf[0].audio.is_empty());
        assert_eq!(
            deaf[0].content,
            "[1 image(s) attached here, not shown: this model cannot see images]\n[2 audio clip(s) attached here, not heard: this model cannot hear audio here]\nfirst"
        );
    }

    #[test]
    fn images_and_clips_are_read_as_every_door_reads_them() {
        let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg==";
        let read = read_images(&[png.to_owned()]).unwrap();
        assert_eq!(
            (read[0].mime.as_str(), read[0].width, read[0].height),
            ("image/png", 1, 1)
        );
        let bad = read_images(&[png.to_owned(), "data:image/png;base64,JVBERi0xLjQK".into()]);
        let why = format!("{:?}", bad.unwrap_err());
        assert!(why.contains("images[1]: not an image"), "{why}");
        let many = vec![png.to_owned(); MAX_IMAGES + 1];
        assert!(read_images(&many).is_err());

        use base64::Engine as _;
        let wav = hearth_protocol::audio::wav(&[0i16; 1600], 16_000, 1);
        let wav = base64::engine::general_purpose::STANDARD.encode(wav);
        let read = read_audio(&[format!("data:audio/mpeg;base64,{wav}"), wav.clone()]).unwrap();
        assert_eq!(read[0].format, "wav");
        assert_eq!(read[1].format, "wav");
        let why = format!(
            "{:?}",
            read_audio(&[wav.clone(), "JVBERi0xLjQK".into()]).unwrap_err()
        );
        assert!(why.contains("audio[1]: not audio this node reads"), "{why}");
        assert!(read_audio(&vec![wav; MAX_CLIPS + 1]).is_err());
    }
}
