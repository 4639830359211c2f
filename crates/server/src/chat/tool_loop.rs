//! The chat's MCP tools (docs/API.md, "Tools in a conversation"): which tools a turn offers the
//! model, the record of each call an answer made (kept as the message's `tool_calls`), the
//! consent each needs, running the allowed ones, and the history a next step is given (each
//! call and its result as the model's template writes them).

use std::collections::HashMap;

use hearth_protocol::media::Image;
use hearth_protocol::tools::{Tool, ToolCall, ToolChoice, ToolSet};
use hearth_protocol::ChatMessage;
use hearth_store::Message;
use hearth_tools::{CancellationToken, McpCallError, McpContent, McpToolOutcome};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::caller::Caller;
use crate::state::AppState;

/// Where one call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CallState {
    Pending,
    Running,
    Done,
    Error,
    Denied,
    Cancelled,
    Skipped,
}

/// How a call was allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Consent {
    Once,
    Chat,
    Always,
}

/// One call an answer made, as the conversation keeps it and the UI shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallRecord {
    pub(crate) id: String,
    /// What the model called it: `server__tool`.
    pub(crate) name: String,
    pub(crate) server: String,
    pub(crate) tool: String,
    pub(crate) arguments: Value,
    pub(crate) state: CallState,
    pub(crate) consent: Option<Consent>,
    /// The user's words with a denial: the model is told them.
    pub(crate) reason: Option<String>,
    pub(crate) outcome: Option<McpToolOutcome>,
    pub(crate) error: Option<String>,
    /// How long the server took to answer it (a call that ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) took_ms: Option<f64>,
}

impl CallRecord {
    /// A call the model made, waiting for consent (or for nothing, when it names no tool
    /// offered: then it is an error the model reads).
    pub(crate) fn from_call(call: ToolCall, offered: &Offered) -> Self {
        let named = offered.names.get(&call.name);
        let known = named.is_some();
        let (server, tool) = named.cloned().unwrap_or_default();
        Self {
            id: call.id,
            name: call.name.clone(),
            server,
            tool,
            arguments: call.arguments,
            state: if known {
                CallState::Pending
            } else {
                CallState::Error
            },
            consent: None,
            reason: None,
            outcome: None,
            error: (!known).then(|| format!("no tool named {:?} was offered", call.name)),
            took_ms: None,
        }
    }

    /// Whether the call has ended (its result, or why it has none, goes to the model).
    pub(crate) fn ended(&self) -> bool {
        !matches!(self.state, CallState::Pending | CallState::Running)
    }

    /// What the model is told of it: the tool's result, or why there is none.
    fn result_for_model(&self) -> String {
        match (self.state, &self.outcome) {
            (CallState::Done, Some(o)) => {
                let text = o.text_for_model();
                if o.is_error {
                    format!("The tool failed: {text}")
                } else {
                    text
                }
            }
            (CallState::Denied, _) => match self.reason.as_deref().map(str::trim) {
                Some(r) if !r.is_empty() => format!("The user denied this call: {r}"),
                _ => "The user denied this call.".to_owned(),
            },
            _ => format!(
                "The call failed: {}",
                self.error.as_deref().unwrap_or("it did not run")
            ),
        }
    }
}

/// The calls kept in a message (none when it has none, or they cannot be read).
pub(crate) fn records(message: &Message) -> Vec<CallRecord> {
    message
        .tool_calls
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

pub(crate) fn records_json(records: &[CallRecord]) -> Option<Value> {
    (!records.is_empty()).then(|| serde_json::to_value(records).unwrap_or(Value::Null))
}

/// An answer's history as the model is given it: the answer with its calls, then each call's
/// result as a `tool` turn. With `images` (a model that sees, and room in the turn for them:
/// `hearth_protocol::media::MAX_IMAGES` together) a result's pictures go with it, as many as `images` allows; each
/// one not sent leaves a note.
pub(crate) fn expand(
    message: &Message,
    mut turn: ChatMessage,
    images: &mut usize,
) -> Vec<ChatMessage> {
    let calls = records(message);
    if calls.is_empty() {
        return vec![turn];
    }
    turn.tool_calls = calls
        .iter()
        .map(|c| ToolCall {
            id: c.id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        })
        .collect();
    let mut out = vec![turn];
    // Every call gets its result turn, one that never ran (left pending) too.
    for c in &calls {
        let mut result = ChatMessage::new("tool", c.result_for_model());
        result.tool_call_id = Some(c.id.clone());
        result.name = Some(c.name.clone());
        let pictures = c
            .outcome
            .iter()
            .flat_map(|o| &o.parts)
            .filter_map(|p| match p {
                McpContent::Image { data, .. } => Some(data),
                _ => None,
            });
        let mut left = 0;
        for data in pictures {
            match Image::from_base64(data) {
                Ok(image) if *images > 0 => {
                    *images -= 1;
                    result.images.push(image);
                }
                _ => left += 1,
            }
        }
        if left > 0 {
            result.content = format!(
                "[{left} image(s) in this result, not shown]\n{}",
                result.content
            );
        }
        out.push(result);
    }
    out
}

/// The tools a turn offers, and whose each is: the name the model calls it by, to its server's
/// name and the server's own name for it.
#[derive(Debug, Clone)]
pub(crate) struct Offered {
    /// The tools, with the choice of a turn's first answer.
    pub(crate) set: ToolSet,
    pub(crate) names: HashMap<String, (String, String)>,
    /// The choice of the turn's later answers (they read the results of its calls).
    pub(crate) later: ToolChoice,
}

impl Offered {
    /// The tools as an answer is offered them: the turn's first, or a later one.
    pub(crate) fn for_answer(&self, later: bool) -> ToolSet {
        let mut set = self.set.clone();
        if later {
            set.choice = self.later.clone();
        }
        set
    }
}

/// What a turn offers the model: its tools, or none and why, as a notice to the user (`None`
/// when it is not worth saying: tools off, no server enabled, a caller not the owner).
pub(crate) enum Offer {
    Tools(Offered),
    None(Option<String>),
}

/// The tools a turn offers: the enabled servers' tools, when the conversation wants them, the
/// caller is this machine's owner, and the model's template writes tool calls of its own.
pub(crate) async fn offer(
    state: &AppState,
    settings: &hearth_store::Settings,
    caller: &Caller,
    target: &hearth_route::Target,
) -> Offer {
    if !settings.tools
        || crate::mcp_api::owner_only(caller).is_err()
        || !state.mcp.servers().iter().any(|v| v.spec.enabled)
    {
        return Offer::None(None);
    }
    match target.local.as_deref().map(|m| m.tool_format()) {
        Some(hearth_engine::ToolFormat::Generic) => {
            return Offer::None(Some(format!(
                "{} has no tool calls in its chat template: no tools are offered to it",
                target.model
            )))
        }
        Some(_) => {}
        None => {
            return Offer::None(Some(format!(
                "{} answers on another node, whose template this node cannot check: no tools are offered",
                target.model
            )))
        }
    }
    let offer = state.mcp.offer().await;
    let mut notes: Vec<String> = offer.failed.iter().map(ToString::to_string).collect();
    let names: HashMap<String, (String, String)> = offer
        .tools
        .iter()
        .map(|t| (t.offered_name.clone(), (t.server.clone(), t.name.clone())))
        .collect();
    let tools: Vec<Tool> = offer
        .tools
        .into_iter()
        .map(|t| Tool {
            name: t.offered_name,
            description: Some(t.description).filter(|d| !d.is_empty()),
            parameters: t.input_schema,
        })
        .collect();
    if tools.is_empty() {
        notes.push("no MCP tool could be offered".to_owned());
        return Offer::None(Some(notes.join("; ")));
    }
    match ToolSet::validate(tools, None, Some(false)) {
        Ok(Some(mut set)) => {
            let later = match settings.tool_choice {
                hearth_store::ChatToolChoice::Required => ToolChoice::Required,
                hearth_store::ChatToolChoice::Auto | hearth_store::ChatToolChoice::First => {
                    ToolChoice::Auto
                }
            };
            set.choice = match settings.tool_choice {
                hearth_store::ChatToolChoice::Auto => ToolChoice::Auto,
                _ => ToolChoice::Required,
            };
            // A tool whose schema cannot become a grammar fails the whole request: leave
            // such tools out, and say so.
            set.tools.retain(|t| {
                let one = ToolSet {
                    tools: vec![t.clone()],
                    choice: ToolChoice::Auto,
                    parallel: false,
                };
                match hearth_engine::tools::check(&one) {
                    Ok(()) => true,
                    Err(e) => {
                        notes.push(format!("tool {} left out: {e}", t.name));
                        false
                    }
                }
            });
            if set.tools.is_empty() {
                return Offer::None(Some(notes.join("; ")));
            }
            if !notes.is_empty() {
                tracing::warn!(notes = %notes.join("; "), "MCP tools left out of a chat turn");
            }
            Offer::Tools(Offered { set, names, later })
        }
        Ok(None) => Offer::None(None),
        Err(e) => Offer::None(Some(format!("the MCP tools could not be offered: {e}"))),
    }
}

/// Consent given already: tools always allowed, and those allowed for this conversation.
pub(crate) async fn pre_allow(state: &AppState, conversation_id: &str, calls: &mut [CallRecord]) {
    let always = state.store.mcp_always_allowed().await.unwrap_or_default();
    let chat = state
        .store
        .mcp_chat_allowed(conversation_id.to_owned())
        .await
        .unwrap_or_default();
    for c in calls.iter_mut().filter(|c| c.state == CallState::Pending) {
        if always.contains(&c.name) {
            c.consent = Some(Consent::Always);
            c.state = CallState::Running;
        } else if chat.contains(&c.name) {
            c.consent = Some(Consent::Chat);
            c.state = CallState::Running;
        }
    }
}

/// Run one allowed call to its end: its outcome, or why it has none.
pub(crate) async fn run(state: &AppState, call: &mut CallRecord, cancel: CancellationToken) {
    // By the name the model was offered: the MCP client maps it back to the server's own
    // name for the tool (a long or unusual name was shortened in the offer).
    let started = std::time::Instant::now();
    let result = state
        .mcp
        .call_offered(&call.name, call.arguments.clone(), cancel)
        .await;
    call.took_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
    match result {
        Ok(outcome) => {
            call.state = CallState::Done;
            call.outcome = Some(outcome);
        }
        Err(e @ McpCallError::Cancelled { .. }) => {
            call.state = CallState::Cancelled;
            call.error = Some(e.to_string());
        }
        Err(e) => {
            call.state = CallState::Error;
            call.error = Some(e.to_string());
        }
    }
}

/// A new turn while the last answer's calls wait: they will never run; each is kept as skipped,
/// and the model reads so.
pub(crate) async fn skip_undecided(
    state: &AppState,
    messages: &[Message],
) -> Result<(), hearth_store::StoreError> {
    let Some(last) = messages.iter().rev().find(|m| m.role == "assistant") else {
        return Ok(());
    };
    let mut calls = records(last);
    let mut changed = false;
    for c in calls.iter_mut().filter(|c| c.state == CallState::Pending) {
        c.state = CallState::Skipped;
        c.error = Some("the conversation went on without a decision".to_owned());
        changed = true;
    }
    if changed {
        state
            .store
            .set_tool_calls(last.id.clone(), records_json(&calls))
            .await?;
    }
    Ok(())
}
