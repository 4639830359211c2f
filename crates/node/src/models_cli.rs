//! `hearth-node models list|search|pull|import|rm`: the models folder from the command line,
//! without a running node (a running node sees the changes at once: it reads the folder when
//! asked). `search` asks the hub as the Models page does; `pull` downloads as the node does
//! (resumable: run it again after an interruption).

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use hearth_models::{import, memory, DownloadState, Downloads, Progress, Registry};

#[derive(Debug, clap::Args)]
pub(crate) struct ModelsArgs {
    #[command(subcommand)]
    action: ModelsAction,
    /// Where GGUF models live [default: the data dir + models].
    #[arg(long, env = "HEARTH_MODELS_DIR", global = true)]
    models_dir: Option<PathBuf>,
    /// The node's data dir, as `serve` takes it (its `models` folder is the default).
    #[arg(long, env = "HEARTH_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum ModelsAction {
    /// Every model in the folder, from its GGUF header.
    List,
    /// Link models downloaded by Ollama or LM Studio into the folder, without a copy: the ids
    /// given, or every one not imported yet. `--dry-run` only lists them.
    Import {
        ids: Vec<String>,
        #[arg(long)]
        dry_run: bool,
    },
    /// Find GGUF models on the hub (the most downloaded first): each file with its size, its
    /// quantisation and whether it fits this machine at the node's default context.
    Search {
        query: Vec<String>,
        /// The Hugging Face-style hub to search.
        #[arg(long, env = "HEARTH_HUB_URL", default_value = hearth_models::model_hub::DEFAULT_HUB_URL)]
        hub_url: String,
        /// Repositories to list, at most 30.
        #[arg(long, default_value_t = hearth_models::model_hub_search::DEFAULT_LIMIT)]
        limit: usize,
    },
    /// Download OWNER/REPO/FILE.gguf from the hub into the folder (resumes a partial one).
    Pull {
        model: String,
        /// The Hugging Face-style hub to download from.
        #[arg(long, env = "HEARTH_HUB_URL", default_value = hearth_models::model_hub::DEFAULT_HUB_URL)]
        hub_url: String,
    },
    /// Delete a model's files from the folder (only the link of an imported model).
    Rm { id: String },
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1 << 20))
}

pub(crate) fn models(args: ModelsArgs, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let dir = args.models_dir.unwrap_or_else(|| {
        args.data_dir
            .unwrap_or_else(hearth_base::data_dir::default_data_dir)
            .join("models")
    });
    let registry = Registry::new(&dir);
    match args.action {
        ModelsAction::List => {
            let files = registry.scan();
            if files.is_empty() {
                println!(
                    "no models in {} (import some with: hearth-node models import)",
                    dir.display()
                );
            }
            for f in files {
                let about = [
                    f.parameters.as_deref(),
                    f.quantization.as_deref(),
                    f.architecture.as_deref(),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ");
                let mut line = format!("{}\t{}\t{about}", f.id, mib(f.size_bytes));
                if let Some(to) = &f.linked_to {
                    line.push_str(&format!("\t-> {}", to.display()));
                }
                if let Some(e) = &f.error {
                    line.push_str(&format!("\t({e})"));
                }
                println!("{line}");
            }
        }
        ModelsAction::Import { ids, dry_run } => {
            let found = import::find(&import::Roots::of_user(), &dir);
            let chosen: Vec<_> = if ids.is_empty() {
                found.iter().filter(|m| !m.imported).collect()
            } else {
                let mut chosen = Vec::new();
                for id in &ids {
                    let m = found.iter().find(|m| m.id.matches(id)).with_context(|| {
                        format!("no model {id} in Ollama's or LM Studio's folders")
                    })?;
                    chosen.push(m);
                }
                chosen
            };
            if chosen.is_empty() {
                println!(
                    "nothing to import: no model of Ollama or LM Studio that is not here already"
                );
            }
            let mut failed = 0;
            for m in chosen {
                let from = format!("{:?}", m.source).to_lowercase();
                if dry_run {
                    println!(
                        "{}\t{}\t{from}\t{}",
                        m.id,
                        mib(m.size_bytes),
                        m.path.display()
                    );
                } else if let Err(e) = import::import(m, &dir) {
                    // The others are still imported.
                    eprintln!("not imported: {}: {e}", m.id);
                    failed += 1;
                } else {
                    println!(
                        "imported {} from {from} ({}), no copy made",
                        m.id,
                        m.path.display()
                    );
                }
            }
            if failed > 0 {
                anyhow::bail!("{failed} model(s) could not be imported (see above)");
            }
        }
        ModelsAction::Search {
            query,
            hub_url,
            limit,
        } => runtime.block_on(search(&dir, &query.join(" "), hub_url, limit))?,
        ModelsAction::Pull { model, hub_url } => runtime.block_on(pull(&dir, &model, hub_url))?,
        ModelsAction::Rm { id } => {
            let removed = registry
                .remove(&id)
                .with_context(|| format!("removing {id} from {}", dir.display()))?;
            for name in removed {
                println!("removed {name}");
            }
        }
    }
    Ok(())
}

/// The hub's answer, a line per file: its spec, size, quantisation, and whether it fits here
/// (system memory, and the GPUs' as a node would use them) at the node's default context.
async fn search(
    dir: &std::path::Path,
    query: &str,
    hub: String,
    limit: usize,
) -> anyhow::Result<()> {
    let downloads = Downloads::new(
        dir.to_path_buf(),
        hub,
        None,
        tokio_util::sync::CancellationToken::new(),
    );
    let found = downloads.search(query, limit).await?;
    let context = u64::from(hearth_engine::config::DEFAULT_CONTEXT);
    let room = memory::Room {
        ctx_tokens: context,
        budget: memory::budget(None, 0, 0),
        gpu: memory::gpu_room(&hearth_engine::Offload::default(), 0),
    };
    if found.is_empty() {
        println!("no GGUF models on the hub match {query:?}");
    }
    println!("fit: with a {context}-token context");
    for r in found {
        println!("{}	{} downloads", r.id, r.downloads);
        if let Some(e) = &r.error {
            println!("  (its files could not be listed: {e})");
        }
        for f in r.files {
            let fit = memory::fit(f.bytes_to_load(), &room);
            let mark = match (fit.on_gpu, fit.fits) {
                (true, _) => "fits in video memory",
                (false, true) => "fits",
                (false, false) => "too large",
            };
            let here = if dir.join(&f.name).is_file() {
                "\there"
            } else {
                ""
            };
            let vision = if f.projector_size.is_some() {
                "\tsees images"
            } else {
                ""
            };
            println!(
                "  {}	{}	{}	{mark} (needs {}){vision}{here}",
                f.spec,
                mib(f.size),
                f.quant.as_deref().unwrap_or("?"),
                mib(fit.needs)
            );
        }
    }
    Ok(())
}

/// Download `model` into `dir`, showing its progress on stderr until it is over.
async fn pull(dir: &std::path::Path, model: &str, hub: String) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stop = tokio_util::sync::CancellationToken::new();
    let downloads = Downloads::new(dir.to_path_buf(), hub, None, stop.clone());
    // A peer's model comes through a running node (its Models page), not the command line.
    if !model.contains('/') {
        anyhow::bail!("name a file on the hub as OWNER/REPO/FILE.gguf (a model a peer has is fetched on the Models page of a running node)");
    }
    let id = downloads.start(model)?.id;
    let mut changed = downloads.subscribe();
    let mut shown: Option<std::time::Instant> = None;
    let end = loop {
        let p = downloads.get(&id).context("the download vanished")?;
        if p.state.is_over() {
            break p;
        }
        if shown.is_none_or(|at| at.elapsed() >= std::time::Duration::from_millis(500)) {
            eprint!("\r{}\x1b[K", progress_line(&p));
            shown = Some(std::time::Instant::now());
        }
        tokio::select! {
            r = changed.changed() => r.context("downloads stopped")?,
            _ = tokio::signal::ctrl_c() => {
                stop.cancel();
                downloads.stopped().await;
                eprintln!();
                anyhow::bail!("stopped; run the same command again to resume where it is");
            }
        }
    };
    eprintln!();
    match end.state {
        DownloadState::Done => {
            let checked = match end.shards {
                Some(n) => format!("the SHA-256 of each of its {n} files checked"),
                None => format!("SHA-256 {} checked", end.sha256.unwrap_or_default()),
            };
            println!("downloaded {} into {} ({checked})", end.id, dir.display());
            Ok(())
        }
        _ => anyhow::bail!(end.error.unwrap_or_else(|| "cancelled".into())),
    }
}

/// `Tiny.gguf  34% 120/350 MiB  12.5 MiB/s  18 s left`
fn progress_line(p: &Progress) -> String {
    let total = p.total.unwrap_or(0);
    let percent = (p.received * 100).checked_div(total).unwrap_or(0);
    let mut line = format!(
        "{}  {percent:>3}% {}/{}  {}/s",
        p.id,
        mib(p.received),
        mib(total),
        mib(p.bytes_per_second as u64)
    );
    if let Some(left) = p.seconds_left {
        line.push_str(&format!("  {left:.0} s left"));
    }
    if p.state == DownloadState::Retrying {
        line.push_str("  (interrupted: resuming)");
    }
    line
}
