//! Models already downloaded by Ollama (`~/.ollama/models` or `$OLLAMA_MODELS`: manifests
//! naming blobs) and LM Studio (`~/.lmstudio/models`, `~/.cache/lm-studio/models`: GGUF files
//! by publisher and repository), imported without a copy: a symbolic link in the models
//! folder, named as the other app names the model, points at the file where it is. Deleting
//! the link later never touches the other app's file.

use std::io::Read;
use std::path::{Path, PathBuf};

use hearth_protocol::ModelId;
use serde::{Deserialize, Serialize};

use super::registry::plain_name;

/// A manifest is a few KiB; anything past this is not one.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// How deep the folders are searched (Ollama: host/namespace/model/tag; LM Studio:
/// publisher/repository/file).
const MAX_DEPTH: usize = 4;
const OLLAMA_REGISTRY: &str = "registry.ollama.ai";
const OLLAMA_MODEL_LAYER: &str = "application/vnd.ollama.image.model";
/// A vision model's projector in Ollama's manifests.
const OLLAMA_PROJECTOR_LAYER: &str = "application/vnd.ollama.image.projector";

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot link {name} into {dir}: {source}")]
    Link {
        name: String,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} is already in the models folder as another file; rename or remove it first")]
    Taken(String),
}

/// The app a model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Ollama,
    Lmstudio,
}

/// A model another app has, and the files that make it up.
#[derive(Debug, Clone, Serialize)]
pub struct Importable {
    /// The model's id here (the other app's name for it).
    pub id: ModelId,
    pub source: Source,
    /// The model's file, or a split model's first shard, where the other app keeps it.
    pub path: PathBuf,
    pub size_bytes: u64,
    /// `(name in the models folder, file)` for each link to make.
    #[serde(skip)]
    links: Vec<(String, PathBuf)>,
    /// Whether the models folder already has it.
    pub imported: bool,
}

/// Where the other apps keep their models.
#[derive(Debug, Clone, Default)]
pub struct Roots {
    pub ollama: Vec<PathBuf>,
    pub lmstudio: Vec<PathBuf>,
}

impl Roots {
    /// This user's folders: `$OLLAMA_MODELS` or `~/.ollama/models`, and LM Studio's two.
    pub fn of_user() -> Self {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let ollama = std::env::var_os("OLLAMA_MODELS")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".ollama/models")));
        Self {
            ollama: ollama.into_iter().collect(),
            lmstudio: home
                .iter()
                .flat_map(|h| {
                    [
                        h.join(".lmstudio/models"),
                        h.join(".cache/lm-studio/models"),
                    ]
                })
                .collect(),
        }
    }
}

/// Every model the other apps have (blocking: reads folders and manifests), each marked
/// `imported` when the models folder `dir` links to it already.
pub fn find(roots: &Roots, dir: &Path) -> Vec<Importable> {
    let mut out = Vec::new();
    for root in &roots.ollama {
        out.extend(ollama_models(root));
    }
    for root in &roots.lmstudio {
        out.extend(lmstudio_models(root));
    }
    // The first of two with one name wins (Ollama's before LM Studio's).
    let mut seen = std::collections::HashSet::new();
    out.retain(|m| seen.insert(m.id.clone()));
    for m in &mut out {
        m.imported = m
            .links
            .iter()
            .all(|(name, file)| links_to(&dir.join(name), file));
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// Link `model` into the models folder `dir`; a link already there is kept.
pub fn import(model: &Importable, dir: &Path) -> Result<(), ImportError> {
    std::fs::create_dir_all(dir).map_err(|source| ImportError::Link {
        name: model.id.to_string(),
        dir: dir.to_owned(),
        source,
    })?;
    for (name, file) in &model.links {
        let at = dir.join(name);
        if links_to(&at, file) {
            continue;
        }
        if at.symlink_metadata().is_ok() {
            return Err(ImportError::Taken(name.clone()));
        }
        link(file, &at).map_err(|source| ImportError::Link {
            name: name.clone(),
            dir: dir.to_owned(),
            source,
        })?;
    }
    tracing::info!(model = %model.id, from = %model.path.display(), "imported without a copy");
    Ok(())
}

#[cfg(unix)]
fn link(file: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(file, at)
}

#[cfg(not(unix))]
fn link(file: &Path, at: &Path) -> std::io::Result<()> {
    // Without symbolic links for every user: a hard link, still no copy (same volume only).
    std::fs::hard_link(file, at)
}

fn links_to(at: &Path, file: &Path) -> bool {
    match (std::fs::canonicalize(at), std::fs::canonicalize(file)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"GGUF"
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Files under `root`, at most [`MAX_DEPTH`] folders down (symbolic links to folders are not
/// followed, so a loop cannot trap the walk).
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() && depth < MAX_DEPTH {
                stack.push((e.path(), depth + 1));
            } else if kind.is_file() || kind.is_symlink() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Deserialize)]
struct Layer {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    #[serde(default)]
    digest: String,
}

/// Ollama's models: each manifest (`manifests/HOST/NAMESPACE/MODEL/TAG`) names its model
/// blob (`blobs/sha256-HEX`). Named as Ollama names them: `MODEL` for the library's
/// `latest`, else `MODEL:TAG`, with a namespace other than the library's in front
/// (`NAMESPACE_MODEL:TAG`, since a name here has no `/`).
fn ollama_models(root: &Path) -> Vec<Importable> {
    let manifests = root.join("manifests");
    let mut out = Vec::new();
    for path in files(&manifests) {
        let Ok(rel) = path.strip_prefix(&manifests) else {
            continue;
        };
        let parts: Vec<&str> = rel.iter().filter_map(|p| p.to_str()).collect();
        let [host, namespace, model, tag] = parts[..] else {
            continue;
        };
        let Some(blob) = ollama_blob(root, &path, OLLAMA_MODEL_LAYER) else {
            continue;
        };
        let mut name = if host == OLLAMA_REGISTRY && namespace == "library" {
            model.to_owned()
        } else if host == OLLAMA_REGISTRY {
            format!("{namespace}_{model}")
        } else {
            format!("{host}_{namespace}_{model}")
        };
        if tag != "latest" {
            name = format!("{name}:{tag}");
        }
        if !plain_name(&name) {
            continue;
        }
        let mut links = vec![(format!("{name}.gguf"), blob.clone())];
        // Its projector, named where the engine looks for it.
        if let Some(projector) = ollama_blob(root, &path, OLLAMA_PROJECTOR_LAYER) {
            links.push((format!("mmproj-{name}.gguf"), projector));
        }
        out.push(Importable {
            id: ModelId(name.clone()),
            source: Source::Ollama,
            size_bytes: size(&blob),
            links,
            path: blob,
            imported: false,
        });
    }
    out
}

/// The blob of the `media_type` layer a manifest names, when it is a GGUF file that exists.
fn ollama_blob(root: &Path, manifest: &Path, media_type: &str) -> Option<PathBuf> {
    let file = std::fs::File::open(manifest).ok()?;
    let mut text = String::new();
    file.take(MAX_MANIFEST_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    let m: Manifest = serde_json::from_str(&text).ok()?;
    let layer = m.layers.iter().find(|l| l.media_type == media_type)?;
    let hex = layer.digest.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let blob = root.join("blobs").join(format!("sha256-{hex}"));
    is_gguf(&blob).then_some(blob)
}

/// LM Studio's models: `PUBLISHER/REPOSITORY/FILE.gguf`, named by the file (a split model by
/// its first shard, every shard linked); vision projectors (`mmproj-*`) are not models.
fn lmstudio_models(root: &Path) -> Vec<Importable> {
    let all = files(root);
    let mut out = Vec::new();
    for path in &all {
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        if !file.ends_with(".gguf") || crate::registry::is_projector(file) || !plain_name(file) {
            continue;
        }
        let shards: Vec<PathBuf> = match hearth_protocol::ids::split_shard(file) {
            None => vec![path.clone()],
            Some((_, 1, _)) => {
                let id = ModelId::from_file_name(file);
                all.iter()
                    .filter(|p| p.parent() == path.parent())
                    .filter(|p| {
                        p.file_name().and_then(|f| f.to_str()).is_some_and(|f| {
                            hearth_protocol::ids::split_shard(f).is_some()
                                && ModelId::from_file_name(f) == id
                        })
                    })
                    .cloned()
                    .collect()
            }
            Some(_) => continue,
        };
        if !is_gguf(path) {
            continue;
        }
        let mut links: Vec<(String, PathBuf)> = shards
            .iter()
            .filter_map(|s| Some((s.file_name()?.to_str()?.to_owned(), s.clone())))
            .collect();
        // Its projector beside it (LM Studio's folder of one repository), under the name the
        // engine looks for.
        if let Some(projector) = hearth_engine::find_projector(path) {
            links.push((format!("mmproj-{file}"), projector));
        }
        out.push(Importable {
            id: ModelId::from_file_name(file),
            source: Source::Lmstudio,
            size_bytes: shards.iter().map(|s| size(s)).sum(),
            links,
            path: path.clone(),
            imported: false,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gguf(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"GGUF\x03\0\0\0rest").unwrap();
    }

    fn manifest(root: &Path, rel: &str, hex: &str) {
        manifest_with(root, rel, hex, None);
    }

    fn manifest_with(root: &Path, rel: &str, hex: &str, projector: Option<&str>) {
        let p = root.join("manifests").join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let mut layers = vec![
            serde_json::json!({"mediaType": "application/vnd.ollama.image.template", "digest": format!("sha256:{}", "0".repeat(64))}),
            serde_json::json!({"mediaType": OLLAMA_MODEL_LAYER, "digest": format!("sha256:{hex}")}),
        ];
        if let Some(p) = projector {
            layers.push(serde_json::json!({"mediaType": OLLAMA_PROJECTOR_LAYER, "digest": format!("sha256:{p}")}));
        }
        let m = serde_json::json!({ "layers": layers });
        std::fs::write(p, m.to_string()).unwrap();
    }

    #[test]
    fn both_layouts_are_found_named_and_linked_once() {
        let tmp = tempfile::tempdir().unwrap();
        let (ollama, lms, dir) = (
            tmp.path().join("ollama"),
            tmp.path().join("lms"),
            tmp.path().join("models"),
        );
        let hex = "ab".repeat(32);
        gguf(&ollama.join(format!("blobs/sha256-{hex}")));
        manifest(&ollama, "registry.ollama.ai/library/llama3.2/latest", &hex);
        manifest(&ollama, "registry.ollama.ai/library/llama3.2/1b", &hex);
        // A vision model: its projector is a layer of its own.
        let projector = "ef".repeat(32);
        gguf(&ollama.join(format!("blobs/sha256-{projector}")));
        manifest_with(
            &ollama,
            "registry.ollama.ai/someone/tiny/latest",
            &hex,
            Some(&projector),
        );
        // A manifest naming a blob that is not there, and one that is not JSON.
        manifest(
            &ollama,
            "registry.ollama.ai/library/gone/latest",
            &"cd".repeat(32),
        );
        std::fs::write(
            ollama.join("manifests/registry.ollama.ai/library/llama3.2/bad"),
            "{",
        )
        .unwrap();
        gguf(&lms.join("pub/repo/Small-Q4.gguf"));
        gguf(&lms.join("pub/repo/mmproj-Small.gguf"));
        gguf(&lms.join("pub/big/Big-00001-of-00002.gguf"));
        gguf(&lms.join("pub/big/Big-00002-of-00002.gguf"));
        let roots = Roots {
            ollama: vec![ollama],
            lmstudio: vec![lms],
        };
        let found = find(&roots, &dir);
        let ids: Vec<&str> = found.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            ids,
            ["Big", "Small-Q4", "llama3.2", "llama3.2:1b", "someone_tiny"]
        );
        assert!(found.iter().all(|m| !m.imported));
        for m in &found {
            import(m, &dir).unwrap();
            import(m, &dir).unwrap();
        }
        assert!(find(&roots, &dir).iter().all(|m| m.imported));
        assert!(dir.join("Big-00002-of-00002.gguf").is_file());
        assert!(dir.join("llama3.2:1b.gguf").is_file());
        // Projectors come along, named for their models, and are never models.
        assert!(links_to(
            &dir.join("mmproj-someone_tiny.gguf"),
            &tmp.path().join(format!("ollama/blobs/sha256-{projector}"))
        ));
        assert!(links_to(
            &dir.join("mmproj-Small-Q4.gguf"),
            &tmp.path().join("lms/pub/repo/mmproj-Small.gguf")
        ));
        assert!(!dir.join("mmproj-llama3.2.gguf").exists());
        // A different file under the same name is never replaced.
        std::fs::remove_file(dir.join("Small-Q4.gguf")).unwrap();
        std::fs::write(dir.join("Small-Q4.gguf"), b"mine").unwrap();
        let small = found.iter().find(|m| m.id.as_str() == "Small-Q4").unwrap();
        assert!(matches!(import(small, &dir), Err(ImportError::Taken(_))));
        assert_eq!(std::fs::read(dir.join("Small-Q4.gguf")).unwrap(), b"mine");
    }
}
