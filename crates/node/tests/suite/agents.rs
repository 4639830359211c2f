//! The real coding agents, pinned and installed by `scripts/agents.sh`, each completing one
//! print-mode turn against a node on the default model: Claude Code through `/v1/messages`,
//! Codex through `/v1/responses`, Qwen Code through `/v1/chat/completions` (with its default
//! `max_tokens` of 32000, a ceiling here) and, in its other modes, through the other two.
//! Each runs in a throwaway home with its telemetry off; the node is its only server. Their
//! own prompts are cut to fit the default model's context (a short system prompt, no tools).

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::process::{repo_root, run_peer_to_end};
use common::{TestNode, MODEL_ID};

const PROMPT: &str = "Say hi";
const SYSTEM: &str = "You are terse.";

/// Where `scripts/agents.sh` keeps the agents.
fn agents_dir() -> PathBuf {
    let out = Command::new(repo_root().join("scripts/agents.sh"))
        .arg("--dir")
        .output()
        .expect("scripts/agents.sh runs");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// An agent's program and a fresh home for it (inside the agents' folder: Codex will not set
/// up its helpers under /tmp).
fn agent(name: &str) -> (PathBuf, tempfile::TempDir) {
    let dir = agents_dir();
    let program = dir.join(name);
    assert!(
        program.exists(),
        "{} is missing: run scripts/setup.sh (it installs the agents)",
        program.display()
    );
    let home = tempfile::Builder::new()
        .prefix("home-")
        .tempdir_in(&dir)
        .expect("a home for the agent");
    (program, home)
}

fn command(program: &PathBuf, home: &tempfile::TempDir) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(home.path())
        .stdin(Stdio::null())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "CODEX_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Run the agent and check the node answered it: requests finished on the node and text on
/// the agent's output. A sampled answer of the tiny model sometimes loops to the output limit
/// (its own, or the end of the context when it sets none); an agent that then says so in its
/// own words (`cap`: Claude Code's "exceeded the N output token maximum", Codex's "Incomplete
/// response returned, reason: max_output_tokens") has read the whole stream to its end.
async fn turn(t: &TestNode, cmd: Command, what: &'static str, cap: Option<&str>) -> String {
    let before = t.status().await["requests_finished"].as_u64().unwrap();
    let (status, stdout, stderr) = run_peer_to_end(cmd, what).await;
    let after = t.status().await["requests_finished"].as_u64().unwrap();
    assert!(after > before, "{what} made no request: {stdout}\n{stderr}");
    let ok = status.is_some_and(|s| s.success());
    let capped = cap.is_some_and(|c| status.is_some() && format!("{stdout}{stderr}").contains(c));
    assert!(
        ok || capped,
        "{what} failed ({status:?}):\n{stdout}\n{stderr}"
    );
    if capped && !ok {
        eprintln!("{what} ran to the output limit and said so");
        return stdout;
    }
    assert!(
        !stdout.trim().is_empty(),
        "{what} printed no answer:\n{stderr}"
    );
    // The agents print the API's error as their answer in some versions: not an answer.
    let lower = stdout.to_lowercase();
    assert!(
        !lower.contains("api error") && !lower.contains("error:"),
        "{what} printed an error: {stdout}\n{stderr}"
    );
    eprintln!("{what} answered: {}", stdout.trim());
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_completes_a_turn_through_the_messages_api() {
    let t = TestNode::start(1).await;
    let (claude, home) = agent("claude");
    let mut cmd = command(&claude, &home);
    cmd.env("ANTHROPIC_BASE_URL", &t.base)
        .env("ANTHROPIC_API_KEY", "hearth")
        .env("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "256")
        .env("CLAUDE_CODE_ATTRIBUTION_HEADER", "0")
        .args([
            "-p",
            PROMPT,
            "--model",
            MODEL_ID,
            "--bare",
            "--system-prompt",
            SYSTEM,
            "--tools",
            "",
            "--max-turns",
            "1",
        ]);
    turn(&t, cmd, "Claude Code", Some("output token maximum")).await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_completes_a_turn_through_the_responses_api() {
    // Codex always offers a tool (request_user_input), with parallel calls and no output limit.
    // Under the default model's own template (no tools: the generic JSON format) the tiny model
    // calls it about half the time and then repeats calls until the context ends. The same
    // weights under a template that knows tools (as the agents' real models have) answer in
    // text, as a user's model would.
    let models = tempfile::tempdir().unwrap();
    let model = common::tools_model_with(models.path(), &[]);
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        // Room for Codex's cut-down prompt (~800 tokens) and an answer; a loop ends sooner.
        c.ctx = Some(2048);
        c.models_dir = models.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
    })
    .await;
    let model_id = "SmolLM2-tools";
    let (codex, home) = agent("codex");
    let codex_home = home.path().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let instructions = home.path().join("instructions.md");
    std::fs::write(&instructions, SYSTEM).unwrap();
    // A provider for the node, and Codex's own prompt cut down to fit a 4k context: its
    // instructions replaced, its environment, permission and tool sections off.
    let config = format!(
        r#"model = "{model_id}"
model_provider = "hearth"
model_instructions_file = "{instructions}"
include_permissions_instructions = false
include_apps_instructions = false
include_environment_context = false
web_search = "disabled"
model_reasoning_summary = "none"
model_context_window = 2048
project_doc_max_bytes = 0

[skills.bundled]
enabled = false

[features]
goals = false
image_generation = false
shell_tool = false
unified_exec = false
view_image = false
apps = false
plugins = false
tool_suggest = false
skill_search = false
sleep_tool = false
browser_use = false
computer_use = false
hooks = false
memories = false

[agents]
enabled = false

[analytics]
enabled = false

[model_providers.hearth]
name = "Hearth"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "HEARTH_API_KEY"
"#,
        instructions = instructions.display(),
        base = t.base,
    );
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    let mut cmd = command(&codex, &home);
    cmd.env("CODEX_HOME", &codex_home)
        .env("HEARTH_API_KEY", "hearth")
        .args(["exec", "--strict-config", "--skip-git-repo-check", PROMPT]);
    turn(
        &t,
        cmd,
        "Codex",
        Some("Incomplete response returned, reason: max_output_tokens"),
    )
    .await;
    t.stop().await;
}

/// Qwen Code's settings: no telemetry.
fn qwen(home: &tempfile::TempDir) -> PathBuf {
    let settings = home.path().join(".qwen");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(
        settings.join("settings.json"),
        r#"{"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}"#,
    )
    .unwrap();
    agents_dir().join("qwen")
}

/// Qwen Code with a short prompt and its built-in tools left out, in `auth_type`'s API.
fn qwen_command(t: &TestNode, home: &tempfile::TempDir, auth_type: &str) -> Command {
    let program = qwen(home);
    let mut cmd = command(&program, home);
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", t.base))
        .env("OPENAI_API_KEY", "hearth")
        .env("OPENAI_MODEL", MODEL_ID)
        .env("ANTHROPIC_BASE_URL", &t.base)
        .env("ANTHROPIC_API_KEY", "hearth")
        .env("ANTHROPIC_MODEL", MODEL_ID)
        .args([
            "--bare",
            "--system-prompt",
            SYSTEM,
            "--exclude-tools",
            "agent,get_goal,glob,grep_search,list_agents,read_file,skill,tool_call,tool_search,update_goal,run_shell_command,write_file,edit",
            "--max-session-turns",
            "1",
            "--auth-type",
            auth_type,
            "-p",
            PROMPT,
        ]);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_code_completes_a_turn_on_each_api() {
    let t = TestNode::start(1).await;
    let (_, home) = agent("qwen");
    // The chat door with Qwen Code's default max_tokens (32000): a ceiling, not an error.
    turn(
        &t,
        qwen_command(&t, &home, "openai"),
        "Qwen Code (chat completions)",
        None,
    )
    .await;
    let mut cmd = qwen_command(&t, &home, "openai-responses");
    cmd.env("QWEN_CODE_MAX_OUTPUT_TOKENS", "64");
    turn(&t, cmd, "Qwen Code (responses)", None).await;
    let mut cmd = qwen_command(&t, &home, "anthropic");
    cmd.env("QWEN_CODE_MAX_OUTPUT_TOKENS", "64");
    turn(&t, cmd, "Qwen Code (messages)", None).await;
    t.stop().await;
}

/// `hearth-node connect codex` asks the node for its model and prints a provider entry that
/// points at it; without a model and with no node it says what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_prints_an_agents_settings_for_the_nodes_model() {
    let t = TestNode::start(1).await;
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_hearth-node"))
                .arg("connect")
                .args(args)
                .env_remove("HEARTH_SERVER")
                .env_remove("HEARTH_API_KEY")
                .output()
                .unwrap()
        })
    };
    let out = run(vec!["codex".into(), "--server".into(), t.base.clone()])
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("model = \"{MODEL_ID}\"")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("base_url = \"{}/v1\"", t.base)),
        "{stdout}"
    );
    assert!(stdout.contains("wire_api = \"responses\""), "{stdout}");
    let out = run(vec!["claude".into(), "--server".into(), t.base.clone()])
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("ANTHROPIC_BASE_URL={}", t.base)),
        "{stdout}"
    );
    let base = t.base.clone();
    t.stop().await;
    // The node is gone: a clear error, no settings.
    let out = run(vec!["qwen".into(), "--server".into(), base])
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is the node running"), "{stderr}");
}

/// Settings' "Coding agents": `GET /api/agents` gives each agent what `hearth-node connect`
/// prints for this node (the address the caller reached it at, the focus model), its own
/// prompt's size and whether the model's context is smaller; once the node is shared, a
/// placeholder stands where the key goes (the page fills in a key it made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_agents_shows_what_connect_prints_and_warns_of_a_small_context() {
    // 2048 tokens: more than Continue's prompt, less than the others'.
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.ctx = Some(2048);
    })
    .await;
    let v = t.get_json("/api/agents").await;
    let context = t.status().await["model"]["context"].as_u64().unwrap();
    assert!((1_300..8_300).contains(&context), "{context}");
    assert_eq!(v["url"], t.base, "{v}");
    assert_eq!(v["model"], MODEL_ID, "{v}");
    assert_eq!(v["model_context"], context, "{v}");
    assert_eq!(v["shared"], false, "{v}");
    assert!(v["key_placeholder"].is_null(), "{v}");
    let agents = v["agents"].as_array().unwrap();
    let ids: Vec<&str> = agents.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["claude", "codex", "qwen", "opencode", "continue"]);
    let of = |id: &str| agents.iter().find(|a| a["id"] == id).unwrap().clone();
    for a in agents {
        let text = a["text"].as_str().unwrap();
        assert!(text.contains(MODEL_ID), "{a}");
        assert!(text.contains(&t.base), "{a}");
        assert_eq!(a["model_context"], context, "{a}");
    }
    let qwen = of("qwen");
    assert_eq!(qwen["name"], "Qwen Code");
    assert_eq!(qwen["prompt_tokens"], 14_300);
    assert_eq!(qwen["too_small"], true, "{qwen}");
    assert_eq!(of("codex")["too_small"], true);
    assert_eq!(of("claude")["too_small"], true);
    assert_eq!(of("continue")["too_small"], false, "{}", of("continue"));
    // The very text `hearth-node connect` prints.
    let (base, model) = (t.base.clone(), MODEL_ID.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hearth-node"))
            .args(["connect", "codex", "--server", &base, "--model", &model])
            .env_remove("HEARTH_SERVER")
            .env_remove("HEARTH_API_KEY")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        of("codex")["text"].as_str().unwrap()
    );
    // A model this node does not serve.
    let r = common::client()
        .get(t.url("/api/agents?model=no-such-model"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Shared on the LAN: the key is a placeholder for one the owner makes, never a made-up one.
    t.node().set_exposed(true).await.unwrap();
    let v = t.get_json("/api/agents").await;
    assert_eq!(v["shared"], true, "{v}");
    assert_eq!(v["key_placeholder"], "YOUR_HEARTH_KEY", "{v}");
    let claude = v["agents"][0]["text"].as_str().unwrap();
    assert!(
        claude.contains("export ANTHROPIC_API_KEY=YOUR_HEARTH_KEY\n"),
        "{claude}"
    );
    t.stop().await;
}
