use super::*;
use crate::openai::parse_body;
use crate::tools::ToolChoice;

fn read(json: &str) -> Result<MessagesRequest, RequestError> {
    parse_body::<MessagesBody>(json.as_bytes())?.validate(Some(1024))
}

#[test]
fn system_blocks_and_turns_become_chat_messages() {
    let r = read(
        r#"{"model":"m","max_tokens":10,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
        "messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"text","text":"Hello"}]},
        {"role":"user","content":[{"type":"text","text":"More"}]}],"metadata":{"user_id":"u"},"stream":true}"#,
    )
    .unwrap();
    let roles: Vec<_> = r
        .messages
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect();
    assert_eq!(
        roles,
        [
            ("system", "Be brief."),
            ("user", "Hi"),
            ("assistant", "Hello"),
            ("user", "More")
        ]
    );
    assert!(r.stream);
    assert_eq!(r.params.max_tokens, Some(10));
}

#[test]
fn image_blocks_stand_where_they_are_in_the_turn() {
    let r = read(
        r#"{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[
        {"type":"text","text":"Compare"},
        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg=="}},
        {"type":"image","source":{"type":"url","url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg=="}},
        {"type":"text","text":"these."}]}]}"#,
    )
    .unwrap();
    let m = &r.messages[0];
    assert_eq!(m.content, "Compare<__media__><__media__>\nthese.");
    assert_eq!(m.images.len(), 2);
    assert_eq!(m.images[0].probe(), Ok((1, 1)));
}

#[test]
fn tool_use_and_results_become_calls_and_tool_turns() {
    let r = read(
        r#"{"model":"m","max_tokens":10,
        "tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
        "tool_choice":{"type":"tool","name":"get_weather"},
        "messages":[{"role":"user","content":"weather?"},
        {"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Oslo"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"-3 C"}]},
          {"type":"tool_result","tool_use_id":"toolu_1","content":"down","is_error":true},{"type":"text","text":"Thanks"}]}]}"#,
    )
    .unwrap();
    let set = r.tools.unwrap();
    assert_eq!(set.choice, ToolChoice::Function("get_weather".into()));
    assert!(!set.parallel);
    let m = &r.messages;
    assert_eq!(m[1].tool_calls[0].arguments["city"], "Oslo");
    assert_eq!(m[1].content, "Looking.");
    assert_eq!(
        (m[2].role.as_str(), m[2].content.as_str()),
        ("tool", "-3 C")
    );
    assert_eq!(m[3].content, "Error: down");
    assert_eq!(
        (m[4].role.as_str(), m[4].content.as_str()),
        ("user", "Thanks")
    );
}

#[test]
fn a_tool_results_pictures_come_with_it_and_the_system_prompt_takes_none() {
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg==";
    let image = format!(
        r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{png}"}}}}"#
    );
    let r = read(&format!(
        r#"{{"model":"m","max_tokens":10,"messages":[{{"role":"user","content":"read it"}},
        {{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"Read","input":{{"file_path":"a.png"}}}}]}},
        {{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":[{{"type":"text","text":"a.png"}},{image}]}}]}}]}}"#
    ))
    .unwrap();
    let tool = &r.messages[2];
    assert_eq!(
        (tool.role.as_str(), tool.content.as_str()),
        ("tool", "a.png\n<__media__>")
    );
    assert_eq!(tool.images[0].probe(), Ok((1, 1)));
    let e = read(&format!(
        r#"{{"model":"m","max_tokens":10,"system":[{image}],"messages":[{{"role":"user","content":"x"}}]}}"#
    ))
    .unwrap_err();
    assert!(
        e.message
            .contains("system[0]: image blocks are not supported here"),
        "{}",
        e.message
    );
}

#[test]
fn choices_thinking_and_a_large_max_tokens() {
    let base = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"#;
    let r = read(&format!(r#"{base}"max_tokens":32000,"tool_choice":{{"type":"any"}},"thinking":{{"type":"enabled","budget_tokens":1024}}}}"#)).unwrap();
    assert_eq!(r.tools.unwrap().choice, ToolChoice::Required);
    assert_eq!(r.think, Some(true));
    // A ceiling, not an error: capped at the context.
    assert_eq!(r.params.max_tokens, Some(1024));
    let r = read(&format!(
        r#"{base}"max_tokens":5,"tool_choice":{{"type":"none"}},"thinking":{{"type":"disabled"}}}}"#
    ))
    .unwrap();
    assert!(r.tools.is_none());
    assert_eq!(r.think, Some(false));
}

#[test]
fn bad_requests_name_what_is_wrong() {
    for (body, param) in [
        (
            r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
            "max_tokens",
        ),
        (
            r#"{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
            "model",
        ),
        (r#"{"model":"m","max_tokens":5,"messages":[]}"#, "messages"),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"wizard","content":"x"}]}"#,
            "messages[0].role",
        ),
        (
            r#"{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
            "max_tokens",
        ),
        (
            r#"{"model":"m","max_tokens":5,"temperature":3,"messages":[{"role":"user","content":"x"}]}"#,
            "temperature",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]}"#,
            "messages[0].content",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}"#,
            "messages[0].content[0]",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}"#,
            "messages[0].content[0]",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%%"}}]}]}"#,
            "messages[0].content[0]",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}"#,
            "messages[0].content[0]",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"bash_20250124","name":"bash"}]}"#,
            "tools",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"}]}"#,
            "tools",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"g"}}"#,
            "tool_choice",
        ),
        (
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"sometimes"}}"#,
            "thinking",
        ),
    ] {
        let e = read(body).expect_err(body);
        assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
    }
}

#[test]
fn server_tools_are_left_out_and_leading_system_turns_joined() {
    let r = read(
        r#"{"model":"m","max_tokens":5,"system":"A","messages":[{"role":"system","content":"B"},
        {"role":"user","content":[{"type":"text","text":"<reminder>"},{"type":"text","text":"Hi"}]}],
        "tools":[{"type":"web_search_20250305","name":"web_search"},{"name":"f","input_schema":{"type":"object"}}]}"#,
    )
    .unwrap();
    assert_eq!(r.tools.unwrap().tools.len(), 1);
    assert_eq!(r.messages[0], ChatMessage::new("system", "A\n\nB"));
    assert_eq!(r.messages[1].content, "<reminder>\nHi");
}

#[test]
fn count_needs_no_max_tokens() {
    let r =
        parse_body::<MessagesBody>(br#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#)
            .unwrap()
            .validate_count()
            .unwrap();
    assert_eq!(r.messages.len(), 1);
}

#[test]
fn events_and_errors_serialize_as_anthropic_sends_them() {
    let e = StreamEvent::ContentBlockDelta {
        index: 1,
        delta: BlockDelta::InputJsonDelta {
            partial_json: "{}".into(),
        },
    };
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        serde_json::json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}})
    );
    assert_eq!(
        serde_json::to_value(StreamEvent::MessageStop).unwrap(),
        serde_json::json!({"type":"message_stop"})
    );
    assert_eq!(
        serde_json::to_value(ErrorBody::for_status(404, "no")).unwrap(),
        serde_json::json!({"type":"error","error":{"type":"not_found_error","message":"no"}})
    );
    let u = Usage::new(10, 3, 4);
    assert_eq!((u.input_tokens, u.cache_read_input_tokens), (6, 4));
}

fn event_types(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let v = serde_json::to_value(e).unwrap();
            let delta = v["delta"]["type"].as_str().map(|d| format!(":{d}"));
            format!(
                "{}{}",
                v["type"].as_str().unwrap(),
                delta.unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_streamed_answer_opens_and_closes_each_block_then_its_calls() {
    use crate::generation::{FinishReason, Piece};
    let mut blocks = Blocks::default();
    let mut out = vec![];
    blocks.pieces(
        vec![
            Piece::Reasoning("Use f.".into()),
            Piece::Content("Calling".into()),
        ],
        &mut out,
    );
    blocks.pieces(vec![Piece::Content(" f.".into())], &mut out);
    let call = ToolCall {
        id: "call_7_0".into(),
        name: "f".into(),
        arguments: serde_json::json!({"a": 1}),
    };
    let ended = Ended {
        reason: FinishReason::Stop,
        stop_sequence: Some("never shown: a call ended it".into()),
        usage: Usage::new(10, 3, 4),
    };
    blocks.end(vec![], std::slice::from_ref(&call), &ended, &mut out);
    assert_eq!(
        event_types(&out),
        [
            "content_block_start",
            "content_block_delta:thinking_delta",
            "content_block_delta:signature_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta:text_delta",
            "content_block_delta:text_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta:input_json_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let delta = serde_json::to_value(&out[11]).unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["delta"]["stop_sequence"], Value::Null);
    assert_eq!(delta["usage"]["input_tokens"], 6);
    assert_eq!(delta["usage"]["cache_read_input_tokens"], 4);
    let start = serde_json::to_value(&out[8]).unwrap();
    assert_eq!(start["index"], 2);
    assert_eq!(start["content_block"]["id"], "toolu_7_0");
    // The whole answer of the same parts.
    let m = whole(
        "msg_1".into(),
        "m".into(),
        Some("Use f.".into()),
        "Calling f.".into(),
        &[call],
        &ended,
    );
    assert_eq!(m.content.len(), 3);
    assert_eq!(m.stop_reason, Some("tool_use"));
}

#[test]
fn an_empty_answer_has_one_empty_text_block_streamed_as_whole() {
    use crate::generation::FinishReason;
    let ended = Ended {
        reason: FinishReason::Stop,
        stop_sequence: Some("</title>".into()),
        usage: Usage::default(),
    };
    let mut out = vec![];
    Blocks::default().end(vec![], &[], &ended, &mut out);
    assert_eq!(
        event_types(&out),
        [
            "content_block_start",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let delta = serde_json::to_value(&out[2]).unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "stop_sequence");
    assert_eq!(delta["delta"]["stop_sequence"], "</title>");
    let m = whole("msg_1".into(), "m".into(), None, String::new(), &[], &ended);
    assert_eq!(
        m.content,
        [Block::Text {
            text: String::new()
        }]
    );
}
