//! The `hearth-node` command line: `serve` runs a node until SIGINT/SIGTERM. Every flag can
//! also be set with a `HEARTH_<FLAG>` environment variable (DESIGN.md §8).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hearth_node::{config, Node, NodeConfig};
use tracing_subscriber::EnvFilter;

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
    /// Load a model and serve it on every door (OpenAI API, /generate WebSocket).
    Serve(ServeArgs),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "HEARTH_HOST", default_value = "127.0.0.1")]
    host: IpAddr,
    /// HTTP port for every door (0 picks a free one).
    #[arg(long, env = "HEARTH_PORT", default_value_t = config::DEFAULT_PORT)]
    port: u16,
    /// Model file name in the models folder (with or without .gguf), or a path.
    #[arg(long, env = "HEARTH_MODEL")]
    model: Option<String>,
    /// Folder of GGUF models [default: <data-dir>/models].
    #[arg(long, env = "HEARTH_MODELS_DIR")]
    models_dir: Option<PathBuf>,
    /// Where hearth.db lives [default: the OS data dir + hearth].
    #[arg(long, env = "HEARTH_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Parallel generation slots (continuous batching).
    #[arg(long, env = "HEARTH_PARALLEL", default_value_t = hearth_engine::config::DEFAULT_SLOTS)]
    parallel: usize,
    /// llama.cpp threads [default: physical cores].
    #[arg(long, env = "HEARTH_THREADS")]
    threads: Option<usize>,
    /// Context per slot in tokens [default: min(4096, the model's)].
    #[arg(long, env = "HEARTH_CTX")]
    ctx: Option<u32>,
    /// Requests that may wait for a slot before new ones are refused.
    #[arg(long, env = "HEARTH_QUEUE", default_value_t = hearth_engine::config::DEFAULT_QUEUE_CAPACITY)]
    queue: usize,
    /// This node's name, shown with every answer it gives [default: the host name].
    #[arg(long, env = "HEARTH_NAME")]
    name: Option<String>,
    /// Make model loading last at least this many milliseconds (to watch loading progress).
    #[arg(long, env = "HEARTH_MIN_LOAD_MS", hide = true)]
    min_load_ms: Option<u64>,
    /// Serve scripted tokens instead of running the model (door benchmarks only).
    #[arg(long, env = "HEARTH_SCRIPTED", hide = true)]
    scripted: bool,
}

impl ServeArgs {
    fn into_config(self) -> NodeConfig {
        let data_dir = self.data_dir.unwrap_or_else(config::default_data_dir);
        let mut c = NodeConfig::new(data_dir);
        if let Some(m) = self.models_dir {
            c.models_dir = m;
        }
        c.host = self.host;
        if let Some(n) = self.name {
            c.name = n;
        }
        c.port = self.port;
        c.model = self.model;
        c.parallel = self.parallel;
        if let Some(t) = self.threads {
            c.threads = t;
        }
        c.ctx = self.ctx;
        c.queue = self.queue;
        c.min_load_time = self.min_load_ms.map(Duration::from_millis);
        c.script = self.scripted.then(hearth_engine::Script::default);
        c
    }
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,llama_cpp_2=warn,llama-cpp-2=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args.into_config())),
    }
}

async fn serve(config: NodeConfig) -> anyhow::Result<()> {
    let node = Node::start(config).await.context("starting the node")?;
    let url = format!("http://{}", node.addr());
    println!("Hearth is listening on {url}  (OpenAI API: {url}/v1, streaming WebSocket: ws://{}/generate)", node.addr());
    tokio::select! {
        r = node.host().ready() => match r {
            Ok(info) => println!("Model {} is ready ({} slots, {} tokens of context each)", info.id, info.slots, info.ctx_per_slot),
            Err(e) => eprintln!("The model could not be loaded: {e}"),
        },
        () = shutdown_signal() => {
            node.shutdown().await;
            return Ok(());
        }
    }
    shutdown_signal().await;
    node.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
