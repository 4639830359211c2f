//! The doors coding agents use: Anthropic's Messages API (`/v1/messages`, Claude Code) and
//! OpenAI's Responses API (`/v1/responses`, Codex). The official `anthropic` and `openai`
//! Python packages against the real default model; the scripted engine for what a tiny model
//! cannot show (thinking, several calls in one turn, the exact event order); both doors
//! through a LAN peer and a hub worker with tools; and each API's error shape for bad input.

use crate::common;

use std::process::Command;

use common::process::{repo_root, run_peer, venv_python};
use common::{user, TestNode, MODEL_ID};
use serde_json::{json, Value};

fn weather_tool() -> Value {
    json!({"name": "get_weather", "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}})
}

fn weather_function() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}})
}

/// SSE events as `(event name, data)`.
fn events(body: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut name = String::new();
    for line in body.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(d) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"));
            assert_eq!(
                v["type"],
                name.as_str(),
                "the event name is its type: {body}"
            );
            out.push((std::mem::take(&mut name), v));
        }
    }
    out
}

async fn post_text(t: &TestNode, path: &str, body: &Value) -> (u16, String) {
    let r = t.post(path, body).await;
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn run_sdk_client(script: &str, base: String, what: &'static str, ok: &str) {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests").join(script))
        .arg(base)
        .arg(MODEL_ID);
    let (stdout, _) = run_peer(cmd, what).await;
    assert!(stdout.contains(ok), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_anthropic_python_client_works() {
    let t = TestNode::start(2).await;
    run_sdk_client(
        "anthropic_client.py",
        t.base.clone(),
        "the anthropic python client",
        "anthropic client OK",
    )
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works_on_responses() {
    let t = TestNode::start(2).await;
    run_sdk_client(
        "responses_client.py",
        t.base.clone(),
        "the openai python client (responses)",
        "responses client OK",
    )
    .await;
    t.stop().await;
}

/// A scripted answer: thinking, text, then two calls.
async fn thinking_then_two_calls() -> TestNode {
    TestNode::start_with(|c| {
        c.parallel = 2;
        c.script = Some(hearth_engine::Script {
            answer: [
                "<think>",
                "Plan it.",
                "</think>\n\n",
                "Checking. ",
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n",
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        });
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_stream_thinking_text_and_calls_as_anthropic_orders_them() {
    let t = thinking_then_two_calls().await;
    let body = json!({"model": MODEL_ID, "max_tokens": 100, "messages": user("weather?"),
        "tools": [weather_tool()], "tool_choice": {"type": "auto", "disable_parallel_tool_use": false},
        "thinking": {"type": "enabled", "budget_tokens": 1024}});
    let v: Value = t.post("/v1/messages", &body).await.json().await.unwrap();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let kinds: Vec<&str> = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"], "{v}");
    assert_eq!(v["content"][0]["thinking"], "Plan it.");
    assert_eq!(v["content"][1]["text"], "Checking. ");
    assert_eq!(v["content"][3]["input"], json!({"city": "Rome"}));
    assert!(v["content"][2]["id"]
        .as_str()
        .unwrap()
        .starts_with("toolu_"));

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = post_text(&t, "/v1/messages", &streamed).await;
    assert_eq!(status, 200, "{text}");
    let ev = events(&text);
    let names: Vec<&str> = ev
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != "ping")
        .collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    // Blocks open, change and close in order, with one index each.
    let mut open: Option<u64> = None;
    let mut starts = Vec::new();
    let mut json_of_calls = vec![String::new(); 4];
    for (name, e) in &ev {
        match name.as_str() {
            "content_block_start" => {
                assert!(open.is_none(), "a block opened inside another: {text}");
                let i = e["index"].as_u64().unwrap();
                assert_eq!(i, starts.len() as u64, "{text}");
                starts.push(e["content_block"]["type"].as_str().unwrap().to_owned());
                open = Some(i);
            }
            "content_block_delta" => {
                assert_eq!(Some(e["index"].as_u64().unwrap()), open, "{text}");
                if let Some(p) = e["delta"]["partial_json"].as_str() {
                    json_of_calls[e["index"].as_u64().unwrap() as usize].push_str(p);
                }
            }
            "content_block_stop" => {
                assert_eq!(open.take(), Some(e["index"].as_u64().unwrap()), "{text}");
            }
            _ => {}
        }
    }
    assert_eq!(
        starts,
        ["thinking", "text", "tool_use", "tool_use"],
        "{text}"
    );
    let args: Value = serde_json::from_str(&json_of_calls[2]).unwrap();
    assert_eq!(args, json!({"city": "Oslo"}));
    let delta = &ev.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use", "{delta}");
    assert!(
        delta["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{delta}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_stream_reasoning_text_and_calls_numbered_in_order() {
    let t = thinking_then_two_calls().await;
    let body = json!({"model": MODEL_ID, "input": "weather?", "tools": [weather_function()],
        "parallel_tool_calls": true, "reasoning": {"effort": "low"}, "max_output_tokens": 100});
    let v: Value = t.post("/v1/responses", &body).await.json().await.unwrap();
    assert_eq!(v["status"], "completed", "{v}");
    let kinds: Vec<&str> = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["reasoning", "message", "function_call", "function_call"],
        "{v}"
    );
    assert_eq!(v["output"][0]["summary"][0]["text"], "Plan it.");
    let args: Value = serde_json::from_str(v["output"][3]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Rome"}));

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = post_text(&t, "/v1/responses", &streamed).await;
    assert_eq!(status, 200, "{text}");
    let ev = events(&text);
    for (i, (_, e)) in ev.iter().enumerate() {
        assert_eq!(e["sequence_number"], i as u64, "{text}");
    }
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..2],
        ["response.created", "response.in_progress"],
        "{text}"
    );
    assert_eq!(names.last(), Some(&"response.completed"), "{text}");
    let want = [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ];
    let mut deduped: Vec<&str> = Vec::new();
    for n in &names[2..names.len() - 1] {
        if deduped.last() != Some(n) || !n.ends_with(".delta") {
            deduped.push(n);
        }
    }
    assert_eq!(&deduped[..want.len()], want, "{text}");
    // The final response holds the same items as the whole answer (ids aside).
    let last = &ev.last().unwrap().1["response"];
    let strip = |o: &Value| {
        let mut o = o.clone();
        let o_ = o.as_object_mut().unwrap();
        o_.remove("id");
        o_.remove("call_id");
        o
    };
    let items: Vec<Value> = last["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(strip)
        .collect();
    let whole: Vec<Value> = v["output"].as_array().unwrap().iter().map(strip).collect();
    assert_eq!(items, whole, "{last}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_doors_run_on_a_peer_and_on_a_hub_worker_with_tools() {
    let (a, b, _empty) = common::model_on_a_peer().await;
    let hub = common::hub::start_hub(1, false).await;
    let worker = common::hub::start_worker(&hub, "w1", 1).await;
    common::hub::wait_workers(&hub, 1).await;
    for node in [&b, &hub] {
        let v: Value = node
            .post(
                "/v1/messages",
                &json!({"model": MODEL_ID, "max_tokens": 120, "temperature": 0,
                    "messages": user("What is the weather in Paris?"), "tools": [weather_tool()],
                    "tool_choice": {"type": "tool", "name": "get_weather"}}),
            )
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["stop_reason"], "tool_use", "{v}");
        let call = v["content"].as_array().unwrap().last().unwrap();
        assert_eq!(call["name"], "get_weather", "{v}");
        assert!(call["input"]["city"].is_string(), "{v}");
        assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0, "{v}");
        let v: Value = node
            .post(
                "/v1/responses",
                &json!({"model": MODEL_ID, "max_output_tokens": 120, "temperature": 0,
                    "input": "What is the weather in Paris?", "tools": [weather_function()],
                    "tool_choice": "required"}),
            )
            .await
            .json()
            .await
            .unwrap();
        let call = v["output"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(call["type"], "function_call", "{v}");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert!(args["city"].is_string(), "{v}");
    }
    assert_eq!(common::hub::workers(&hub).await[0]["completed"], 2);
    worker.stop().await;
    hub.stop().await;
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_each_apis_error_shape() {
    let t = TestNode::start(1).await;
    let anthropic = |v: &Value, kind: &str| {
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    };
    for (body, status, kind) in [
        ("{".to_owned(), 400, "invalid_request_error"),
        (json!({"model": MODEL_ID, "messages": user("x")}).to_string(), 400, "invalid_request_error"),
        (json!({"model": "no-such", "max_tokens": 5, "messages": user("x")}).to_string(), 404, "not_found_error"),
        (json!({"model": MODEL_ID, "max_tokens": 5, "messages": user(&"word ".repeat(20_000))}).to_string(), 400, "invalid_request_error"),
        (json!({"model": MODEL_ID, "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]}).to_string(), 400, "invalid_request_error"),
    ] {
        let r = t.post_raw("/v1/messages", body.clone()).await;
        assert_eq!(r.status().as_u16(), status, "{body:.200}");
        anthropic(&r.json().await.unwrap(), kind);
    }
    let r = common::client()
        .get(t.url("/v1/messages"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    anthropic(&r.json().await.unwrap(), "invalid_request_error");
    let r = t.post("/v1/messages/nowhere", &json!({})).await;
    assert_eq!(r.status().as_u16(), 404);
    anthropic(&r.json().await.unwrap(), "not_found_error");
    let r = t
        .post(
            "/v1/messages/count_tokens",
            &json!({"model": MODEL_ID, "messages": []}),
        )
        .await;
    assert_eq!(r.status().as_u16(), 400);
    anthropic(&r.json().await.unwrap(), "invalid_request_error");

    let openai = |v: &Value, param: Option<&str>| {
        assert!(v["error"]["message"].is_string(), "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        if let Some(p) = param {
            assert_eq!(v["error"]["param"], p, "{v}");
        }
    };
    for (body, status, param) in [
        ("{".to_owned(), 400, None),
        (json!({"model": MODEL_ID}).to_string(), 400, Some("input")),
        (
            json!({"model": "no-such", "input": "x"}).to_string(),
            404,
            Some("model"),
        ),
        (
            json!({"input": "x", "tools": [{"type": "custom", "name": "apply_patch"}]}).to_string(),
            400,
            Some("tools"),
        ),
        (
            json!({"input": "x", "previous_response_id": "resp_nope"}).to_string(),
            404,
            Some("previous_response_id"),
        ),
        (
            json!({"input": "word ".repeat(20_000)}).to_string(),
            400,
            None,
        ),
    ] {
        let r = t.post_raw("/v1/responses", body.clone()).await;
        assert_eq!(r.status().as_u16(), status, "{body:.200}");
        openai(&r.json().await.unwrap(), param);
    }
    let r = common::client()
        .get(t.url("/v1/responses/resp_nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    openai(&r.json().await.unwrap(), None);
    // The node still answers.
    let v: Value = t
        .post(
            "/v1/messages",
            &json!({"model": MODEL_ID, "max_tokens": 3, "messages": user("Hi")}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["type"], "message", "{v}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_tokens_beyond_the_context_is_a_ceiling_on_every_door() {
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.ctx = Some(256);
    })
    .await;
    // Long enough answers: the context ends them, not the request.
    let v = t
        .chat(
            json!({"messages": user("Count to one thousand."), "max_tokens": 32000,
            "ignore_eos": true}),
        )
        .await;
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    // The context holds the prompt and every token but the last one sampled.
    let used = v["usage"]["total_tokens"].as_u64().unwrap();
    assert!(used <= 257, "{v}");
    let v: Value = t
        .post(
            "/v1/messages",
            &json!({"model": MODEL_ID, "max_tokens": 32000,
            "messages": user("Hi")}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["type"], "message", "{v}");
    let (status, text) = post_text(
        &t,
        "/api/chat",
        &json!({"model": MODEL_ID, "stream": false, "messages": user("Hi"),
            "options": {"num_predict": 32000}}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = t
        .post(
            "/v1/responses",
            &json!({"input": "Hi", "max_output_tokens": 32000}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "response", "{v}");
    t.stop().await;
}

/// A call cut short by the output limit ends the answer as the APIs end a long one
/// (`max_tokens`, `incomplete`) with the text so far: agents take a 400 as final.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_short_ends_as_max_tokens_not_an_error() {
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.script = Some(hearth_engine::Script {
            answer: [
                "Sure. ",
                "<tool_call>\n{\"name\": \"get_weather\", ",
                "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        });
    })
    .await;
    let v: Value = t
        .post(
            "/v1/messages",
            &json!({"model": MODEL_ID, "max_tokens": 2, "messages": user("weather?"),
                "tools": [weather_tool()]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["stop_reason"], "max_tokens", "{v}");
    let text = v["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Sure. <tool_call>"), "{v}");
    let (status, streamed) = post_text(
        &t,
        "/v1/messages",
        &json!({"model": MODEL_ID, "max_tokens": 2, "messages": user("weather?"),
            "tools": [weather_tool()], "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    let ev = events(&streamed);
    assert!(ev.iter().all(|(n, _)| n != "error"), "{streamed}");
    let delta = &ev.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens", "{streamed}");

    let v: Value = t
        .post(
            "/v1/responses",
            &json!({"model": MODEL_ID, "max_output_tokens": 2, "input": "weather?",
                "tools": [weather_function()]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["status"], "incomplete", "{v}");
    assert_eq!(
        v["incomplete_details"]["reason"], "max_output_tokens",
        "{v}"
    );
    let (status, streamed) = post_text(
        &t,
        "/v1/responses",
        &json!({"model": MODEL_ID, "max_output_tokens": 2, "input": "weather?",
            "tools": [weather_function()], "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    let ev = events(&streamed);
    assert_eq!(ev.last().unwrap().0, "response.incomplete", "{streamed}");
    t.stop().await;
}
