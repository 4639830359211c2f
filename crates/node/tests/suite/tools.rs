//! Tool calling, structured output and thinking on the OpenAI and Ollama doors, with the real
//! default model (whose template knows no tools: the generic format), the same weights under a
//! Hermes-style tools template (the native format), and the scripted engine for the shapes of
//! thinking blocks, calls amid text and calls cut off. Bad tools are refused in each door's
//! words.

use crate::common;

use std::path::Path;

use common::{parse_sse, user, TestNode};
use hearth_engine::Chat;
use hearth_protocol::{ChatMessage, Tool, ToolSet};
use serde_json::{json, Value};

const WEATHER: &str = "What is the weather in Paris?";

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}})
}

fn time_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_time", "description": "The time now in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"},
                       "hours24": {"type": "boolean"}}, "required": ["zone", "hours24"]}}})
}

/// A request for a call: greedy, one call, the weather tool offered.
fn ask(choice: Value) -> Value {
    json!({"messages": user(WEATHER), "tools": [weather_tool()], "tool_choice": choice,
           "parallel_tool_calls": false, "temperature": 0, "max_tokens": 120})
}

/// The `(name, arguments)` of a call as OpenAI returns it, its arguments JSON text parsed.
fn openai_call(call: &Value) -> (String, Value) {
    assert_eq!(call["type"], "function", "{call}");
    assert!(
        call["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("call_")),
        "{call}"
    );
    let args = call["function"]["arguments"]
        .as_str()
        .expect("arguments are JSON text");
    let args: Value = serde_json::from_str(args).expect("arguments are valid JSON");
    (call["function"]["name"].as_str().unwrap().to_owned(), args)
}

/// A weather call's arguments hold what its schema requires.
fn check_weather_args(args: &Value) {
    assert!(args["city"].is_string(), "city is a string: {args}");
    assert_eq!(args.as_object().map(|o| o.len()), Some(1), "{args}");
}

/// Tool-call deltas of a stream, assembled as a client does (by index).
fn streamed_calls(chunks: &[Value]) -> Vec<Value> {
    let mut calls: Vec<Value> = Vec::new();
    for c in chunks {
        for d in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = d["index"].as_u64().expect("a streamed call has its index") as usize;
            if calls.len() <= i {
                calls.push(json!({"id": d["id"], "type": d["type"],
                    "function": {"name": d["function"]["name"], "arguments": ""}}));
            }
            let args = format!(
                "{}{}",
                calls[i]["function"]["arguments"].as_str().unwrap(),
                d["function"]["arguments"].as_str().unwrap_or("")
            );
            calls[i]["function"]["arguments"] = json!(args);
        }
    }
    calls
}

fn finish_of(chunks: &[Value]) -> Option<String> {
    chunks
        .iter()
        .rev()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str())
        .map(str::to_owned)
}

/// `/api/chat`'s status and body (the NDJSON lines as an array when it streams).
async fn ollama_chat(t: &TestNode, body: Value) -> (u16, Value) {
    let r = t.post("/api/chat", &body).await;
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    if body["stream"] == json!(false) {
        return (status, serde_json::from_str(&text).expect("JSON"));
    }
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    (status, Value::Array(lines))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_model_calls_a_required_tool_on_both_doors_and_answers_its_result() {
    let t = TestNode::start(2).await;
    // OpenAI, whole: only calls, content null, finish_reason tool_calls.
    let v = t.chat(ask(json!("required"))).await;
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert!(choice["message"]["content"].is_null(), "{v}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    let (name, args) = openai_call(&calls[0]);
    assert_eq!(name, "get_weather");
    check_weather_args(&args);

    // Streamed: the same call as deltas, no text.
    let (content, chunks) = t.chat_stream(ask(json!("required"))).await;
    assert_eq!(content, "", "{chunks:?}");
    assert_eq!(finish_of(&chunks).as_deref(), Some("tool_calls"));
    let streamed = streamed_calls(&chunks);
    assert_eq!(streamed.len(), 1, "{chunks:?}");
    assert_eq!(openai_call(&streamed[0]), (name.clone(), args.clone()));

    // A named function among two: that one, with its own schema's arguments.
    let mut named = ask(json!({"type": "function", "function": {"name": "get_time"}}));
    named["tools"] = json!([weather_tool(), time_tool()]);
    let v = t.chat(named).await;
    let (name2, args2) = openai_call(&v["choices"][0]["message"]["tool_calls"][0]);
    assert_eq!(name2, "get_time", "{v}");
    assert!(
        args2["zone"].is_string() && args2["hours24"].is_boolean(),
        "{args2}"
    );

    // The second turn, with the tool's result: an answer in words.
    let history = json!([
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": args.to_string()}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}]);
    let v = t
        .chat(json!({"messages": history, "temperature": 0, "max_tokens": 60}))
        .await;
    let message = &v["choices"][0]["message"];
    assert!(
        message["content"]
            .as_str()
            .is_some_and(|c| !c.trim().is_empty()),
        "{v}"
    );
    assert!(message["tool_calls"].is_null(), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");

    // Ollama, whole and streamed: message.tool_calls with arguments as an object.
    let body = json!({"model": common::MODEL_ID, "stream": false, "messages": user(WEATHER),
        "tools": [weather_tool()], "tool_choice": "required", "options": {"temperature": 0}});
    let (status, v) = ollama_chat(&t, body.clone()).await;
    assert_eq!(status, 200, "{v}");
    let call = &v["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{v}");
    check_weather_args(&call["arguments"]);
    assert_eq!(v["done_reason"], "stop");
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let (status, lines) = ollama_chat(&t, streaming).await;
    assert_eq!(status, 200, "{lines}");
    let lines = lines.as_array().unwrap();
    let with_calls: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"]["tool_calls"].is_array())
        .collect();
    assert_eq!(with_calls.len(), 1, "{lines:?}");
    assert_eq!(
        with_calls[0]["done"], false,
        "calls come before the final line"
    );
    assert_eq!(with_calls[0]["message"]["tool_calls"][0]["function"], *call);
    assert_eq!(lines.last().unwrap()["done"], true);

    // Ollama's second turn: the result as a `tool` message named by `tool_name`.
    let (status, v) = ollama_chat(
        &t,
        json!({"model": common::MODEL_ID, "stream": false, "options": {"temperature": 0, "num_predict": 60},
            "messages": [{"role": "user", "content": WEATHER},
                {"role": "assistant", "content": "", "tool_calls": [{"function": call}]},
                {"role": "tool", "content": "Sunny, 21 C", "tool_name": "get_weather"}]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(
        v["message"]["content"]
            .as_str()
            .is_some_and(|c| !c.trim().is_empty()),
        "{v}"
    );
    t.stop().await;
}

/// A copy of the default model whose template knows tools (Hermes style), in `dir`.
fn tools_model(dir: &Path) -> std::path::PathBuf {
    common::tools_model_with(dir, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_knows_tools_gets_them_in_its_own_format() {
    let dir = tempfile::tempdir().unwrap();
    let model = tools_model(dir.path());
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.models_dir = dir.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
    })
    .await;
    let info = t.node().host().ready().await.unwrap();
    assert_eq!(info.tool_format(), hearth_engine::ToolFormat::Hermes);

    // The template itself shows the tools, the calls and the results.
    let tool: Tool = serde_json::from_value(weather_tool()).unwrap();
    let tools = ToolSet::validate(vec![tool], None, None).unwrap().unwrap();
    let mut call = ChatMessage::new("assistant", "");
    call.tool_calls = vec![hearth_protocol::ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: json!({"city": "Oslo"}),
    }];
    let mut result = ChatMessage::new("tool", "-3 C");
    result.tool_call_id = Some("call_1".into());
    let prompt = info
        .render_chat(&Chat {
            messages: vec![ChatMessage::new("user", WEATHER), call, result],
            tools: Some(tools.clone()),
            think: Some(false),
        })
        .unwrap();
    assert!(
        prompt.contains("<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"get_weather\""),
        "{prompt}"
    );
    assert!(
        prompt.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>"),
        "{prompt}"
    );
    assert!(
        prompt.contains("<tool_response>\n-3 C\n</tool_response>"),
        "{prompt}"
    );
    assert!(
        prompt.ends_with("<think>\n\n</think>\n\n"),
        "think: false reaches the template: {prompt}"
    );
    assert!(!prompt.contains("You can call these functions"), "{prompt}");

    // Required: a <tool_call> block by grammar, read back as a call, whole and streamed.
    let v = t.chat(ask(json!("required"))).await;
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let (name, args) = openai_call(&v["choices"][0]["message"]["tool_calls"][0]);
    assert_eq!(name, "get_weather");
    check_weather_args(&args);
    let (content, chunks) = t.chat_stream(ask(json!("required"))).await;
    assert_eq!(content, "");
    assert_eq!(openai_call(&streamed_calls(&chunks)[0]), (name, args));

    // Auto: a lazy grammar; whatever the model chose, it arrives whole and valid.
    let v = t.chat(ask(json!("auto"))).await;
    let message = &v["choices"][0]["message"];
    match message["tool_calls"].as_array() {
        Some(calls) => check_weather_args(&openai_call(&calls[0]).1),
        None => assert!(
            message["content"]
                .as_str()
                .is_some_and(|c| !c.contains("<tool_call>")),
            "{v}"
        ),
    }
    t.stop().await;
}

/// A node on the scripted engine that answers `answer`, one token per entry.
async fn scripted(answer: &[&str]) -> TestNode {
    scripted_on(None, answer).await
}

/// [`scripted`] with the model `model` (its vocabulary and template) instead of the default.
async fn scripted_on(model: Option<&Path>, answer: &[&str]) -> TestNode {
    let answer: Vec<String> = answer.iter().map(|s| (*s).to_owned()).collect();
    let model = model.map(Path::to_path_buf);
    TestNode::start_with(move |c| {
        c.parallel = 2;
        if let Some(m) = model {
            c.models_dir = m.parent().unwrap().to_path_buf();
            c.model = Some(m.to_string_lossy().into_owned());
        }
        c.script = Some(hearth_engine::Script {
            answer,
            ..Default::default()
        });
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_a_template_opened_arrives_apart_too() {
    // DeepSeek R1's way: the prompt ends with `<think>`; the model writes only its end.
    let dir = tempfile::tempdir().unwrap();
    let model = common::tools_model_with(dir.path(), &["--opens-thinking"]);
    let t = scripted_on(
        Some(&model),
        &["Plan", " it.", "</think>", "\n\nHello", "!"],
    )
    .await;
    let info = t.node().host().ready().await.unwrap();
    assert!(info.opens_thinking(None));
    assert!(
        !info.opens_thinking(Some(false)),
        "think: false closes it in the template"
    );
    let v = t
        .chat(json!({"messages": user("Hi"), "max_tokens": 50}))
        .await;
    let message = &v["choices"][0]["message"];
    assert_eq!(
        (&message["reasoning_content"], &message["content"]),
        (&json!("Plan it."), &json!("Hello!")),
        "{v}"
    );
    let (content, chunks) = t
        .chat_stream(json!({"messages": user("Hi"), "max_tokens": 50}))
        .await;
    assert_eq!(content, "Hello!", "{chunks:?}");
    let (_, v) = ollama_chat(
        &t,
        json!({"model": "SmolLM2-tools", "stream": false, "think": true, "messages": user("Hi")}),
    )
    .await;
    assert_eq!(v["message"]["thinking"], "Plan it.", "{v}");
    // A grammar from the first token (here a format) leaves the model no way to close the
    // block: then the whole answer is the answer, not thinking.
    let v = t
        .chat(json!({"messages": user("Hi"), "max_tokens": 50,
                     "response_format": {"type": "json_object"}}))
        .await;
    let message = &v["choices"][0]["message"];
    assert!(message["reasoning_content"].is_null(), "{v}");
    assert_eq!(message["content"], "Plan it.</think>\n\nHello!", "{v}");
    // The web chat saves the answer with the block opened, as the UI reads a thinking answer.
    let conv = t.new_conversation("thinking").await;
    let r = t
        .post(
            &format!("/api/conversations/{conv}/chat"),
            &json!({"content": "Hi"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let _ = r.text().await.unwrap();
    let stored = t.get_json(&format!("/api/conversations/{conv}")).await;
    assert_eq!(
        stored["messages"][1]["content"], "<think>\nPlan it.</think>\n\nHello!",
        "{stored}"
    );
    t.stop().await;
}

const THINKING: [&str; 7] = ["<think>", "Plan", " it", ".</th", "ink>\n\n", "Hello", "!"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_arrives_apart_from_the_answer_on_both_doors() {
    let t = scripted(&THINKING).await;
    let body = json!({"messages": user("Hi"), "max_tokens": 50});
    let v = t.chat(body.clone()).await;
    let message = &v["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], "Plan it.", "{v}");
    assert_eq!(message["content"], "Hello!", "{v}");

    let (content, chunks) = t.chat_stream(body).await;
    assert_eq!(content, "Hello!");
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "Plan it.");

    let ask = |think: Value, stream: bool| {
        json!({"model": common::MODEL_ID, "stream": stream, "think": think,
               "messages": user("Hi"), "options": {"num_predict": 50}})
    };
    let (status, v) = ollama_chat(&t, ask(json!(true), false)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["message"]["thinking"], "Plan it.", "{v}");
    assert_eq!(v["message"]["content"], "Hello!", "{v}");
    let (_, lines) = ollama_chat(&t, ask(json!(true), true)).await;
    let field = |name: &str| -> String {
        lines
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| l["message"][name].as_str())
            .collect()
    };
    assert_eq!(
        (field("thinking"), field("content")),
        ("Plan it.".into(), "Hello!".into())
    );
    // `think: false` where the template cannot turn thinking off: it stays in the text.
    let (_, v) = ollama_chat(&t, ask(json!(false), false)).await;
    assert!(v["message"]["thinking"].is_null(), "{v}");
    assert_eq!(v["message"]["content"], THINKING.concat(), "{v}");
    // /api/generate with think: the thinking in its own field.
    let r = t
        .post(
            "/api/generate",
            &json!({"model": common::MODEL_ID, "stream": false, "think": true, "prompt": "Hi"}),
        )
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (&v["thinking"], &v["response"]),
        (&json!("Plan it."), &json!("Hello!")),
        "{v}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_amid_text_stream_the_text_first_and_a_cut_off_call_is_an_error() {
    let t = scripted(&[
        "Let me",
        " check. <tool",
        "_call>\n{\"name\": \"get_weather\", ",
        "\"arguments\": {\"city\": \"Oslo\"}}",
        "\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
    ])
    .await;
    let mut body = ask(json!("auto"));
    body["max_tokens"] = json!(50);
    body["parallel_tool_calls"] = json!(true);
    let (content, chunks) = t.chat_stream(body.clone()).await;
    assert_eq!(content, "Let me check. ");
    // Two calls in one turn (parallel_tool_calls), each with its index.
    let calls = streamed_calls(&chunks);
    assert_eq!(calls.len(), 2, "{chunks:?}");
    assert_eq!(
        openai_call(&calls[0]),
        ("get_weather".into(), json!({"city": "Oslo"}))
    );
    assert_eq!(openai_call(&calls[1]).1, json!({"city": "Rome"}));
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    assert_eq!(finish_of(&chunks).as_deref(), Some("tool_calls"));
    // Text never carries any part of the call.
    let texts: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(texts.iter().all(|t| !t.contains('<')), "{texts:?}");

    // Cut off by max_tokens inside the call: OpenAI's error, the parameter to raise named.
    body["max_tokens"] = json!(3);
    let r = t.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "tool_call_cut_off", "{v}");
    assert_eq!(v["error"]["param"], "max_tokens", "{v}");
    body["stream"] = json!(true);
    let r = t.post("/v1/chat/completions", &body).await;
    let text = r.text().await.unwrap();
    let (_, chunks) = parse_sse(&text);
    assert_eq!(
        chunks.last().unwrap()["error"]["code"],
        "tool_call_cut_off",
        "{text}"
    );
    // And Ollama's.
    let (status, v) = ollama_chat(
        &t,
        json!({"model": common::MODEL_ID, "stream": false, "messages": user(WEATHER),
            "tools": [weather_tool()], "options": {"num_predict": 3}}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("num_predict"), "{v}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tools_are_refused_in_each_doors_words() {
    let t = TestNode::start(1).await;
    let not_schema = json!({"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}}});
    for (tools, choice, param, says) in [
        (json!([not_schema]), json!("auto"), "tools", "\"f\""),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": "object"}}]),
            json!("auto"),
            "tools",
            "JSON Schema",
        ),
        (
            json!([weather_tool()]),
            json!({"type": "function", "function": {"name": "launch"}}),
            "tool_choice",
            "launch",
        ),
        (
            json!([weather_tool()]),
            json!("always"),
            "tool_choice",
            "always",
        ),
        (
            json!([{"type": "retrieval"}]),
            json!("auto"),
            "tools",
            "tools[0]",
        ),
    ] {
        let body = json!({"messages": user("x"), "tools": tools, "tool_choice": choice});
        let r = t.post("/v1/chat/completions", &body).await;
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["param"], param, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{body}: {v}"
        );
        let mut ollama = body.clone();
        ollama["model"] = json!(common::MODEL_ID);
        ollama["stream"] = json!(false);
        let (status, v) = ollama_chat(&t, ollama).await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"].as_str().unwrap().contains(says), "{v}");
    }
    // A format and tools together: each door says they do not combine.
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"messages": user("x"), "tools": [weather_tool()],
                    "response_format": {"type": "json_object"}}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "response_format", "{v}");
    let (status, v) = ollama_chat(
        &t,
        json!({"model": common::MODEL_ID, "stream": false, "messages": user("x"),
               "tools": [weather_tool()], "format": "json"}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("cannot be combined"),
        "{v}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_format_constrains_the_openai_door_to_json_and_to_a_schema() {
    let t = TestNode::start(2).await;
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false});
    let body = json!({"messages": user("Describe a person."), "temperature": 0, "max_tokens": 80,
        "response_format": {"type": "json_schema",
            "json_schema": {"name": "person", "strict": true, "schema": schema}}});
    let v = t.chat(body.clone()).await;
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let person: Value = serde_json::from_str(text).expect("the answer is JSON");
    assert!(
        person["name"].is_string() && person["age"].is_i64(),
        "{person}"
    );
    assert_eq!(person.as_object().unwrap().len(), 2, "{person}");
    let (streamed, _) = t.chat_stream(body).await;
    assert_eq!(streamed, text, "greedy: the same JSON streamed");

    let v = t
        .chat(
            json!({"messages": user("Greet me."), "temperature": 0, "max_tokens": 60,
            "response_format": {"type": "json_object"}}),
        )
        .await;
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()),
        "{text}"
    );

    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"messages": user("x"), "response_format": {"type": "json_schema",
                "json_schema": {"name": "bad", "schema": {"type": "object",
                    "properties": {"x": {"$ref": "#/nowhere"}}}}}}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "response_format", "{v}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_tools_runs_on_a_hearth_worker() {
    let hub = common::hub::start_hub(1, false).await;
    let worker = common::hub::start_worker(&hub, "w1", 1).await;
    common::hub::wait_workers(&hub, 1).await;
    let v = hub.chat(ask(json!("required"))).await;
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    check_weather_args(&openai_call(&v["choices"][0]["message"]["tool_calls"][0]).1);
    assert_eq!(common::hub::workers(&hub).await[0]["completed"], 1);
    assert_eq!(hub.status().await["requests_finished"], 0);
    worker.stop().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_tools_runs_on_a_hearth_peer_of_the_cluster() {
    // b has no model; its request runs on peer a.
    let (a, b, _empty) = common::model_on_a_peer().await;
    let mut body = ask(json!("required"));
    body["model"] = json!(common::MODEL_ID);
    let via_b = b.chat(body.clone()).await;
    let here = a.chat(body.clone()).await;
    assert_eq!(
        via_b["choices"][0]["finish_reason"], "tool_calls",
        "{via_b}"
    );
    assert_eq!(
        openai_call(&via_b["choices"][0]["message"]["tool_calls"][0]).1,
        openai_call(&here["choices"][0]["message"]["tool_calls"][0]).1,
        "the peer rendered the tools as a does itself"
    );
    for count in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(
            via_b["usage"][count], here["usage"][count],
            "{via_b} {here}"
        );
    }
    // Sent again through b: a's prompt cache served it, and b says so.
    let prompt = here["usage"]["prompt_tokens"].as_u64().unwrap();
    let again = b.chat(body).await;
    assert_eq!(
        again["usage"]["prompt_tokens_details"]["cached_tokens"],
        prompt - 1,
        "{again}"
    );
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generic_reply_streams_as_it_is_written() {
    // The generic format's answer is one JSON object; its reply's text goes out piece by
    // piece, never the JSON around it.
    let t = scripted(&[
        "{\"response\": \"",
        "Hello",
        " there",
        ", \\\"you\\\"",
        "!\"}",
    ])
    .await;
    let mut body = ask(json!("auto"));
    body["max_tokens"] = json!(50);
    let (content, chunks) = t.chat_stream(body.clone()).await;
    assert_eq!(content, "Hello there, \"you\"!");
    let pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|p| !p.is_empty())
        .collect();
    assert_eq!(pieces, ["Hello", " there", ", \"you\"", "!"], "{chunks:?}");
    assert_eq!(finish_of(&chunks).as_deref(), Some("stop"));
    let v = t.chat(body).await;
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Hello there, \"you\"!"
    );
    t.stop().await;
}
