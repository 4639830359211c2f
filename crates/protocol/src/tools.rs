//! Tool calling's shared vocabulary: the tools a client offers ([`Tool`]), how the model may
//! use them ([`ToolChoice`], together a [`ToolSet`]), and the calls it made ([`ToolCall`]).
//! Both doors read their wire form into these; the engine renders them into the prompt, and
//! they serialize in Hugging Face's `apply_chat_template` shape, which chat templates expect.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::{MAX_TOOLS, MAX_TOOL_NAME_BYTES};
use crate::value_kind::kind;

/// A bad tool or `tool_choice`: which parameter, and why (a `ParamError` to the doors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub param: &'static str,
    pub message: String,
}

impl ToolError {
    fn new(param: &'static str, message: impl Into<String>) -> Self {
        Self {
            param,
            message: message.into(),
        }
    }
}

/// One function the model may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// The JSON Schema of its arguments (an object schema).
    pub parameters: Value,
}

/// How the model may use the tools (OpenAI's `tool_choice`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// Call a tool or answer, as the model decides.
    #[default]
    Auto,
    /// Call at least one tool.
    Required,
    /// Call this function.
    Function(String),
}

/// The tools of one request, validated: at least one, names unique, the choice naming one of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSet {
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub choice: ToolChoice,
    /// Whether the model may make more than one call in a turn. Off unless asked for, as
    /// llama-server has it: small models asked for a list of calls repeat one until the
    /// answer's end.
    #[serde(default)]
    pub parallel: bool,
}

/// A call the model made, or one a client sends back in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as a JSON value (an object when the model followed the schema).
    pub arguments: Value,
}

impl ToolSet {
    /// The tools a door read, with its `tool_choice` (`None` when absent) and
    /// `parallel_tool_calls`. `Ok(None)`: no tools, or `tool_choice: "none"`, so the model is
    /// shown none.
    pub fn validate(
        tools: Vec<Tool>,
        choice: Option<&Value>,
        parallel: Option<bool>,
    ) -> Result<Option<Self>, ToolError> {
        if tools.len() > MAX_TOOLS {
            return Err(ToolError::new(
                "tools",
                format!("at most {MAX_TOOLS} tools are allowed, got {}", tools.len()),
            ));
        }
        for (i, t) in tools.iter().enumerate() {
            check_name(&t.name)
                .map_err(|m| ToolError::new("tools", format!("tools[{i}].function.name: {m}")))?;
            if !t.parameters.is_object() {
                return Err(ToolError::new(
                    "tools",
                    format!(
                        "tools[{i}].function.parameters must be a JSON Schema object, got {}",
                        kind(&t.parameters)
                    ),
                ));
            }
            if tools[..i].iter().any(|o| o.name == t.name) {
                return Err(ToolError::new(
                    "tools",
                    format!("tools[{i}]: the function name {:?} is given twice", t.name),
                ));
            }
        }
        let choice = match choice {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(v) => match parse_choice(v)? {
                None => return Ok(None),
                Some(c) => c,
            },
        };
        if tools.is_empty() {
            if choice != ToolChoice::Auto {
                return Err(ToolError::new(
                    "tool_choice",
                    "tool_choice is set but no tools are given",
                ));
            }
            return Ok(None);
        }
        if let ToolChoice::Function(name) = &choice {
            if !tools.iter().any(|t| &t.name == name) {
                return Err(ToolError::new(
                    "tool_choice",
                    format!("tool_choice names the function {name:?}, which is not in tools"),
                ));
            }
        }
        Ok(Some(Self {
            tools,
            choice,
            parallel: parallel.unwrap_or(false),
        }))
    }

    /// The tools the model may call under the choice (only the named one for a named choice).
    pub fn callable(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter().filter(|t| match &self.choice {
            ToolChoice::Function(n) => &t.name == n,
            _ => true,
        })
    }

    /// Whether the answer must be a call.
    pub fn must_call(&self) -> bool {
        self.choice != ToolChoice::Auto
    }
}

/// `tool_choice`: `"none"` (`Ok(None)`), `"auto"`, `"required"` (also `"any"`, as Anthropic and
/// Mistral name it), or `{"type": "function", "function": {"name": ...}}`.
fn parse_choice(v: &Value) -> Result<Option<ToolChoice>, ToolError> {
    let bad = |what: String| ToolError::new("tool_choice", what);
    match v {
        Value::String(s) => match s.as_str() {
            "none" => Ok(None),
            "auto" => Ok(Some(ToolChoice::Auto)),
            "required" | "any" => Ok(Some(ToolChoice::Required)),
            other => Err(bad(format!(
                "unknown tool_choice {other:?}; expected \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
            ))),
        },
        Value::Object(o) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad("tool_choice must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}".into()))?;
            Ok(Some(ToolChoice::Function(name.to_owned())))
        }
        other => Err(bad(format!(
            "tool_choice must be a string or an object, got {}",
            kind(other)
        ))),
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a function needs a name".into());
    }
    if name.len() > MAX_TOOL_NAME_BYTES {
        return Err(format!("longer than {MAX_TOOL_NAME_BYTES} bytes"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    {
        return Err(format!(
            "{name:?} may hold only letters, digits, '_', '-' and '.'"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Serde: the `{"type": "function", "function": {...}}` wrapper both APIs and templates use.

#[derive(Serialize, Deserialize)]
struct FunctionWire<F> {
    #[serde(rename = "type", default = "function")]
    kind: String,
    function: F,
}

fn function() -> String {
    "function".into()
}

#[derive(Serialize, Deserialize)]
struct ToolBody {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(default = "empty_object_schema")]
    parameters: Value,
}

/// A function without `parameters` takes none.
fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

impl Serialize for Tool {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        FunctionWire {
            kind: function(),
            function: ToolBody {
                name: self.name.clone(),
                description: self.description.clone(),
                parameters: self.parameters.clone(),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Tool {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = FunctionWire::<ToolBody>::deserialize(d)?;
        if w.kind != "function" {
            return Err(serde::de::Error::custom(format!(
                "tool type {:?} is not supported; only \"function\" is",
                w.kind
            )));
        }
        Ok(Self {
            name: w.function.name,
            description: w.function.description,
            parameters: w.function.parameters,
        })
    }
}

impl Serialize for ToolChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Required => s.serialize_str("required"),
            Self::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}}).serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match parse_choice(&v) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(serde::de::Error::custom(
                "a tool set's choice is never none",
            )),
            Err(e) => Err(serde::de::Error::custom(e.message)),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct CallBody {
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Serialize, Deserialize)]
struct CallWire {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    id: String,
    #[serde(rename = "type", default = "function")]
    kind: String,
    function: CallBody,
}

impl Serialize for ToolCall {
    /// Arguments as an object, as Hugging Face templates read them (`arguments | tojson`).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CallWire {
            id: self.id.clone(),
            kind: function(),
            function: CallBody {
                name: self.name.clone(),
                arguments: self.arguments.clone(),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    /// Arguments as an object (Ollama, templates) or as a JSON string (OpenAI).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = CallWire::deserialize(d)?;
        Ok(Self {
            id: w.id,
            name: w.function.name,
            arguments: arguments_value(w.function.arguments),
        })
    }
}

/// OpenAI sends arguments as a JSON text; templates want the value. Text that is not JSON
/// stays a string; a JSON text of a JSON text (arguments encoded twice) is read through, and
/// `null` is no arguments. So reading a call again (from a stored conversation, or one relayed
/// to a peer, where it was written as its value) gives the same arguments.
pub fn arguments_value(v: Value) -> Value {
    let mut v = v;
    loop {
        match v {
            Value::Null => return Value::Object(Default::default()),
            // Each text read is shorter than the one it came from: this ends.
            Value::String(s) => match serde_json::from_str(&s) {
                Ok(inner) => v = inner,
                Err(_) => return Value::String(s),
            },
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Tool {
        Tool {
            name: name.into(),
            description: None,
            parameters: json!({"type": "object"}),
        }
    }

    #[test]
    fn tools_read_and_write_the_function_wrapper() {
        let t: Tool = serde_json::from_value(json!({"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}})).unwrap();
        assert_eq!(t.description.as_deref(), Some("d"));
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}})
        );
        let bare: Tool = serde_json::from_value(json!({"function": {"name": "g"}})).unwrap();
        assert_eq!(bare.parameters["type"], "object");
        let err =
            serde_json::from_value::<Tool>(json!({"type": "retrieval", "function": {"name": "g"}}))
                .unwrap_err();
        assert!(err.to_string().contains("retrieval"), "{err}");
    }

    #[test]
    fn calls_take_arguments_as_text_or_object_and_give_an_object() {
        let a: ToolCall = serde_json::from_value(json!({"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}})).unwrap();
        let b: ToolCall =
            serde_json::from_value(json!({"function": {"name": "f", "arguments": {"x": 1}}}))
                .unwrap();
        assert_eq!(a.arguments, b.arguments);
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}})
        );
    }

    #[test]
    fn a_call_written_and_read_again_keeps_its_arguments() {
        for sent in [
            json!("{\"x\": 1}"),
            json!("\"{\\\"x\\\": 1}\""),
            json!("\"5\""),
            json!("null"),
            json!(null),
            json!("not json"),
            json!("\"not json\""),
            json!([1, "2"]),
        ] {
            let call: ToolCall = serde_json::from_value(
                json!({"id": "c", "function": {"name": "f", "arguments": sent.clone()}}),
            )
            .unwrap();
            assert_eq!(
                call.arguments,
                arguments_value(call.arguments.clone()),
                "{sent}"
            );
            let again: ToolCall =
                serde_json::from_value(serde_json::to_value(&call).unwrap()).unwrap();
            assert_eq!(again, call, "{sent}");
        }
        assert_eq!(arguments_value(json!("\"5\"")), json!(5));
        assert_eq!(arguments_value(json!("\"not json\"")), json!("not json"));
    }

    #[test]
    fn choices_and_their_errors() {
        let set = |c: Value| ToolSet::validate(vec![tool("f"), tool("g")], Some(&c), None);
        assert_eq!(
            set(json!("auto")).unwrap().unwrap().choice,
            ToolChoice::Auto
        );
        assert!(set(json!("none")).unwrap().is_none());
        let named = set(json!({"type": "function", "function": {"name": "g"}}))
            .unwrap()
            .unwrap();
        assert_eq!(
            named
                .callable()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["g"]
        );
        assert!(named.must_call() && !named.parallel);
        for bad in [
            json!("sometimes"),
            json!({"type": "function", "function": {"name": "h"}}),
            json!(3),
            json!({"type": "function"}),
        ] {
            let e = set(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(e.param, "tool_choice", "{e}");
        }
        let e = ToolSet::validate(vec![], Some(&json!("required")), None).unwrap_err();
        assert_eq!(e.param, "tool_choice");
        assert!(ToolSet::validate(vec![], None, None).unwrap().is_none());
    }

    #[test]
    fn bad_tools_name_the_tool() {
        let mut not_schema = tool("f");
        not_schema.parameters = json!("a string");
        for (tools, needle) in [
            (vec![not_schema], "JSON Schema"),
            (vec![tool("f"), tool("f")], "twice"),
            (vec![tool("")], "needs a name"),
            (vec![tool("a b")], "only letters"),
        ] {
            let e = ToolSet::validate(tools, None, None).unwrap_err();
            assert_eq!(e.param, "tools");
            assert!(e.message.contains(needle), "{e}");
        }
    }
}
