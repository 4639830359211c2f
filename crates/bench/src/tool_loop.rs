//! The chat's MCP tool loop: five steps against `server-everything`'s `echo` (npm, as
//! `scripts/mcp-servers.sh` installs it), the real default model's weights under a template
//! that knows tools (`tests/tools_model.py`) made to call it at each step (`tool_choice:
//! required`). Reported: what each step prefilled against the prompt it read (the rest came
//! from the cache), and the loop's wall time less the model's and the server's own time:
//! what the node adds per step.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::client::{json_ok, new_conversation, repo_root};
use crate::node::NodeProc;
use crate::report::Figure;

/// Answers with a call in one loop (the step limit): the 5-step loop.
const STEPS: usize = 5;

/// The server-everything launcher `scripts/mcp-servers.sh` installed, when it did.
fn everything() -> Option<PathBuf> {
    let out = Command::new(repo_root().join("scripts/mcp-servers.sh"))
        .arg("--dir")
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let bin = PathBuf::from(dir.trim()).join("server-everything");
    bin.exists().then_some(bin)
}

/// The default model's weights under the tools template, written into `dir`.
fn tools_model(model: &Path, dir: &Path) -> Result<PathBuf> {
    let out = dir.join("SmolLM2-tools.gguf");
    let status = Command::new(repo_root().join(".venv/bin/python"))
        .arg(repo_root().join("tests/tools_model.py"))
        .arg(model)
        .arg(&out)
        .stderr(std::process::Stdio::null())
        .status()
        .context("running tests/tools_model.py")?;
    if !status.success() {
        bail!("tests/tools_model.py failed");
    }
    Ok(out)
}

/// The events of a chat stream, to its end.
async fn events(http: &reqwest::Client, url: String, body: Value) -> Result<Vec<Value>> {
    let r = http
        .post(url)
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    let mut all = Vec::new();
    crate::client::each_sse_object(r, |v| all.push(v.clone())).await?;
    Ok(all)
}

/// One loop's figures: per step, the prompt and what was prefilled of it; per loop, the node's
/// own time per step (ms) and the model's and the server's, from the decision to the end.
struct Loop {
    prompts: Vec<f64>,
    prefilled: Vec<f64>,
    node_ms: f64,
    model_ms: f64,
    server_ms: f64,
}

async fn one_loop(http: &reqwest::Client, base: &str) -> Result<Loop> {
    let conv = new_conversation(
        http,
        base,
        json!({"tool_choice": "required", "tool_steps": STEPS, "temperature": 0}),
    )
    .await?;
    let first = events(
        http,
        format!("{base}/api/conversations/{conv}/chat"),
        json!({"content": "Echo the word hello with the echo tool."}),
    )
    .await?;
    let id = first
        .iter()
        .find(|e| e["type"] == "tool_call")
        .and_then(|e| e["call"]["id"].as_str())
        .with_context(|| format!("the model made no call: {first:?}"))?
        .to_owned();
    // From the user's consent (for the chat) the loop runs on its own to the step limit.
    let sent = Instant::now();
    let rest = events(
        http,
        format!("{base}/api/conversations/{conv}/tool_calls/{id}"),
        json!({"decision": "chat"}),
    )
    .await?;
    let wall_ms = sent.elapsed().as_secs_f64() * 1000.0;
    if !rest.iter().any(|e| e["type"] == "notice") {
        bail!("the loop did not reach its step limit: {rest:?}");
    }
    let stored = json_ok(http.get(format!("{base}/api/conversations/{conv}"))).await?;
    let answers: Vec<&Value> = stored["messages"]
        .as_array()
        .context("no messages")?
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    if answers.len() != STEPS + 1 {
        bail!("{} answers, not {}", answers.len(), STEPS + 1);
    }
    let num = |v: &Value| v.as_f64().unwrap_or(0.0);
    let mut l = Loop {
        prompts: Vec::new(),
        prefilled: Vec::new(),
        node_ms: 0.0,
        model_ms: 0.0,
        server_ms: 0.0,
    };
    // The calls of the first five answers ran after the decision, and answers 2 to 6 came.
    for a in &answers[..STEPS] {
        let call = &a["tool_calls"][0];
        if call["state"] != "done" {
            bail!("a call did not run: {call}");
        }
        l.server_ms += num(&call["took_ms"]);
    }
    for a in &answers[1..] {
        let stats = &a["stats"];
        l.model_ms += num(&stats["total_ms"]);
        let prompt = num(&stats["prompt_tokens"]);
        l.prompts.push(prompt);
        l.prefilled.push(prompt - num(&stats["cached_tokens"]));
    }
    l.node_ms = (wall_ms - l.model_ms - l.server_ms) / STEPS as f64;
    l.model_ms /= STEPS as f64;
    l.server_ms /= STEPS as f64;
    Ok(l)
}

/// The loop's rows; none (and a line saying why) when the Python venv or server-everything is
/// not installed (`make bench` runs setup, which installs both).
pub(crate) async fn figures(
    model: &Path,
    node_bin: &Path,
    threads: i32,
    quick: bool,
) -> Result<Vec<Figure>> {
    if !repo_root().join(".venv/bin/python").exists() {
        eprintln!("the Python venv is not set up (scripts/setup.sh): no tool-loop rows");
        return Ok(Vec::new());
    }
    let Some(server) = everything() else {
        eprintln!("server-everything is not installed (scripts/mcp-servers.sh): no tool-loop rows");
        return Ok(Vec::new());
    };
    let dir = tempfile::tempdir()?;
    let model = tools_model(model, dir.path())?;
    let node = NodeProc::start(node_bin, &model, &["--threads".into(), threads.to_string()])?;
    let base = node.base();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()?;
    json_ok(
        http.post(format!("{base}/api/mcp/servers"))
            .json(&json!({"name": "everything", "transport": {"type": "stdio",
                "command": server.to_string_lossy()}})),
    )
    .await?;
    // Only `echo` is offered: every other tool of the server is switched off.
    let tools = json_ok(http.get(format!("{base}/api/mcp/servers/everything/tools"))).await?;
    let others: Vec<&str> = tools["tools"]
        .as_array()
        .context("no tools listed")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| *n != "echo")
        .collect();
    let mut spec =
        json_ok(http.get(format!("{base}/api/mcp/servers"))).await?["servers"][0]["spec"].clone();
    spec["disabled_tools"] = json!(others);
    json_ok(
        http.put(format!("{base}/api/mcp/servers/everything"))
            .json(&spec),
    )
    .await?;

    let loops = if quick { 1 } else { 5 };
    let mut all = Vec::new();
    for _ in 0..loops {
        all.push(one_loop(&http, &base).await?);
    }
    let prompts: Vec<f64> = all.iter().flat_map(|l| l.prompts.clone()).collect();
    let prefilled: Vec<f64> = all.iter().flat_map(|l| l.prefilled.clone()).collect();
    let share: Vec<f64> = prefilled.iter().zip(&prompts).map(|(p, t)| p / t).collect();
    Ok(vec![
        Figure::new("tool loop, 5 steps: prompt per step", "tokens", prompts),
        Figure::new(
            "tool loop, 5 steps: prefilled per step",
            "tokens",
            prefilled,
        ),
        Figure::new("tool loop, 5 steps: prefilled / prompt", "ratio", share).at_most(0.25),
        Figure::new(
            "tool loop, 5 steps: the model's time per step",
            "ms",
            all.iter().map(|l| l.model_ms).collect(),
        ),
        Figure::new(
            "tool loop, 5 steps: the MCP server's time per call",
            "ms",
            all.iter().map(|l| l.server_ms).collect(),
        ),
        Figure::new(
            "tool loop, 5 steps: the node's own time per step",
            "ms",
            all.iter().map(|l| l.node_ms).collect(),
        )
        .at_most(5.0),
        Figure::new(
            "tool loop, 5 steps: the node's own share of a step",
            "ratio",
            all.iter()
                .map(|l| l.node_ms / (l.node_ms + l.model_ms + l.server_ms))
                .collect(),
        ),
    ])
}
