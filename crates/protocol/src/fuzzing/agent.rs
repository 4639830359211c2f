//! The agent doors' request bodies as fuzzing drives them: Anthropic's Messages (stream and
//! whole) and `count_tokens`, OpenAI's Responses, and the Responses store's rows with the
//! conversations a chain of `previous_response_id`s continues, each through the code the door
//! runs, with what every accepted request must satisfy.

use std::collections::HashMap;

use super::writers::{self, call_line, unescape};
use crate::anthropic;
use crate::generation::{ChatMessage, FinishReason};
use crate::limits::MAX_TOOLS;
use crate::media::MEDIA_MARKER;
use crate::openai::parse_body;
use crate::responses::{self, stored, Ended, Response, ResponsesBody};
use crate::tools::{ToolCall, ToolChoice, ToolSet};

/// The context the fuzzed requests get: a larger `max_tokens` is capped to it.
const CONTEXT: u32 = 512;

/// What every message a door makes of a request satisfies: a known role, calls only on the
/// assistant's turns, a call id on each tool turn and only there, and each image standing at
/// one of the door's own markers.
fn check_messages(messages: &[ChatMessage]) {
    for m in messages {
        assert!(
            ["system", "user", "assistant", "tool"].contains(&m.role.as_str()),
            "role {:?}",
            m.role
        );
        assert_eq!(m.role == "tool", m.tool_call_id.is_some(), "{m:?}");
        assert!(m.tool_calls.is_empty() || m.role == "assistant", "{m:?}");
        if !m.images.is_empty() {
            assert_eq!(
                m.content.matches(MEDIA_MARKER).count(),
                m.images.len(),
                "{m:?}"
            );
        }
        assert!(m.audio.is_empty());
    }
}

/// The leading system turns are one, as [`crate::generation::merge_leading_system`] leaves them.
fn check_merged(messages: &[ChatMessage]) {
    let leading = messages
        .iter()
        .take_while(|m| m.role == "system" && m.tool_calls.is_empty() && m.audio.is_empty())
        .count();
    assert!(leading <= 1, "{leading} leading system turns");
}

/// A validated tool set: some tools, within the limit, names unique, schemas objects, the
/// named choice among them.
fn check_tools(tools: Option<&ToolSet>) {
    let Some(set) = tools else {
        return;
    };
    assert!((1..=MAX_TOOLS).contains(&set.tools.len()));
    for (i, t) in set.tools.iter().enumerate() {
        assert!(t.parameters.is_object());
        assert!(set.tools[..i].iter().all(|o| o.name != t.name));
    }
    if let ToolChoice::Function(name) = &set.choice {
        assert!(set.tools.iter().any(|t| &t.name == name));
    }
}

/// Messages as they travel (to a peer, a hub worker, into a stored row): read back the same.
fn check_round_trip(messages: &[ChatMessage]) {
    let text = serde_json::to_string(messages).expect("messages serialize");
    let again: Vec<ChatMessage> = serde_json::from_str(&text).expect("messages read back");
    assert_eq!(again, messages);
}

/// `POST /v1/messages`, streamed or whole: the body parsed and validated as the door does.
pub fn anthropic_messages(data: &[u8]) {
    let Ok(body) = parse_body::<anthropic::MessagesBody>(data) else {
        return;
    };
    let stream = body.stream == Some(true);
    let Ok(req) = body.validate(Some(CONTEXT)) else {
        return;
    };
    assert_eq!(req.stream, stream);
    assert!(!req.model.trim().is_empty());
    assert!(req
        .params
        .max_tokens
        .is_some_and(|m| (1..=CONTEXT).contains(&m)));
    check_messages(&req.messages);
    check_merged(&req.messages);
    check_tools(req.tools.as_ref());
    check_round_trip(&req.messages);
}

/// `POST /v1/messages/count_tokens`: the same body without `max_tokens`; whatever the
/// Messages door takes is counted as the same conversation.
pub fn anthropic_count_tokens(data: &[u8]) {
    let Ok(body) = parse_body::<anthropic::MessagesBody>(data) else {
        return;
    };
    let whole = body.clone().validate(Some(CONTEXT));
    let counted = body.validate_count();
    if let Ok(req) = &whole {
        let counted = counted.as_ref().expect("a body the door takes is counted");
        assert_eq!(
            (&counted.messages, &counted.tools, counted.think),
            (&req.messages, &req.tools, req.think)
        );
    }
    if let Ok(req) = counted {
        check_messages(&req.messages);
        check_merged(&req.messages);
        check_tools(req.tools.as_ref());
    }
}

/// `POST /v1/responses`, streamed or whole: the body validated, the conversation it starts,
/// and the response object that echoes it, which `GET /v1/responses/{id}` sends back as stored.
pub fn responses_request(data: &[u8]) {
    let Ok(body) = parse_body::<ResponsesBody>(data) else {
        return;
    };
    let stream = body.stream == Some(true);
    let Ok(req) = body.validate(Some(CONTEXT)) else {
        return;
    };
    assert_eq!(req.stream, stream);
    assert!(!req.input.is_empty() || req.previous_response_id.is_some());
    assert!(req.tools.is_none() || req.format.is_none());
    assert!(req
        .params
        .max_tokens
        .is_none_or(|m| (1..=CONTEXT).contains(&m)));
    check_messages(&req.input);
    check_tools(req.tools.as_ref());
    check_round_trip(&req.input);
    let c = stored::continued(vec![], req.input.clone(), req.instructions.as_deref());
    assert_eq!(c.conversation, req.input);
    check_messages(&c.messages);
    check_merged(&c.messages);
    let base = Response::start(
        "resp_1".into(),
        0,
        "m".into(),
        req.instructions,
        req.previous_response_id,
        req.store,
        &req.echo,
    );
    let text = serde_json::to_string(&base).expect("a response serializes");
    let again: Response = serde_json::from_str(&text).expect("a response reads back");
    assert_eq!(again, base);
}

/// At most this many requests an input: a chain this deep is as deep as any, and one input
/// stays quick (each row holds its whole conversation).
const MAX_REQUESTS: usize = 64;

/// A stored row, and whether this input's requests wrote it (else it is as a damaged or older
/// database might hold it).
struct Row {
    history: String,
    ours: bool,
}

/// The Responses store's rows and the chains of `previous_response_id` through them. The
/// input is lines: `@owner` the caller of what follows (the loopback user "" at first);
/// `=id<TAB>history` a row of the caller's as a database may hold it; `#id` the id of the next
/// stored answer (else `resp_<n>`, n counting requests, so a request may replace the row it
/// continues); for the next request's answer `>text` its text, `~text` its thinking,
/// `cID<TAB>NAME<TAB>ARGUMENTS` a call, `u` figures and `e` how it ended (as in `writers`' scripts); and a
/// line starting with `{` a request body. Each request is validated, continued from the row it
/// names (the caller's only: rows are looked up by caller and id, as the store's query does),
/// answered, and its row stored and read back.
pub fn responses_store(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut rows: HashMap<(String, String), Row> = HashMap::new();
    let mut owner = String::new();
    let mut next_id: Option<String> = None;
    let mut answer = Answer::default();
    let mut requests = 0;
    for line in text.split('\n') {
        let (op, rest) = match line.chars().next() {
            Some(c) => (c, &line[c.len_utf8()..]),
            None => continue,
        };
        match op {
            '@' => owner = rest.to_owned(),
            '=' => {
                let (id, history) = rest.split_once('\t').unwrap_or((rest, ""));
                // The row is read as a continuation would read it, whatever it holds.
                let _ = stored::read_history(history);
                rows.insert(
                    (owner.clone(), id.to_owned()),
                    Row {
                        history: history.to_owned(),
                        ours: false,
                    },
                );
            }
            '#' => next_id = Some(rest.to_owned()),
            '>' => answer.text.push_str(&unescape(rest)),
            '~' => answer
                .thinking
                .get_or_insert_with(String::new)
                .push_str(&unescape(rest)),
            'c' => answer.calls.push(call_line(rest, answer.calls.len())),
            'u' => answer.figures = writers::figures(rest),
            'e' => answer.reason = Some(writers::reason(rest).0),
            '{' if requests < MAX_REQUESTS => {
                let id = next_id.take().unwrap_or_else(|| format!("resp_{requests}"));
                requests += 1;
                let answer = std::mem::take(&mut answer);
                request(line, &owner, id, answer, &mut rows);
            }
            _ => {}
        }
    }
}

/// The answer a request gets, as the script gives it.
#[derive(Default)]
struct Answer {
    text: String,
    thinking: Option<String>,
    calls: Vec<ToolCall>,
    figures: [u32; 4],
    reason: Option<FinishReason>,
}

/// One request of [`responses_store`], as the door runs it (`POST /v1/responses`, whole).
fn request(
    body: &str,
    owner: &str,
    id: String,
    answer: Answer,
    rows: &mut HashMap<(String, String), Row>,
) {
    let Ok(wire) = parse_body::<ResponsesBody>(body.as_bytes()) else {
        return;
    };
    let Ok(req) = wire.validate(Some(CONTEXT)) else {
        return;
    };
    let (previous, ours) = match &req.previous_response_id {
        None => (vec![], true),
        Some(prev) => {
            // Not found for this caller: a 404, as another caller's row is.
            let Some(row) = rows.get(&(owner.to_owned(), prev.clone())) else {
                return;
            };
            // A row that cannot be read: a 500 naming it.
            let Ok(history) = stored::read_history(&row.history) else {
                return;
            };
            (history, row.ours)
        }
    };
    let c = stored::continued(
        previous.clone(),
        req.input.clone(),
        req.instructions.as_deref(),
    );
    assert_eq!(c.conversation.len(), previous.len() + req.input.len());
    assert_eq!(c.conversation[..previous.len()], previous[..]);
    assert_eq!(c.conversation[previous.len()..], req.input[..]);
    check_merged(&c.messages);
    let images = |m: &[ChatMessage]| m.iter().map(|m| m.images.len()).sum::<usize>();
    assert_eq!(images(&c.messages), images(&c.conversation));
    if ours {
        check_messages(&c.conversation);
        check_messages(&c.messages);
    }
    let reason = answer.reason.unwrap_or(FinishReason::Stop);
    let items = responses::whole_items(
        &id,
        answer.thinking.clone(),
        answer.text.clone(),
        &answer.calls,
        reason,
    );
    let (text, thinking) = responses::texts(&items);
    assert_eq!((&text, &thinking), (&answer.text, &answer.thinking));
    let [prompt_tokens, completion_tokens, cached_tokens, reasoning] = answer.figures;
    let ended = Ended {
        reason,
        prompt_tokens,
        cached_tokens,
        completion_tokens,
    };
    let base = Response::start(
        id.clone(),
        0,
        "m".into(),
        req.instructions,
        req.previous_response_id,
        req.store,
        &req.echo,
    );
    let done = base.finished(items, &ended, &answer.calls, reasoning);
    assert_eq!(
        done.status == "incomplete",
        responses::cut_short(reason, &answer.calls)
    );
    let usage = done.usage.expect("a finished response has its usage");
    assert!(usage.input_tokens_details.cached_tokens <= usage.input_tokens);
    assert!(usage.output_tokens_details.reasoning_tokens <= usage.output_tokens);
    // What `GET /v1/responses/{id}` sends is the answer as it was sent.
    let sent = serde_json::to_string(&done).expect("a response serializes");
    let again: Response = serde_json::from_str(&sent).expect("a stored body reads back");
    assert_eq!(again, done);
    if !req.store {
        return;
    }
    let history = stored::history_row(c.conversation.clone(), text.clone(), &answer.calls);
    let read = stored::read_history(&history).expect("a row this door wrote reads back");
    let mut expected = c.conversation;
    let mut reply = ChatMessage::new("assistant", text);
    reply.tool_calls = answer.calls;
    expected.push(reply);
    assert_eq!(read, expected, "the row's conversation read back");
    rows.insert((owner.to_owned(), id), Row { history, ours });
}
