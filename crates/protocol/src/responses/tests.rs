use super::*;
use crate::openai::parse_body;
use crate::tools::ToolChoice;

fn read(json: &str) -> Result<ResponsesRequest, RequestError> {
    parse_body::<ResponsesBody>(json.as_bytes())?.validate(Some(1024))
}

#[test]
fn a_string_input_and_the_defaults() {
    let r = read(r#"{"model":"m","input":"Hi","instructions":"Be brief."}"#).unwrap();
    assert_eq!(r.input, vec![ChatMessage::new("user", "Hi")]);
    assert_eq!(r.instructions.as_deref(), Some("Be brief."));
    assert!(r.store && !r.stream);
    assert_eq!(r.echo.tool_choice, json!("auto"));
    assert_eq!(r.echo.text, json!({"format": {"type": "text"}}));
}

#[test]
fn input_images_stand_where_their_part_is() {
    let r = read(
        r#"{"input":[{"role":"user","content":[{"type":"input_text","text":"What is "},
        {"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg==","detail":"auto"},
        {"type":"input_text","text":"?"}]}]}"#,
    )
    .unwrap();
    assert_eq!(r.input[0].content, "What is <__media__>?");
    assert_eq!(r.input[0].images[0].probe(), Ok((1, 1)));
    // A tool's output may hold its pictures too; a file is still refused there.
    let r = read(
        r#"{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"shot:"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg=="}]}]}"#,
    )
    .unwrap();
    assert_eq!(
        (r.input[0].role.as_str(), r.input[0].content.as_str()),
        ("tool", "shot:<__media__>")
    );
    assert_eq!(r.input[0].images[0].probe(), Ok((1, 1)));
    let e = read(
        r#"{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_file","file_id":"f"}]}]}"#,
    )
    .unwrap_err();
    assert!(e.message.contains("not supported here"), "{}", e.message);
}

#[test]
fn items_become_turns_with_calls_and_results() {
    let r = read(
        r#"{"input":[{"role":"developer","content":"sys"},
        {"type":"message","role":"user","content":[{"type":"input_text","text":"weather?"}]},
        {"type":"reasoning","id":"rs_1","summary":[]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
        {"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Oslo\"}"},
        {"type":"function_call_output","call_id":"c1","output":"-3 C"}],
        "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],
        "tool_choice":{"type":"function","name":"get_weather"},"max_output_tokens":99999,
        "reasoning":{"effort":"low"},"store":false,"stream":true}"#,
    )
    .unwrap();
    let m = &r.input;
    assert_eq!(m.len(), 4);
    assert_eq!(m[0].role, "system");
    assert_eq!(
        (
            m[2].content.as_str(),
            m[2].tool_calls[0].arguments["city"].as_str()
        ),
        ("Checking.", Some("Oslo"))
    );
    assert_eq!(
        (m[3].role.as_str(), m[3].tool_call_id.as_deref()),
        ("tool", Some("c1"))
    );
    assert_eq!(
        r.tools.unwrap().choice,
        ToolChoice::Function("get_weather".into())
    );
    assert_eq!(r.params.max_tokens, Some(1024));
    assert_eq!(r.think, Some(true));
    assert!(!r.store && r.stream);
}

#[test]
fn namespaces_are_their_functions_and_hosted_tools_are_left_out() {
    let r = read(
        r#"{"input":"x","tool_choice":"auto","tools":[{"type":"web_search","external_web_access":false},
        {"type":"namespace","name":"agents","tools":[{"type":"function","name":"spawn_agent","parameters":{"type":"object"}}]}]}"#,
    )
    .unwrap();
    let names: Vec<_> = r.tools.unwrap().tools.into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["spawn_agent"]);
    assert_eq!(r.echo.tools.len(), 2);
    let r = read(r#"{"input":"x","tools":[{"type":"web_search"}],"tool_choice":"auto"}"#).unwrap();
    assert!(r.tools.is_none());
}

#[test]
fn formats() {
    let r = read(r#"{"input":"x","text":{"format":{"type":"json_schema","name":"p","strict":true,"schema":{"type":"object"}}}}"#).unwrap();
    assert_eq!(r.format, Some(Format::Schema(json!({"type": "object"}))));
    let r = read(r#"{"input":"x","text":{"format":{"type":"json_object"}}}"#).unwrap();
    assert_eq!(r.format, Some(Format::Json));
}

#[test]
fn bad_requests_name_the_parameter() {
    for (body, param) in [
        (r#"{"model":"m"}"#, "input"),
        (r#"{"input":[]}"#, "input"),
        (r#"{"input":5}"#, "input"),
        (r#"{"input":[{"role":"wizard","content":"x"}]}"#, "input[0]"),
        (
            r#"{"input":[{"type":"item_reference","id":"x"}]}"#,
            "input[0]",
        ),
        (
            r#"{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}"#,
            "input[0].content[0]",
        ),
        (
            r#"{"input":[{"role":"user","content":[{"type":"input_file","file_id":"x"}]}]}"#,
            "input[0].content[0]",
        ),
        (
            r#"{"input":"x","tools":[{"type":"custom","name":"apply_patch"}]}"#,
            "tools",
        ),
        (
            r#"{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"sometimes"}"#,
            "tool_choice",
        ),
        (
            r#"{"input":"x","max_output_tokens":0}"#,
            "max_output_tokens",
        ),
        (
            r#"{"input":"x","text":{"format":{"type":"xml"}}}"#,
            "text.format",
        ),
        (
            r#"{"input":"x","reasoning":{"effort":"huge"}}"#,
            "reasoning.effort",
        ),
        (r#"{"input":"x","background":true}"#, "background"),
    ] {
        let e = read(body).expect_err(body);
        assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
    }
}

#[test]
fn events_carry_their_type_and_number() {
    let e = StreamEvent::ArgumentsDelta {
        item_id: "fc_1".into(),
        output_index: 0,
        delta: "{}".into(),
    };
    assert_eq!(
        e.numbered(7),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{}", "sequence_number": 7})
    );
    let u = serde_json::to_value(Usage::new(10, 4, 3, 0)).unwrap();
    assert_eq!(
        u["input_tokens_details"],
        json!({"cached_tokens": 4, "cache_write_tokens": 0})
    );
    assert_eq!(u["output_tokens_details"], json!({"reasoning_tokens": 0}));
    // A peer's figures past 32 bits: the total saturates (it overflowed).
    assert_eq!(Usage::new(u32::MAX, 0, 1, 0).total_tokens, u32::MAX);
    assert_eq!(
        crate::generation::Usage::new(u32::MAX, 1).total_tokens,
        u32::MAX
    );
}

fn start() -> (Writer, Vec<Value>) {
    let echo = read(r#"{"input":"x"}"#).unwrap().echo;
    Writer::start(Response::start(
        "resp_1".into(),
        0,
        "m".into(),
        None,
        None,
        true,
        &echo,
    ))
}

#[test]
fn a_streamed_response_numbers_its_events_and_ends_with_its_items() {
    use crate::generation::{FinishReason, Piece};
    let (mut w, mut events) = start();
    w.pieces(vec![Piece::Reasoning("Hm.".into())], &mut events);
    w.pieces(vec![Piece::Content("Hi".into())], &mut events);
    let call = ToolCall {
        id: "call_1_0".into(),
        name: "f".into(),
        arguments: json!({"a": 1}),
    };
    let calls = [call];
    let items = w.end(vec![], &calls, FinishReason::Stop, &mut events);
    let ended = Ended {
        reason: FinishReason::Stop,
        prompt_tokens: 10,
        cached_tokens: 4,
        completion_tokens: 5,
    };
    let answer = w.base().clone().finished(items, &ended, &calls, 2);
    events.push(w.last(answer));
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "response.created",
            "response.in_progress",
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
            "response.completed",
        ]
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i);
    }
    let done = &events[18]["response"];
    assert_eq!(done["status"], "completed");
    let ids: Vec<&str> = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["rs_resp_1_0", "msg_resp_1_1", "fc_resp_1_0"]);
    assert_eq!(
        done["usage"]["output_tokens_details"]["reasoning_tokens"],
        2
    );
    // The whole answer of the same parts has the same items.
    let whole = whole_items(
        "resp_1",
        Some("Hm.".into()),
        "Hi".into(),
        &calls,
        FinishReason::Stop,
    );
    assert_eq!(done["output"], serde_json::to_value(&whole).unwrap());
}

#[test]
fn a_cut_short_answer_is_incomplete_and_an_empty_one_has_its_message() {
    use crate::generation::FinishReason;
    let (mut w, mut events) = start();
    let items = w.end(vec![], &[], FinishReason::Length, &mut events);
    assert_eq!(
        items,
        whole_items("resp_1", None, String::new(), &[], FinishReason::Length)
    );
    let ended = Ended {
        reason: FinishReason::Length,
        prompt_tokens: 1,
        cached_tokens: 9,
        completion_tokens: 2,
    };
    let answer = w.base().clone().finished(items, &ended, &[], 7);
    assert_eq!(answer.status, "incomplete");
    let usage = answer.usage.unwrap();
    assert_eq!(usage.input_tokens_details.cached_tokens, 1);
    assert_eq!(usage.output_tokens_details.reasoning_tokens, 2);
    assert_eq!(w.last(answer)["type"], "response.incomplete");
}

#[test]
fn a_stored_conversation_is_continued_with_the_new_input_after_the_instructions() {
    let first = stored::continued(
        vec![],
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ],
        Some("You are Codex."),
    );
    assert_eq!(first.conversation.len(), 2);
    assert_eq!(first.messages[0].content, "You are Codex.\n\nBe brief.");
    let call = ToolCall {
        id: "call_1".into(),
        name: "f".into(),
        arguments: json!({}),
    };
    let row = stored::history_row(first.conversation, "Hello".into(), &[call]);
    let history = stored::read_history(&row).unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[2].tool_calls[0].name, "f");
    let next = stored::continued(history, vec![ChatMessage::new("user", "More")], None);
    let roles: Vec<&str> = next.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert!(stored::read_history("{\"not\": \"a list\"}").is_err());
}
