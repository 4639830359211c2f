//! MCP tools in the UI's chat, against real MCP servers (`tests/mcp/py_server.py` on the Python
//! `mcp` SDK, npm's `server-everything`): `/api/mcp/*` configures them and keeps them across a
//! restart; a scripted model's answers call them; each call waits for the user's consent
//! (once, for the chat, always, or denied with a reason), runs, and the loop goes on to the
//! answer that reads the result, up to the conversation's step limit; a stop cancels a call.

use crate::common;

use common::process::{repo_root, venv_python};
use common::TestNode;
use serde_json::{json, Value};

/// The Python test server over stdio, as the API takes a server.
pub(crate) fn py_server(name: &str) -> Value {
    json!({"name": name, "transport": {"type": "stdio",
        "command": venv_python().to_string_lossy(),
        "args": [repo_root().join("tests/mcp/py_server.py").to_string_lossy()]}})
}

/// A model's call of `tool` in Hermes' format, as the tools template's model writes it.
pub(crate) fn call(tool: &str, arguments: Value) -> String {
    format!("<tool_call>\n{{\"name\": \"{tool}\", \"arguments\": {arguments}}}\n</tool_call>")
}

/// A node whose model writes Hermes tool calls (the default model's weights under a template
/// that knows tools), answering each request with the next of `rounds`.
async fn node(
    dir: &std::path::Path,
    data: Option<&std::path::Path>,
    rounds: Vec<Vec<String>>,
) -> TestNode {
    let model = common::tools_model_with(dir, &[]);
    let data = data.map(std::path::Path::to_path_buf);
    TestNode::start_with(move |c| {
        c.models_dir = model.parent().unwrap().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        if let Some(d) = data {
            c.data_dir = d;
        }
        c.script = Some(hearth_engine::Script {
            rounds,
            ..Default::default()
        });
    })
    .await
}

/// POST to the chat (or a decision) and read its whole event stream.
pub(crate) async fn events(t: &TestNode, path: &str, body: Value) -> Vec<Value> {
    let r = t.post(path, &body).await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{path}: {text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

pub(crate) fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

pub(crate) async fn messages(t: &TestNode, conv: &str) -> Vec<Value> {
    t.get_json(&format!("/api/conversations/{conv}")).await["messages"]
        .as_array()
        .unwrap()
        .clone()
}

pub(crate) async fn add_server(t: &TestNode, spec: Value) {
    let r = t.post("/api/mcp/servers", &spec).await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 201, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_configured_listed_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let t = node(dir.path(), Some(data.path()), vec![]).await;
    add_server(&t, py_server("py")).await;
    // The name is taken now; a bad spec names what is wrong.
    assert_eq!(
        t.post("/api/mcp/servers", &py_server("py")).await.status(),
        409
    );
    let r = t.post("/api/mcp/servers", &json!({"name": "a__b", "transport": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})).await;
    assert_eq!(r.status(), 400);
    let listed = t.get_json("/api/mcp/servers").await;
    assert_eq!(listed["servers"][0]["spec"]["name"], "py", "{listed}");
    assert_eq!(
        listed["servers"][0]["status"]["state"], "stopped",
        "{listed}"
    );
    // Another site's page cannot start it (an `<img>` sends no Origin; browsers say the site).
    for site in ["cross-site", "same-site"] {
        // `same-site`: a page on another port of this machine.
        let r = common::client()
            .get(t.url("/api/mcp/servers/py/tools"))
            .header("Sec-Fetch-Site", site)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{site}");
    }
    let listed = t.get_json("/api/mcp/servers").await;
    assert_eq!(
        listed["servers"][0]["status"]["state"], "stopped",
        "{listed}"
    );
    // Listing its tools starts it.
    let tools = t.get_json("/api/mcp/servers/py/tools").await;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["offered_name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"py__echo") && names.contains(&"py__hang"),
        "{tools}"
    );
    let listed = t.get_json("/api/mcp/servers").await;
    assert_eq!(
        listed["servers"][0]["status"]["state"], "running",
        "{listed}"
    );
    // A tool switched off is listed as off.
    let mut spec = listed["servers"][0]["spec"].clone();
    spec["disabled_tools"] = json!(["crash"]);
    let r = common::client()
        .put(t.url("/api/mcp/servers/py"))
        .json(&spec)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let tools = t.get_json("/api/mcp/servers/py/tools").await;
    let crash = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "crash")
        .unwrap()
        .clone();
    assert_eq!(crash["enabled"], false, "{crash}");
    // The mcpServers JSON of Claude Desktop, LM Studio and Jan.
    let import = json!({"mcpServers": {
        "py": {"command": "python3"},
        "everything": {"command": common::process::repo_root().join("missing").to_string_lossy(), "args": [],
            "env": {"TOKEN": "s3cret-value"}}
    }});
    let r = t
        .post("/api/mcp/import", &json!({"json": import.to_string()}))
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["added"], json!(["everything"]), "{v}");
    assert_eq!(v["skipped"][0]["name"], "py", "{v}");
    t.stop().await;
    // Env and header values are kept apart from hearth.db (a 0600 file here, the keyring
    // where one answers).
    for file in ["hearth.db", "hearth.db-wal"] {
        let bytes = std::fs::read(data.path().join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(12).any(|w| w == b"s3cret-value"),
            "{file} holds a secret"
        );
    }
    let kept = || std::fs::read_dir(data.path().join("secrets")).map_or(0, |d| d.count());
    assert_eq!(kept(), 1);

    // Kept in hearth.db: the next start has both, with the tool still off.
    let t = node(dir.path(), Some(data.path()), vec![]).await;
    let listed = t.get_json("/api/mcp/servers").await;
    let servers = listed["servers"].as_array().unwrap();
    let names: Vec<&str> = servers
        .iter()
        .map(|s| s["spec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["everything", "py"], "by name: {listed}");
    assert_eq!(
        servers[1]["spec"]["disabled_tools"],
        json!(["crash"]),
        "{listed}"
    );
    assert_eq!(
        servers[0]["spec"]["transport"]["env"]["TOKEN"], "s3cret-value",
        "the value comes back: {listed}"
    );
    // Sent back without its value (as a `manage` key is shown it), the value kept stays.
    let mut bare = servers[0]["spec"].clone();
    bare["transport"]["env"]["TOKEN"] = json!("");
    bare["call_timeout_ms"] = json!(30000);
    let r = common::client()
        .put(t.url("/api/mcp/servers/everything"))
        .json(&bare)
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["spec"]["transport"]["env"]["TOKEN"], "s3cret-value",
        "{v}"
    );
    assert_eq!(v["spec"]["call_timeout_ms"], 30000, "{v}");
    let r = common::client()
        .delete(t.url("/api/mcp/servers/everything"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let listed = t.get_json("/api/mcp/servers").await;
    assert_eq!(listed["servers"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(kept(), 0, "a removed server's secrets go");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_consent_runs_and_the_loop_answers_with_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let rounds = vec![
        vec![call("py__echo", json!({"message": "hello from the model"}))],
        vec!["The".into(), " tool".into(), " answered.".into()],
        vec![call("py__echo", json!({"message": "again"}))],
        vec!["Denied,".into(), " fine.".into()],
    ];
    let t = node(dir.path(), None, rounds).await;
    add_server(&t, py_server("py")).await;
    let conv = t.new_conversation("tools").await;
    let path = format!("/api/conversations/{conv}/chat");
    let first = events(&t, &path, json!({"content": "Say hello through the tool"})).await;
    let calls = of_type(&first, "tool_call");
    assert_eq!(calls.len(), 1, "{first:?}");
    let c = &calls[0]["call"];
    assert_eq!(
        (&c["server"], &c["tool"], &c["state"], &c["arguments"]),
        (
            &json!("py"),
            &json!("echo"),
            &json!("pending"),
            &json!({"message": "hello from the model"})
        ),
        "{c}"
    );
    let consent = of_type(&first, "consent");
    assert_eq!(consent.len(), 1, "{first:?}");
    let id = c["id"].as_str().unwrap().to_owned();
    // The call waits: nothing ran, and a reload shows it waiting.
    let stored = messages(&t, &conv).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[1]["tool_calls"][0]["state"], "pending");

    let decided = events(
        &t,
        &format!("/api/conversations/{conv}/tool_calls/{id}"),
        json!({"decision": "once"}),
    )
    .await;
    let updates = of_type(&decided, "tool_update");
    let done = updates
        .iter()
        .find(|u| u["call"]["state"] == "done")
        .unwrap_or_else(|| panic!("the call did not run: {decided:?}"));
    assert_eq!(done["call"]["consent"], "once");
    let text = done["call"]["outcome"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("hello from the model"), "{text}");
    let last = of_type(&decided, "done");
    assert_eq!(
        last.last().unwrap()["message"]["content"],
        "The tool answered.",
        "{decided:?}"
    );
    // Deciding again is refused: the call does not wait any more.
    let r = t
        .post(
            &format!("/api/conversations/{conv}/tool_calls/{id}"),
            &json!({"decision": "once"}),
        )
        .await;
    assert_eq!(r.status(), 409);

    // Denied with a reason: the call never runs, and the loop goes on.
    let second = events(&t, &path, json!({"content": "Again"})).await;
    let id = of_type(&second, "tool_call")[0]["call"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decided = events(
        &t,
        &format!("/api/conversations/{conv}/tool_calls/{id}"),
        json!({"decision": "deny", "reason": "not now"}),
    )
    .await;
    let denied = of_type(&decided, "tool_update")[0]["call"].clone();
    assert_eq!(
        (&denied["state"], &denied["reason"]),
        (&json!("denied"), &json!("not now")),
        "{denied}"
    );
    assert!(denied["outcome"].is_null());
    let stored = messages(&t, &conv).await;
    let roles: Vec<&str> = stored.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "assistant",
            "user",
            "assistant",
            "assistant"
        ],
        "{stored:?}"
    );
    assert_eq!(stored[5]["content"], "Denied, fine.");
    // Regenerating answers the last user message again from the start: the loop's answers go.
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_for_the_chat_runs_the_next_calls_and_the_step_limit_ends_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    // A model that calls the tool in every answer.
    let rounds = vec![vec![call("py__echo", json!({"message": "loop"}))]];
    let t = node(dir.path(), None, rounds).await;
    add_server(&t, py_server("py")).await;
    let conv = t.new_conversation("loop").await;
    let r = common::client()
        .patch(t.url(&format!("/api/conversations/{conv}")))
        .json(&json!({"settings": {"tool_steps": 3}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = common::client()
        .patch(t.url(&format!("/api/conversations/{conv}")))
        .json(&json!({"settings": {"tool_steps": 0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "tool_steps 0 is refused");
    let first = events(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": "Go"}),
    )
    .await;
    let id = of_type(&first, "tool_call")[0]["call"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let rest = events(
        &t,
        &format!("/api/conversations/{conv}/tool_calls/{id}"),
        json!({"decision": "chat"}),
    )
    .await;
    // Allowed for the chat: the next answers' calls run without asking, up to 3 answers with
    // calls; the 4th answer's call is skipped and the chat says why.
    assert!(of_type(&rest, "consent").is_empty(), "{rest:?}");
    let auto: Vec<_> = of_type(&rest, "tool_call")
        .into_iter()
        .map(|e| e["call"]["state"].clone())
        .collect();
    assert_eq!(
        auto,
        [json!("running"), json!("running"), json!("skipped")],
        "{rest:?}"
    );
    let notice = of_type(&rest, "notice");
    assert!(
        notice[0]["text"]
            .as_str()
            .unwrap()
            .contains("step limit (3 answers"),
        "{notice:?}"
    );
    let stored = messages(&t, &conv).await;
    assert_eq!(stored.len(), 5, "user and four answers: {stored:?}");
    let states: Vec<_> = stored[1..]
        .iter()
        .map(|m| m["tool_calls"][0]["state"].clone())
        .collect();
    assert_eq!(
        states,
        [
            json!("done"),
            json!("done"),
            json!("done"),
            json!("skipped")
        ]
    );
    // The consent is this conversation's only: another chat asks again.
    let other = t.new_conversation("other").await;
    let first = events(
        &t,
        &format!("/api/conversations/{other}/chat"),
        json!({"content": "Go"}),
    )
    .await;
    assert_eq!(of_type(&first, "tool_call")[0]["call"]["state"], "pending");
    // Regenerate answers the last user message again: the whole loop's answers go.
    let again = events(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"regenerate": true}),
    )
    .await;
    assert!(!of_type(&again, "tool_call").is_empty(), "{again:?}");
    let stored = messages(&t, &conv).await;
    assert!(
        stored.len() <= 5,
        "the old loop's answers are gone: {stored:?}"
    );
    assert_eq!(stored.iter().filter(|m| m["role"] == "user").count(), 1);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_call_cancels_it_and_ends_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let rounds = vec![
        vec![call("py__hang", json!({"seconds": 600}))],
        vec!["never".into()],
    ];
    let t = node(dir.path(), None, rounds).await;
    add_server(&t, py_server("py")).await;
    let always = t.get_json("/api/mcp/allowed").await;
    assert_eq!(always["always"], json!([]));
    let conv = t.new_conversation("hang").await;
    let first = events(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": "Wait"}),
    )
    .await;
    let call_event = of_type(&first, "tool_call")[0].clone();
    let id = call_event["call"]["id"].as_str().unwrap().to_owned();
    let message = call_event["message_id"].as_str().unwrap().to_owned();
    let path = format!("/api/conversations/{conv}/tool_calls/{id}");
    let decided = {
        let t_url = t.url(&path);
        tokio::spawn(async move {
            common::client()
                .post(t_url)
                .json(&json!({"decision": "always"}))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        })
    };
    // The call runs (the server logs it); stop the answer.
    let started = std::time::Instant::now();
    loop {
        let log = t.get_json("/api/mcp/servers/py/log").await;
        if log["lines"].to_string().contains("hang") {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "the call never started: {log}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let r = t
        .post(&format!("/api/messages/{message}/stop"), &json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let text = tokio::time::timeout(std::time::Duration::from_secs(30), decided)
        .await
        .expect("the stream ends after the stop")
        .unwrap();
    assert!(text.contains("\"cancelled\""), "{text}");
    assert!(!text.contains("never"), "the loop went on: {text}");
    let stored = messages(&t, &conv).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[1]["tool_calls"][0]["state"], "cancelled");
    // Always allowed now, for good; until the server is removed, which forgets its consent.
    let always = t.get_json("/api/mcp/allowed").await;
    assert_eq!(always["always"], json!(["py__hang"]));
    let r = common::client()
        .delete(t.url("/api/mcp/servers/py"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let always = t.get_json("/api/mcp/allowed").await;
    assert_eq!(always["always"], json!([]), "{always}");
    t.stop().await;
}

/// `hearth-node mcp ARGS --data-dir DATA`: whether it succeeded, its stdout and its stderr.
fn cli(data: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth-node"))
        .arg("mcp")
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_works_on_the_data_dir_and_through_a_running_node() {
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let python = venv_python().to_string_lossy().into_owned();
    let server = repo_root()
        .join("tests/mcp/py_server.py")
        .to_string_lossy()
        .into_owned();
    // No node on the data dir: hearth.db itself.
    let (ok, out, err) = cli(d, &["add", "py", "--", &python, &server]);
    assert!(ok && out.contains("added py"), "{out}{err}");
    assert!(err.contains("with your rights"), "{err}");
    let (ok, out, err) = cli(
        d,
        &[
            "add",
            "web",
            "--url",
            "http://127.0.0.1:9/mcp",
            "--header",
            "Authorization: Bearer x",
        ],
    );
    assert!(ok, "{out}{err}");
    let (ok, _, err) = cli(d, &["add", "py", "--", "true"]);
    assert!(!ok && err.contains("exists"), "{err}");
    let (ok, _, err) = cli(d, &["add", "bad__name", "--", "true"]);
    assert!(!ok, "{err}");
    let (ok, out, err) = cli(d, &["list"]);
    assert!(
        ok && out.contains("py\ton\t") && out.contains("web\ton\thttp://127.0.0.1:9/mcp"),
        "{out}{err}"
    );
    // `tools` starts the server for it.
    let (ok, out, err) = cli(d, &["tools", "py"]);
    assert!(ok && out.contains("py__echo\t"), "{out}{err}");

    // A node on the data dir: every command goes through it, and it sees the change at once.
    let node = common::process::NodeProcess::start_without_model(d, &[]);
    let listed = common::get_json_at(format!("{}/api/mcp/servers", node.url)).await;
    assert_eq!(listed["servers"].as_array().unwrap().len(), 2, "{listed}");
    let (ok, out, err) = cli(d, &["remove", "web"]);
    assert!(ok && out.contains("removed web"), "{out}{err}");
    let (ok, out, err) = cli(d, &["tools", "py"]);
    assert!(ok && out.contains("py__echo\t"), "{out}{err}");
    let (ok, out, err) = cli(d, &["list"]);
    assert!(
        ok && out.contains("py\ton\trunning\t"),
        "the node's own state: {out}{err}"
    );
    let file = d.join("mcp.json");
    std::fs::write(
        &file,
        r#"{"mcpServers": {"other": {"command": "true"}, "py": {"command": "true"}}}"#,
    )
    .unwrap();
    let (ok, out, err) = cli(d, &["import", &file.to_string_lossy()]);
    assert!(
        ok && out.contains("added other") && out.contains("skipped py"),
        "{out}{err}"
    );
    let listed = common::get_json_at(format!("{}/api/mcp/servers", node.url)).await;
    let names: Vec<&str> = listed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["spec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["other", "py"], "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_sent_as_soon_as_consent_is_asked_finds_the_conversation_free() {
    let dir = tempfile::tempdir().unwrap();
    let rounds = vec![
        vec![call("py__echo", json!({"message": "quick"}))],
        vec!["Done.".into()],
    ];
    let t = node(dir.path(), None, rounds).await;
    add_server(&t, py_server("py")).await;
    let conv = t.new_conversation("quick").await;
    let mut rx = common::sse::stream_sse(
        t.url(&format!("/api/conversations/{conv}/chat")),
        json!({"content": "Go"}),
    );
    // Answered the moment the event arrives, before the stream has ended.
    let consent = loop {
        let data = tokio::time::timeout(std::time::Duration::from_secs(60), rx.recv())
            .await
            .expect("events come")
            .expect("a consent event");
        let v: Value = serde_json::from_str(&data).unwrap();
        if v["type"] == "consent" {
            break v;
        }
    };
    let id = consent["calls"][0].as_str().unwrap();
    let r = t
        .post(
            &format!("/api/conversations/{conv}/tool_calls/{id}"),
            &json!({"decision": "once"}),
        )
        .await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("Done."), "{text}");
    t.stop().await;
}
