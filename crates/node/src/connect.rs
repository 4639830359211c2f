//! `hearth-node connect AGENT`: the settings that point a coding agent (Claude Code, Codex,
//! Qwen Code, opencode, Continue) at a Hearth node, printed to paste, as Ollama's
//! `ollama launch` sets them up. The model is the one named, else the first the node serves.

use anyhow::{bail, Context};

#[derive(Debug, clap::Args)]
pub(crate) struct ConnectArgs {
    /// Which agent.
    agent: Agent,
    /// The node's address.
    #[arg(long, env = "HEARTH_SERVER", default_value = "http://127.0.0.1:8420")]
    server: String,
    /// The model the agent should use [default: the first the node serves].
    #[arg(long)]
    model: Option<String>,
    /// An API key of the node (needed when it is shared on the LAN: `hearth-node keys create`).
    #[arg(long, env = "HEARTH_API_KEY")]
    key: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Agent {
    Claude,
    Codex,
    Qwen,
    Opencode,
    Continue,
}

/// Print `args.agent`'s settings for the node at `args.server`.
pub(crate) async fn connect(args: ConnectArgs) -> anyhow::Result<()> {
    let server = args.server.trim_end_matches('/').to_owned();
    let model = match args.model {
        Some(m) => m,
        None => first_model(&server, args.key.as_deref()).await?,
    };
    let key_shown = args.key.clone().unwrap_or_else(|| "hearth".into());
    print!("{}", settings(args.agent, &server, &model, &key_shown));
    Ok(())
}

/// The first model `GET /v1/models` lists.
async fn first_model(server: &str, key: Option<&str>) -> anyhow::Result<String> {
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let mut req = http.get(format!("{server}/v1/models"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let list: serde_json::Value = req
        .send()
        .await
        .with_context(|| format!("asking {server} for its models (is the node running?)"))?
        .error_for_status()?
        .json()
        .await?;
    match list["data"][0]["id"].as_str() {
        Some(id) => Ok(id.to_owned()),
        None => bail!("{server} serves no model yet: load one, or name it with --model"),
    }
}

fn settings(agent: Agent, server: &str, model: &str, key: &str) -> String {
    match agent {
        Agent::Claude => format!(
            "# Claude Code speaks Anthropic's Messages API, which Hearth serves at {server}/v1/messages.\n\
             export ANTHROPIC_BASE_URL={server}\n\
             export ANTHROPIC_API_KEY={key}\n\
             export ANTHROPIC_MODEL={model}\n\
             export ANTHROPIC_DEFAULT_HAIKU_MODEL={model}\n\
             export ANTHROPIC_SMALL_FAST_MODEL={model}\n\
             export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n\
             # then: claude   (or claude -p \"...\" --model {model})\n"
        ),
        Agent::Codex => format!(
            "# Codex speaks OpenAI's Responses API, which Hearth serves at {server}/v1/responses.\n\
             # Add to ~/.codex/config.toml:\n\
             model = \"{model}\"\n\
             model_provider = \"hearth\"\n\
             \n\
             [model_providers.hearth]\n\
             name = \"Hearth\"\n\
             base_url = \"{server}/v1\"\n\
             wire_api = \"responses\"\n\
             env_key = \"HEARTH_API_KEY\"\n\
             \n\
             # and in the shell: export HEARTH_API_KEY={key}; then: codex\n"
        ),
        Agent::Qwen => format!(
            "# Qwen Code speaks OpenAI's Chat Completions API ({server}/v1/chat/completions).\n\
             export OPENAI_BASE_URL={server}/v1\n\
             export OPENAI_API_KEY={key}\n\
             export OPENAI_MODEL={model}\n\
             # then: qwen\n"
        ),
        Agent::Opencode => {
            let config = serde_json::json!({
                "$schema": "https://opencode.ai/config.json",
                "provider": {"hearth": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Hearth",
                    "options": {"baseURL": format!("{server}/v1"), "apiKey": key},
                    "models": {model: {"name": model}},
                }},
                "model": format!("hearth/{model}"),
            });
            format!(
                "// opencode: put this in opencode.json (the project) or ~/.config/opencode/opencode.json\n{}\n",
                serde_json::to_string_pretty(&config).unwrap_or_default()
            )
        }
        Agent::Continue => format!(
            "# Continue: add to ~/.continue/config.yaml\n\
             models:\n  - name: Hearth {model}\n    provider: openai\n    model: {model}\n    apiBase: {server}/v1\n    apiKey: {key}\n    roles: [chat, edit, apply]\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_gets_the_server_model_and_key() {
        for agent in [
            Agent::Claude,
            Agent::Codex,
            Agent::Qwen,
            Agent::Opencode,
            Agent::Continue,
        ] {
            let s = settings(agent, "http://10.0.0.5:8420", "Qwen3-8B", "hk_1");
            assert!(s.contains("http://10.0.0.5:8420"), "{agent:?}: {s}");
            assert!(s.contains("Qwen3-8B"), "{agent:?}: {s}");
            assert!(s.contains("hk_1"), "{agent:?}: {s}");
        }
        let codex = settings(Agent::Codex, "http://h:1", "m", "k");
        assert!(codex.contains("wire_api = \"responses\""), "{codex}");
        let opencode = settings(Agent::Opencode, "http://h:1", "m", "k");
        let json: String = opencode.lines().skip(1).collect::<Vec<_>>().join("\n");
        let v: serde_json::Value = serde_json::from_str(&json).expect("opencode.json is JSON");
        assert_eq!(
            v["provider"]["hearth"]["options"]["baseURL"],
            "http://h:1/v1"
        );
    }
}
