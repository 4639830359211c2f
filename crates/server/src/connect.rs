//! The settings that point a coding agent (Claude Code, Codex, Qwen Code, opencode, Continue) at
//! a Hearth node, as text to paste (as Ollama's `ollama launch` sets them up), and how large each
//! agent's own prompt is. Pure text: `hearth-node connect` prints it, `GET /api/agents` shows it.

use std::fmt;
use std::str::FromStr;

/// Claude Code's own prompt (system prompt and tool list) in tokens: about 20,000 (its default
/// prompt in print mode, 2.1).
pub const CLAUDE_CODE_PROMPT_TOKENS: u32 = 20_000;
/// Codex's own prompt in tokens: about 8,300, measured against Hearth (0.169).
pub const CODEX_PROMPT_TOKENS: u32 = 8_300;
/// Qwen Code's own prompt in tokens: about 14,300, measured against Hearth (0.24).
pub const QWEN_CODE_PROMPT_TOKENS: u32 = 14_300;
/// opencode's own prompt in tokens: about 10,000 with its default tools. Not measured here: the
/// figure its users report from llama.cpp's and Ollama's logs (opencode issues 729 and 8984).
pub const OPENCODE_PROMPT_TOKENS: u32 = 10_000;
/// Continue's own prompt in tokens in agent mode: about 1,300 (a ~350-token system message and
/// ~900 tokens of tools, as its own context error counts them; continue issue 5753). Not
/// measured here.
pub const CONTINUE_PROMPT_TOKENS: u32 = 1_300;

/// The key shown where none was given: any key passes a node that is not shared on the LAN.
pub const ANY_KEY: &str = "hearth";

/// A coding agent Hearth can give settings for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agent {
    Claude,
    Codex,
    Qwen,
    Opencode,
    Continue,
}

/// A name that is not one of [`Agent::ALL`]'s ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown agent {0:?}: one of claude, codex, qwen, opencode, continue")]
pub struct UnknownAgent(pub String);

impl Agent {
    /// Every agent, in the order they are shown.
    pub const ALL: [Agent; 5] = [
        Agent::Claude,
        Agent::Codex,
        Agent::Qwen,
        Agent::Opencode,
        Agent::Continue,
    ];

    /// Its id, as `hearth-node connect` takes it and `GET /api/agents` names it.
    pub fn id(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Qwen => "qwen",
            Agent::Opencode => "opencode",
            Agent::Continue => "continue",
        }
    }

    /// Its name, for people.
    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "Claude Code",
            Agent::Codex => "Codex",
            Agent::Qwen => "Qwen Code",
            Agent::Opencode => "opencode",
            Agent::Continue => "Continue",
        }
    }

    /// About how many tokens its own prompt (system prompt and tools) takes before the user's
    /// first word: a model whose context is smaller cannot hold it.
    pub fn prompt_tokens(self) -> u32 {
        match self {
            Agent::Claude => CLAUDE_CODE_PROMPT_TOKENS,
            Agent::Codex => CODEX_PROMPT_TOKENS,
            Agent::Qwen => QWEN_CODE_PROMPT_TOKENS,
            Agent::Opencode => OPENCODE_PROMPT_TOKENS,
            Agent::Continue => CONTINUE_PROMPT_TOKENS,
        }
    }

    /// Whether a model with `context` tokens is too small for its own prompt.
    pub fn too_small(self, context: u32) -> bool {
        context < self.prompt_tokens()
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Agent {
    type Err = UnknownAgent;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Agent::ALL
            .into_iter()
            .find(|a| a.id() == s)
            .ok_or_else(|| UnknownAgent(s.to_owned()))
    }
}

/// `agent`'s settings for the node at `server` (no trailing slash), with `model` and `key`.
pub fn settings(agent: Agent, server: &str, model: &str, key: &str) -> String {
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
        for agent in Agent::ALL {
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

    #[test]
    fn ids_name_their_agents_and_prompts_are_compared_with_the_context() {
        for agent in Agent::ALL {
            assert_eq!(agent.id().parse::<Agent>(), Ok(agent));
        }
        assert_eq!(
            "gemini".parse::<Agent>(),
            Err(UnknownAgent("gemini".into()))
        );
        assert!(Agent::Qwen.too_small(8_192));
        assert!(!Agent::Qwen.too_small(32_768));
        assert!(Agent::Codex.too_small(8_192));
        assert!(!Agent::Codex.too_small(8_300));
        assert!(Agent::Claude.too_small(16_384));
    }
}
