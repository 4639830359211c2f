//! `hearth-node models list|import|rm`: the models folder from the command line, without a
//! running node (a running node sees the changes at once: it reads the folder when asked).

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use hearth_node::config;
use hearth_node::models::{import, Registry};

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
    /// Delete a model's files from the folder (only the link of an imported model).
    Rm { id: String },
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1 << 20))
}

pub(crate) fn models(args: ModelsArgs) -> anyhow::Result<()> {
    let dir = args.models_dir.unwrap_or_else(|| {
        args.data_dir
            .unwrap_or_else(config::default_data_dir)
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
            for m in chosen {
                let from = format!("{:?}", m.source).to_lowercase();
                if dry_run {
                    println!(
                        "{}\t{}\t{from}\t{}",
                        m.id,
                        mib(m.size_bytes),
                        m.path.display()
                    );
                } else {
                    import::import(m, &dir)?;
                    println!(
                        "imported {} from {from} ({}), no copy made",
                        m.id,
                        m.path.display()
                    );
                }
            }
        }
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
