//! `hearth-node mcp list|add|remove|tools|import`: the chat's MCP servers from the command line.
//! With a node running on the data dir (its lock names its port) every command goes through it
//! (`/api/mcp/*` on loopback, where this machine's owner is), so it sees the change at once;
//! without one, the command holds the data dir's lock and works on `hearth.db` itself (env and
//! header values apart, in the keyring or 0600 files, as the node keeps them), and `tools`
//! starts the server on its own to list them.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap::Subcommand;
use hearth_auth::identity::KeyStorage;
use hearth_auth::secrets::Secrets;
use hearth_base::data_dir::{DataDirLock, LockError};
use hearth_server::mcp_secrets;
use hearth_store::Store;
use hearth_tools::{McpServerSpec, McpServers, McpSettings, McpTransport, DEFAULT_CALL_TIMEOUT};
use serde_json::{json, Value};

#[derive(Debug, clap::Args)]
pub(crate) struct McpArgs {
    #[command(subcommand)]
    action: McpAction,
    /// The node's data dir, as `serve` takes it.
    #[arg(long, env = "HEARTH_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,
    /// Where env and header values are kept without a node running, as `serve` takes it.
    #[arg(long, env = "HEARTH_KEY_STORAGE", value_enum, global = true, default_value_t = KeyStorage::Auto)]
    key_storage: KeyStorage,
}

#[derive(Debug, Subcommand)]
enum McpAction {
    /// The MCP servers the chat may use, and (with a node running) their state.
    List,
    /// Add a server: `add NAME -- COMMAND ARGS...` (started as a child process when a chat needs
    /// it; it runs with your rights), or `add NAME --url URL [--header K:V]...`.
    Add {
        name: String,
        /// The server's URL (MCP's streamable HTTP).
        #[arg(long, conflicts_with_all = ["command", "env", "cwd"])]
        url: Option<String>,
        /// A header sent to a URL server, `NAME:VALUE` (a token, say).
        #[arg(long = "header", value_name = "NAME:VALUE", requires = "url")]
        headers: Vec<String>,
        /// An environment variable for a command server, `NAME=VALUE`.
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// The folder a command server starts in.
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// How long one call may take, in seconds [default: 60].
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Remove a server (stopped, and the consent given to its tools forgotten).
    Remove { name: String },
    /// A server's tools and what they do (the server is started for it if it must be).
    Tools { name: String },
    /// Add the servers of an `mcpServers` JSON file (Claude Desktop's, LM Studio's `mcp.json`,
    /// Jan's); a name kept already is skipped.
    Import { file: PathBuf },
}

pub(crate) async fn mcp(args: McpArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(hearth_base::data_dir::default_data_dir);
    let action = Action::read(args.action)?;
    match DataDirLock::acquire(&data_dir) {
        Ok(lock) => {
            let done = direct(&data_dir, args.key_storage, action).await;
            drop(lock);
            done
        }
        Err(LockError::Held {
            port: Some(port), ..
        }) => through_node(port, action).await,
        Err(e @ LockError::Held { .. }) => bail!("{e} (it is still starting: try again)"),
        Err(e) => Err(e.into()),
    }
}

/// A command, its arguments read and checked.
enum Action {
    List,
    Add(McpServerSpec),
    Remove(String),
    Tools(String),
    Import(String),
}

impl Action {
    fn read(action: McpAction) -> anyhow::Result<Self> {
        Ok(match action {
            McpAction::List => Self::List,
            McpAction::Remove { name } => Self::Remove(server_name(name)?),
            McpAction::Tools { name } => Self::Tools(server_name(name)?),
            McpAction::Import { file } => Self::Import(
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?,
            ),
            McpAction::Add {
                name,
                url,
                headers,
                env,
                cwd,
                timeout,
                command,
            } => {
                let pairs = |items: Vec<String>, sep: char, what: &str| {
                    items
                        .into_iter()
                        .map(|i| match i.split_once(sep) {
                            Some((k, v)) if !k.trim().is_empty() => {
                                Ok((k.trim().to_owned(), v.trim_start().to_owned()))
                            }
                            _ => bail!("{what} {i:?} is not NAME{sep}VALUE"),
                        })
                        .collect::<anyhow::Result<_>>()
                };
                let transport = match (url, command.split_first()) {
                    (Some(url), None) => McpTransport::Http {
                        url,
                        headers: pairs(headers, ':', "--header")?,
                    },
                    (None, Some((command, args))) => McpTransport::Stdio {
                        command: command.clone(),
                        args: args.to_vec(),
                        env: pairs(env, '=', "--env")?,
                        cwd,
                    },
                    _ => bail!("give the server's command after `--`, or its --url"),
                };
                let spec = McpServerSpec {
                    name,
                    transport,
                    enabled: true,
                    call_timeout_ms: timeout.map_or(DEFAULT_CALL_TIMEOUT.as_millis() as u64, |s| {
                        s.saturating_mul(1000)
                    }),
                    disabled_tools: Default::default(),
                };
                spec.validate()?;
                Self::Add(spec)
            }
        })
    }
}

/// A server's name as given, checked (it goes into a URL path).
fn server_name(name: String) -> anyhow::Result<String> {
    if !hearth_tools::names::valid_server_name(&name) {
        bail!("{name:?} cannot name an MCP server (letters, digits, - and _, without __)");
    }
    Ok(name)
}

/// One line for a server: its name, how it is reached, whether it is on.
fn line(spec: &McpServerSpec, state: Option<&str>) -> String {
    let how = match &spec.transport {
        McpTransport::Stdio { command, args, .. } => format!("{command} {}", args.join(" "))
            .trim_end()
            .to_owned(),
        McpTransport::Http { url, .. } => url.clone(),
    };
    let on = if spec.enabled { "on" } else { "off" };
    match state {
        Some(s) => format!("{}\t{on}\t{s}\t{how}", spec.name),
        None => format!("{}\t{on}\t{how}", spec.name),
    }
}

fn print_tools(tools: &[Value]) {
    for t in tools {
        let description = t["description"].as_str().unwrap_or_default();
        let first = description.lines().next().unwrap_or_default();
        let off = if t["enabled"] == false { " (off)" } else { "" };
        println!(
            "{}{off}\t{first}",
            t["offered_name"].as_str().unwrap_or_default()
        );
    }
}

fn said_added(spec: &McpServerSpec) {
    println!("added {}", spec.name);
    if matches!(spec.transport, McpTransport::Stdio { .. }) {
        eprintln!(
            "Its command runs on this computer, with your rights, when a chat first needs it."
        );
    }
}

/// No node runs on the data dir: `hearth.db` directly (the lock held meanwhile).
async fn direct(data_dir: &Path, storage: KeyStorage, action: Action) -> anyhow::Result<()> {
    let store = Store::open(data_dir)
        .with_context(|| format!("opening the database in {}", data_dir.display()))?;
    // Env and header values are kept apart from hearth.db, as the node keeps them.
    let secrets = Secrets::new(data_dir, storage);
    let keep = |spec: &McpServerSpec| -> anyhow::Result<String> {
        Ok(serde_json::to_string(&mcp_secrets::seal(spec, &secrets)?)?)
    };
    let kept = || async {
        let mut specs = Vec::new();
        for row in store.mcp_servers().await? {
            match serde_json::from_str::<McpServerSpec>(&row.spec) {
                // As kept: the values stay where they are until `tools` needs them.
                Ok(spec) => specs.push(spec),
                Err(e) => eprintln!("{}: its settings cannot be read ({e})", row.name),
            }
        }
        anyhow::Ok(specs)
    };
    match action {
        Action::List => {
            let specs = kept().await?;
            if specs.is_empty() {
                println!(
                    "no MCP servers (add one with: hearth-node mcp add NAME -- COMMAND ARGS...)"
                );
            }
            for spec in specs {
                println!("{}", line(&spec, None));
            }
        }
        Action::Add(spec) => {
            if kept().await?.iter().any(|s| s.name == spec.name) {
                bail!("an MCP server named {} exists: remove it first", spec.name);
            }
            store
                .put_mcp_server(spec.name.clone(), keep(&spec)?)
                .await?;
            said_added(&spec);
        }
        Action::Remove(name) => {
            let spec = kept().await?.into_iter().find(|s| s.name == name);
            let prefix = hearth_tools::mcp_tool_prefix(&name);
            if !store.delete_mcp_server(name.clone(), prefix).await? {
                bail!("no MCP server is named {name}");
            }
            if let Some(spec) = spec {
                mcp_secrets::forget(&spec, &secrets);
            }
            println!("removed {name}");
        }
        Action::Tools(name) => {
            let spec = kept()
                .await?
                .into_iter()
                .find(|s| s.name == name)
                .with_context(|| format!("no MCP server is named {name}"))?;
            let spec = mcp_secrets::unseal(spec, &secrets);
            let servers = McpServers::new(vec![spec], McpSettings::default())?;
            let tools = servers.tools(&name).await;
            servers.shutdown().await;
            let tools = serde_json::to_value(tools?)?;
            print_tools(tools.as_array().map(Vec::as_slice).unwrap_or_default());
        }
        Action::Import(text) => {
            let names: Vec<String> = kept().await?.into_iter().map(|s| s.name).collect();
            for spec in hearth_tools::import_mcp_servers_json(&text)? {
                if names.contains(&spec.name) {
                    println!(
                        "skipped {}: a server of this name is kept already",
                        spec.name
                    );
                    continue;
                }
                store
                    .put_mcp_server(spec.name.clone(), keep(&spec)?)
                    .await?;
                said_added(&spec);
            }
        }
    }
    Ok(())
}

/// A node runs on the data dir: its `/api/mcp/*` on loopback.
async fn through_node(port: u16, action: Action) -> anyhow::Result<()> {
    let base = format!("http://127.0.0.1:{port}/api/mcp");
    // Loopback, never through a proxy; `tools` may wait for a server's start (a minute at most).
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(120))
        .build()?;
    let answer = |r: reqwest::RequestBuilder| async move {
        let r = r
            .send()
            .await
            .with_context(|| format!("reaching the node running on this data dir (port {port})"))?;
        let ok = r.status().is_success();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if !ok {
            let message = v["error"]["message"].as_str().unwrap_or("no reason given");
            bail!("the node refused: {message}");
        }
        anyhow::Ok(v)
    };
    match action {
        Action::List => {
            let v = answer(http.get(format!("{base}/servers"))).await?;
            let servers = v["servers"].as_array().cloned().unwrap_or_default();
            if servers.is_empty() {
                println!(
                    "no MCP servers (add one with: hearth-node mcp add NAME -- COMMAND ARGS...)"
                );
            }
            for s in servers {
                let spec: McpServerSpec = serde_json::from_value(s["spec"].clone())?;
                println!("{}", line(&spec, s["status"]["state"].as_str()));
            }
        }
        Action::Add(spec) => {
            answer(http.post(format!("{base}/servers")).json(&spec)).await?;
            said_added(&spec);
        }
        Action::Remove(name) => {
            answer(http.delete(format!("{base}/servers/{name}"))).await?;
            println!("removed {name}");
        }
        Action::Tools(name) => {
            let v = answer(http.get(format!("{base}/servers/{name}/tools"))).await?;
            print_tools(v["tools"].as_array().map(Vec::as_slice).unwrap_or_default());
        }
        Action::Import(text) => {
            let v = answer(
                http.post(format!("{base}/import"))
                    .json(&json!({"json": text})),
            )
            .await?;
            for name in v["added"].as_array().into_iter().flatten() {
                println!("added {}", name.as_str().unwrap_or_default());
            }
            for s in v["skipped"].as_array().into_iter().flatten() {
                println!(
                    "skipped {}: {}",
                    s["name"].as_str().unwrap_or_default(),
                    s["reason"].as_str().unwrap_or_default()
                );
            }
        }
    }
    Ok(())
}
