//! The chat's tool loop past the happy path (issue 51): the real default model's weights under
//! a template that knows tools make real calls step after step (a grammar makes each answer a
//! call), each step prefilling only what is new; and a server that crashes, writes garbage,
//! answers 10 MB or hangs past its timeout, met in the middle of a loop that goes on; and a call
//! the model began but that cannot be made (cut by max tokens, or not JSON), which the chat
//! names instead of leaving its markup as an unexplained answer.

use crate::common;
use crate::mcp::{add_server, call, events, messages, of_type, py_server};

use common::TestNode;
use serde_json::{json, Value};

/// The first call's id in a chat's events, waiting for consent.
fn pending_id(events: &[Value]) -> String {
    let calls = of_type(events, "tool_call");
    assert_eq!(calls.len(), 1, "{events:?}");
    assert_eq!(calls[0]["call"]["state"], "pending", "{events:?}");
    calls[0]["call"]["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_model_calls_a_tool_step_after_step_prefilling_only_what_is_new() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tools_model_with(dir.path(), &[]);
    let t = TestNode::start_with(move |c| {
        c.models_dir = model.parent().unwrap().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
    })
    .await;
    // Only `echo` is offered: every other tool of the server is switched off.
    let mut spec = py_server("py");
    spec["disabled_tools"] = json!([
        "crash",
        "hang",
        "garbage",
        "big",
        "image",
        "spawn_grandchild"
    ]);
    add_server(&t, spec).await;
    let conv = t.new_conversation("real").await;
    let r = common::client()
        .patch(t.url(&format!("/api/conversations/{conv}")))
        .json(&json!({"settings": {"tool_choice": "sometimes"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "an unknown tool choice is refused");
    t.patch_settings(
        &conv,
        json!({"tool_choice": "required", "tool_steps": 3, "temperature": 0}),
    )
    .await;
    let first = events(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": "Say hello through the echo tool."}),
    )
    .await;
    // Each tool is allowed once as it is called; the loop goes on after each.
    let mut rest = first;
    for _ in 0..5 {
        let id = pending_id(&rest);
        rest = events(
            &t,
            &format!("/api/conversations/{conv}/tool_calls/{id}"),
            json!({"decision": "once"}),
        )
        .await;
        if of_type(&rest, "consent").is_empty() {
            break;
        }
    }
    let notice = of_type(&rest, "notice");
    assert!(
        notice
            .first()
            .and_then(|n| n["text"].as_str())
            .is_some_and(|t| t.contains("step limit (3 answers")),
        "{rest:?}"
    );
    let stored = messages(&t, &conv).await;
    assert_eq!(stored.len(), 5, "the question and four answers: {stored:?}");
    for (i, m) in stored[1..4].iter().enumerate() {
        let c = &m["tool_calls"][0];
        assert_eq!(
            (&c["name"], &c["state"]),
            (&json!("py__echo"), &json!("done")),
            "step {i}: {m}"
        );
        let said = c["arguments"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("step {i}: the model's arguments: {c}"));
        let text = c["outcome"]["parts"][0]["text"].as_str().unwrap();
        assert_eq!(text, format!("Echo: {said}"), "step {i}");
        assert!(c["took_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{c}");
    }
    assert_eq!(stored[4]["tool_calls"][0]["state"], "skipped");
    // Each step after the first reads the conversation from the cache: all of the step
    // before's prompt (but the token sampled again), and prefills its answer and the result.
    for k in 2..5 {
        let before = &stored[k - 1]["stats"];
        let now = &stored[k]["stats"];
        let prompt = now["prompt_tokens"].as_i64().unwrap();
        let cached = now["cached_tokens"].as_i64().unwrap();
        let earlier = before["prompt_tokens"].as_i64().unwrap();
        assert!(
            cached >= earlier - 1,
            "step {k}: {cached} of {prompt} kept, after a prompt of {earlier}"
        );
        assert!(
            prompt - cached < earlier,
            "step {k} prefilled {} of {prompt}: the conversation again",
            prompt - cached
        );
        assert!(now["total_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{now}");
    }

    // `first`: the first answer is made a call; the next reads its result and may answer.
    let conv = t.new_conversation("first").await;
    t.patch_settings(
        &conv,
        json!({"tool_choice": "first", "tool_steps": 3, "temperature": 0}),
    )
    .await;
    let first = events(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": "Say hello through the echo tool."}),
    )
    .await;
    let id = pending_id(&first);
    let rest = events(
        &t,
        &format!("/api/conversations/{conv}/tool_calls/{id}"),
        json!({"decision": "once"}),
    )
    .await;
    let stored = messages(&t, &conv).await;
    assert_eq!(stored[1]["tool_calls"][0]["state"], "done", "{stored:?}");
    let second = &stored[2];
    let answered_in_words = second["tool_calls"].is_null();
    assert!(
        answered_in_words && of_type(&rest, "notice").is_empty(),
        "the second answer was free to answer in words: {rest:?}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_garbage_a_huge_result_and_a_hang_are_told_to_the_model_and_the_loop_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let rounds = vec![
        vec![call("py__big", json!({"megabytes": 10}))],
        vec![call("py__hang", json!({"seconds": 3600}))],
        vec![call("py__crash", json!({}))],
        vec![call("py__garbage", json!({}))],
        vec![call("py__echo", json!({"message": "anyone there?"}))],
        vec!["All".into(), " told.".into()],
    ];
    // A context of 4,096 tokens (the tests' is 1,024): room for the 1 MiB result, cut.
    let model = common::tools_model_with(dir.path(), &[]);
    let t = TestNode::start_with(move |c| {
        c.models_dir = model.parent().unwrap().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.ctx = Some(4096);
        // The backoff after the second failure outlasts the test: the decision meets it.
        c.mcp_backoff_first = Some(std::time::Duration::from_secs(120));
        c.script = Some(hearth_engine::Script {
            rounds,
            ..Default::default()
        });
    })
    .await;
    let mut spec = py_server("py");
    spec["call_timeout_ms"] = json!(2000);
    add_server(&t, spec).await;
    let conv = t.new_conversation("faults").await;
    let mut rest = events(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": "Try every tool"}),
    )
    .await;
    // Each tool is allowed once as it is called (consent for the chat is a tool's); the loop
    // goes on after each.
    for _ in 0..5 {
        let id = pending_id(&rest);
        rest = events(
            &t,
            &format!("/api/conversations/{conv}/tool_calls/{id}"),
            json!({"decision": "once"}),
        )
        .await;
        if of_type(&rest, "consent").is_empty() {
            break;
        }
    }
    // A second failure in a row (the crash, then the garbage) puts the server in backoff: the
    // decision on the next call finds no tool to offer, the call fails saying so, and the last
    // answer reads the results without tools; the chat says which server failed and why.
    let notice = of_type(&rest, "notice");
    assert!(
        notice
            .first()
            .and_then(|n| n["text"].as_str())
            .is_some_and(|t| t.contains("MCP server \"py\" failed 2 times in a row")
                && t.contains("not JSON-RPC")),
        "{rest:?}"
    );
    let last = rest.last().unwrap();
    assert_eq!(
        (&last["type"], &last["message"]["content"]),
        (&json!("done"), &json!("All told.")),
        "{rest:?}"
    );
    let stored = messages(&t, &conv).await;
    assert_eq!(stored.len(), 7, "{stored:?}");
    let calls: Vec<&Value> = stored[1..6].iter().map(|m| &m["tool_calls"][0]).collect();
    let error = |i: usize| calls[i]["error"].as_str().unwrap_or_default().to_owned();
    // 10 MB is cut to the 1 MiB a result may be, with a note for the model.
    assert_eq!(calls[0]["state"], "done", "{}", calls[0]);
    let outcome = &calls[0]["outcome"];
    let kept = outcome["parts"][0]["text"].as_str().unwrap().len();
    assert!(
        kept <= 1 << 20 && kept > (1 << 20) - 4096,
        "{kept} bytes kept"
    );
    assert_eq!(outcome["cut_bytes"], 10_000_000 - kept, "{outcome}");
    // Still too long for the model's context: cut again for the prompt, to leave room for
    // the answer.
    let next = &stored[2]["stats"];
    assert!(
        next["prompt_tokens"].as_i64().unwrap() <= 4096 - 1024,
        "the next step read a prompt of {next}, leaving no room for the answer"
    );
    // A hang past the server's timeout is an error, and the loop is not held.
    assert_eq!(calls[1]["state"], "error", "{}", calls[1]);
    assert!(error(1).contains("gave no answer in 2 s"), "{}", calls[1]);
    assert!(calls[1]["took_ms"].as_f64().unwrap() < 30_000.0);
    // The crash names the server, how it ended and its last words on stderr.
    assert_eq!(calls[2]["state"], "error", "{}", calls[2]);
    assert!(
        error(2).contains("\"py\" stopped during the call") && error(2).contains("exit status: 3"),
        "{}",
        calls[2]
    );
    // The next call starts it again, and its garbage on stdout is an error that says so.
    assert_eq!(calls[3]["state"], "error", "{}", calls[3]);
    assert!(
        error(3).contains("broke the protocol") && error(3).contains("not JSON-RPC"),
        "{}",
        calls[3]
    );
    assert_eq!(calls[4]["state"], "error", "{}", calls[4]);
    assert!(error(4).contains("failed 2 times in a row"), "{}", calls[4]);
    assert!(stored[6]["tool_calls"].is_null(), "{}", stored[6]);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_max_tokens_or_unreadable_is_not_made_and_the_chat_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let rounds = vec![
        vec![
            "<tool_call>\n".into(),
            "{\"name\": \"py__echo\", ".into(),
            "\"arguments\": {\"message\": \"hi\"}}\n".into(),
            "</tool_call>".into(),
        ],
        vec!["<tool_call>\n{not json}\n</tool_call>".into()],
        // Longer than the tests' context (1,024 tokens) leaves room for.
        std::iter::once(
            "<tool_call>\n{\"name\": \"py__echo\", \"arguments\": {\"message\": \"".to_owned(),
        )
        .chain(std::iter::repeat_n("la ".to_owned(), 2000))
        .collect(),
    ];
    let model = common::tools_model_with(dir.path(), &[]);
    let t = TestNode::start_with(move |c| {
        c.models_dir = model.parent().unwrap().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.script = Some(hearth_engine::Script {
            rounds,
            ..Default::default()
        });
    })
    .await;
    add_server(&t, py_server("py")).await;
    let conv = t.new_conversation("cut").await;
    let path = format!("/api/conversations/{conv}/chat");
    // Three tokens of the call's four: the answer ends at max tokens inside the call.
    t.patch_settings(&conv, json!({"max_tokens": 3})).await;
    let cut = events(&t, &path, json!({"content": "Say hi through the tool"})).await;
    assert!(of_type(&cut, "tool_call").is_empty(), "{cut:?}");
    let done = of_type(&cut, "done");
    assert_eq!(
        done[0]["message"]["content"],
        "<tool_call>\n{\"name\": \"py__echo\", \"arguments\": {\"message\": \"hi\"}}\n",
        "{cut:?}"
    );
    // One notice, after the answer's `done`: the stream's last event.
    let notice = |events: &[Value]| -> String {
        let n = of_type(events, "notice");
        assert_eq!(n.len(), 1, "{events:?}");
        assert_eq!(events.last(), Some(n[0]), "{events:?}");
        assert_eq!(events[events.len() - 2]["type"], "done", "{events:?}");
        n[0]["text"].as_str().unwrap().to_owned()
    };
    assert_eq!(
        notice(&cut),
        "The answer reached its token limit in the middle of a tool call, so no tool was called: raise \"Max tokens\" in the chat's settings."
    );
    t.patch_settings(&conv, json!({"max_tokens": null})).await;
    let broken = events(&t, &path, json!({"content": "Again"})).await;
    assert!(of_type(&broken, "tool_call").is_empty(), "{broken:?}");
    let text = notice(&broken);
    assert!(
        text.starts_with("No tool was called: a <tool_call> holds no valid JSON")
            && text.ends_with("; the call is shown as text."),
        "{text}"
    );
    // With no Max tokens of its own, the call was cut by the context.
    let long = events(&t, &path, json!({"content": "Once more"})).await;
    assert!(of_type(&long, "tool_call").is_empty(), "{long:?}");
    assert_eq!(
        notice(&long),
        "The answer filled the model's context in the middle of a tool call, so no tool was called: start a new chat, or load the model with a larger context."
    );
    let stored = messages(&t, &conv).await;
    assert_eq!(stored.len(), 6, "{stored:?}");
    assert!(
        stored
            .iter()
            .all(|m| m["tool_calls"].is_null() && m["status"] == "complete"),
        "{stored:?}"
    );
    t.stop().await;
}
