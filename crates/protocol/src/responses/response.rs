//! What the Responses door sends: the response object with its output items (`message` with
//! `output_text`, `function_call`, `reasoning` with its summary), usage with cached tokens,
//! and the stream events in OpenAI's order, each numbered (`sequence_number`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Echo;

/// The response object (`"object": "response"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: String,
    pub object: String,
    pub created_at: u64,
    /// `in_progress`, `completed`, `incomplete` or `failed`.
    pub status: String,
    pub error: Option<Value>,
    pub incomplete_details: Option<Incomplete>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub reasoning: Value,
    pub store: bool,
    pub temperature: f64,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Vec<Value>,
    pub top_p: f64,
    pub truncation: String,
    pub usage: Option<Usage>,
    pub user: Option<String>,
    pub metadata: Value,
}

impl Response {
    /// A response in progress, with nothing in it yet.
    pub fn start(
        id: String,
        created_at: u64,
        model: String,
        instructions: Option<String>,
        previous_response_id: Option<String>,
        store: bool,
        echo: &Echo,
    ) -> Self {
        Self {
            id,
            object: "response".into(),
            created_at,
            status: "in_progress".into(),
            error: None,
            incomplete_details: None,
            instructions,
            max_output_tokens: echo.max_output_tokens,
            model,
            output: vec![],
            parallel_tool_calls: echo.parallel_tool_calls,
            previous_response_id,
            reasoning: echo.reasoning.clone(),
            store,
            temperature: echo.temperature,
            text: echo.text.clone(),
            tool_choice: echo.tool_choice.clone(),
            tools: echo.tools.clone(),
            top_p: echo.top_p,
            truncation: "disabled".into(),
            usage: None,
            user: echo.user.clone(),
            metadata: echo.metadata.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incomplete {
    /// `max_output_tokens` (the limit, or the end of the context).
    pub reason: String,
}

/// One output item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    Message {
        id: String,
        status: String,
        role: String,
        content: Vec<Content>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        /// The arguments as JSON text.
        arguments: String,
        status: String,
    },
    Reasoning {
        id: String,
        summary: Vec<Summary>,
    },
}

/// A message item's part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    OutputText {
        text: String,
        annotations: Vec<Value>,
        logprobs: Vec<Value>,
    },
}

impl Content {
    pub fn text(text: String) -> Self {
        Self::OutputText {
            text,
            annotations: vec![],
            logprobs: vec![],
        }
    }
}

/// A reasoning item's summary part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Summary {
    SummaryText { text: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u32,
    pub input_tokens_details: InputDetails,
    pub output_tokens: u32,
    pub output_tokens_details: OutputDetails,
    pub total_tokens: u32,
}

/// The prompt tokens served from the prompt cache; Hearth writes no cache entries on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputDetails {
    pub cached_tokens: u32,
    pub cache_write_tokens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputDetails {
    pub reasoning_tokens: u32,
}

impl Usage {
    /// The figures may be a peer's or a hub worker's, as they sent them: the total holds at
    /// the most 32 bits hold rather than overflow.
    pub fn new(input: u32, cached: u32, output: u32, reasoning: u32) -> Self {
        Self {
            input_tokens: input,
            input_tokens_details: InputDetails {
                cached_tokens: cached.min(input),
                cache_write_tokens: 0,
            },
            output_tokens: output,
            output_tokens_details: OutputDetails {
                reasoning_tokens: reasoning.min(output),
            },
            total_tokens: input.saturating_add(output),
        }
    }
}

/// One stream event; the SSE `event:` name is its `type`. The door numbers them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum StreamEvent {
    #[serde(rename = "response.created")]
    Created { response: Response },
    #[serde(rename = "response.in_progress")]
    InProgress { response: Response },
    #[serde(rename = "response.output_item.added")]
    ItemAdded {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.output_item.done")]
    ItemDone {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.content_part.added")]
    PartAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: Content,
    },
    #[serde(rename = "response.content_part.done")]
    PartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: Content,
    },
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.output_text.done")]
    TextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.reasoning_summary_part.added")]
    SummaryPartAdded {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        part: Summary,
    },
    #[serde(rename = "response.reasoning_summary_part.done")]
    SummaryPartDone {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        part: Summary,
    },
    #[serde(rename = "response.reasoning_summary_text.delta")]
    SummaryDelta {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_summary_text.done")]
    SummaryDone {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        text: String,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone {
        item_id: String,
        output_index: usize,
        name: String,
        arguments: String,
    },
    #[serde(rename = "response.completed")]
    Completed { response: Response },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Response },
    #[serde(rename = "response.failed")]
    Failed { response: Response },
}

impl StreamEvent {
    /// The event's JSON with its `sequence_number`.
    pub fn numbered(&self, sequence_number: u64) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(o) = &mut v {
            o.insert("sequence_number".into(), sequence_number.into());
        }
        v
    }
}
