//! The `hearth-node` command line: `serve` runs a node until SIGINT/SIGTERM. Every flag can
//! also be set with a `HEARTH_<FLAG>` environment variable (DESIGN.md §8).

mod client;
mod connect;
mod mcp_cli;
mod models_cli;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hearth_node::cli::ServeArgs;
use hearth_node::{shutdown_signal, Node, NodeConfig};

#[derive(Debug, Parser)]
#[command(
    name = "hearth-node",
    version,
    about = "Run local LLMs on the computers you already own"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load a model and serve it on every door (web UI, OpenAI API, WebSockets).
    Serve(Box<ServeArgs>),
    /// API keys for clients on the LAN (needed when the node is shared with --lan).
    Keys {
        #[command(subcommand)]
        action: KeysAction,
        /// Where hearth.db lives [default: the OS data dir + hearth].
        #[arg(long, env = "HEARTH_DATA_DIR", global = true)]
        data_dir: Option<PathBuf>,
    },
    /// A client of any Hearth node's signed-challenge door: keygen, register, chat.
    Client(client::ClientArgs),
    /// This node's identity: device id and Ed25519 public key.
    Identity(client::IdentityArgs),
    /// Clients registered with this node's signed-challenge door: list, revoke.
    Clients(client::ClientsArgs),
    /// The models folder: list, import from Ollama or LM Studio, rm.
    Models(models_cli::ModelsArgs),
    /// Print the settings that point a coding agent (claude, codex, qwen, opencode,
    /// continue) at a node.
    Connect(connect::ConnectArgs),
    /// The chat's MCP servers: list, add, remove, their tools, an mcpServers import.
    Mcp(mcp_cli::McpArgs),
    /// Serve this machine's CPU to a peer's split model, over standard input and output
    /// (started by the node for a split model; never by hand).
    RpcServe {
        /// Compute threads [default: the physical cores].
        #[arg(long)]
        threads: Option<usize>,
        /// MiB the peer's layers may take here (what the node offered it) [default: no limit].
        #[arg(long)]
        memory_limit: Option<u64>,
    },
}

#[derive(Debug, Subcommand)]
enum KeysAction {
    /// Create a key; its secret is printed once and never stored.
    Create {
        /// What the key is for (a device or a person).
        #[arg(long)]
        name: String,
        /// What it reaches: `use`, the model doors (OpenAI, Ollama, the WebSocket protocols);
        /// `manage`, also the UI's API (conversations, settings, models, downloads).
        #[arg(long, default_value = "use")]
        scope: hearth_store::KeyScope,
    },
    /// List keys (never their secrets).
    List,
    /// Revoke a key by id or by its visible prefix.
    Revoke { id: String },
}

fn main() -> anyhow::Result<()> {
    // Started by a node to read a document (never by hand): that, and nothing else.
    if let Some(code) = hearth_node::read_document_if_asked() {
        std::process::exit(code);
    }
    hearth_node::logging::init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args.into_config())),
        Command::Keys { action, data_dir } => runtime.block_on(keys(
            action,
            data_dir.unwrap_or_else(hearth_base::data_dir::default_data_dir),
        )),
        Command::Client(args) => runtime.block_on(client::client(args)),
        Command::Identity(args) => runtime.block_on(client::identity(args)),
        Command::Clients(args) => runtime.block_on(client::clients(args)),
        Command::Models(args) => models_cli::models(args, &runtime),
        Command::Connect(args) => runtime.block_on(connect::connect(args)),
        Command::Mcp(args) => runtime.block_on(mcp_cli::mcp(args)),
        Command::RpcServe {
            threads,
            memory_limit,
        } => {
            let threads = threads.unwrap_or_else(hearth_engine::config::physical_cores);
            let memory = memory_limit.map(|mib| mib.saturating_mul(1 << 20));
            Ok(hearth_split::rpc_serve::run(threads, memory)?)
        }
    }
}

async fn keys(action: KeysAction, data_dir: PathBuf) -> anyhow::Result<()> {
    let store = hearth_store::Store::open(&data_dir)
        .with_context(|| format!("opening the database in {}", data_dir.display()))?;
    match action {
        KeysAction::Create { name, scope } => {
            let (key, secret) = store.create_key(name, scope).await?;
            println!("{secret}");
            eprintln!(
                "Created key {} ({}, scope {}). Keep it: it is not shown again. Clients send it \
                 as 'Authorization: Bearer <key>' or '?token=<key>'.",
                key.id,
                key.name,
                key.scope.as_str()
            );
        }
        KeysAction::List => {
            let keys = store.list_keys().await?;
            if keys.is_empty() {
                println!("no keys (create one with: hearth-node keys create --name NAME)");
            }
            for k in keys {
                println!(
                    "{}\t{}…\t{}\t{}\t{}",
                    k.id,
                    k.prefix,
                    k.name,
                    k.scope.as_str(),
                    if k.revoked { "revoked" } else { "active" }
                );
            }
        }
        KeysAction::Revoke { id } => {
            if store.revoke_key(id.clone()).await? {
                println!("revoked {id}");
            } else {
                anyhow::bail!("no active key with id or prefix {id}");
            }
        }
    }
    Ok(())
}

/// Standard input closed (read to its end on a thread of its own).
async fn stdin_closed() {
    let _ = tokio::task::spawn_blocking(|| {
        use std::io::Read as _;
        let mut buf = [0u8; 64];
        while matches!(std::io::stdin().read(&mut buf), Ok(1..)) {}
    })
    .await;
}

async fn serve(config: NodeConfig) -> anyhow::Result<()> {
    // A split model's worker: its node holds its standard input, and it stops when that closes
    // (the node stopped, or died), or when the model cannot be loaded.
    let worker = config.remote.is_some();
    let until_stdin_closes = config.until_stdin_closes;
    let orphaned = async {
        if until_stdin_closes {
            stdin_closed().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(orphaned);
    let node = Node::start(config).await.context("starting the node")?;
    let url = format!("http://{}", node.addr());
    println!("Hearth is listening on {url}  (OpenAI API: {url}/v1, streaming WebSocket: ws://{}/generate)", node.addr());
    tokio::select! {
        r = node.host().ready() => match r {
            Ok(info) => println!("Model {} is ready ({} slots, {} tokens of context shared)", info.id, info.slots, info.context),
            Err(hearth_engine::SubmitError::NoModel) => println!("No model yet: open {url} to load one (Models), or put a .gguf file in the models folder"),
            Err(e) => {
                eprintln!("The model could not be loaded: {e}");
                if worker {
                    node.shutdown().await;
                    anyhow::bail!("a split model's worker without its model: {e}");
                }
            }
        },
        () = shutdown_signal() => {
            node.shutdown().await;
            return Ok(());
        }
        () = &mut orphaned => {
            node.shutdown().await;
            return Ok(());
        }
    }
    tokio::select! {
        () = shutdown_signal() => {}
        () = &mut orphaned => {}
    }
    node.shutdown().await;
    Ok(())
}
