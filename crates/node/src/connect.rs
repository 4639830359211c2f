//! `hearth-node connect AGENT`: the settings that point a coding agent (Claude Code, Codex,
//! Qwen Code, opencode, Continue) at a Hearth node, printed to paste, as Ollama's
//! `ollama launch` sets them up. The model is the one named, else the first the node serves.
//! The text itself is `hearth_server::connect`'s, which the Settings page shows too.

use anyhow::{bail, Context};
use hearth_server::connect::{settings, Agent, ANY_KEY};

#[derive(Debug, clap::Args)]
pub(crate) struct ConnectArgs {
    /// Which agent.
    #[arg(value_parser = agent_parser())]
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

/// The agents' ids as clap's possible values (shown in `--help`), parsed into [`Agent`].
fn agent_parser() -> impl clap::builder::TypedValueParser<Value = Agent> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Agent::ALL.map(Agent::id))
        .try_map(|id| id.parse::<Agent>())
}

/// Print `args.agent`'s settings for the node at `args.server`.
pub(crate) async fn connect(args: ConnectArgs) -> anyhow::Result<()> {
    let server = args.server.trim_end_matches('/').to_owned();
    let model = match args.model {
        Some(m) => m,
        None => first_model(&server, args.key.as_deref()).await?,
    };
    let key_shown = args.key.clone().unwrap_or_else(|| ANY_KEY.into());
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
