//! The registry of models this node can load: every GGUF in the models folder (a model split
//! into `NAME-00001-of-0000N.gguf` shards is one model, named `NAME`, loaded from its first
//! shard), each described from its header. Names are plain file names: a request can never
//! reach a file outside the folder.

use std::path::{Path, PathBuf};

use hearth_protocol::gguf::GgufInfo;
use hearth_protocol::ids::split_shard as split_name;
use hearth_protocol::ModelId;
use serde::Serialize;

/// A model file (or a split model's shards) in the models folder.
#[derive(Debug, Clone, Serialize)]
pub struct ModelFile {
    pub id: ModelId,
    /// The file llama.cpp opens: the model, or a split model's first shard.
    pub file: String,
    #[serde(skip)]
    pub path: PathBuf,
    /// Every file of the model, shards included.
    pub size_bytes: u64,
    /// For a split model: how many shards it has, and whether they are all present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<String>,
    /// Where the file really is, for a model imported from another app (a link to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linked_to: Option<PathBuf>,
    /// Why the model cannot be loaded (an unreadable header, a missing shard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// It has a vision projector (an `mmproj` file beside it; loaded: one that reads images).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub vision: bool,
    /// Its projector hears audio clips (loaded: one that does).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub audio: bool,
    #[serde(skip)]
    pub gguf: Option<GgufInfo>,
}

/// A vision projector's file name (`mmproj-...gguf`, `...mmproj....gguf`): a model's part,
/// never a model of its own.
pub fn is_projector(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".gguf") && lower.contains("mmproj")
}

/// Whether a client's name can name a file in the folder: no paths, no hidden files.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.contains(['/', '\\', '\0'])
        && !name.starts_with('.')
}

/// The models folder.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The model a client's name refers to, when its file is in the folder (the name with or
    /// without `.gguf`; a split model by its name without the shard suffix). Cheap: a `stat`,
    /// or one listing of the folder for a split model.
    pub fn find(&self, requested: &str) -> Option<(ModelId, PathBuf)> {
        if !plain_name(requested) || is_projector(&format!("{requested}.gguf")) {
            return None;
        }
        let stem = requested.strip_suffix(".gguf").unwrap_or(requested);
        let path = self.dir.join(format!("{stem}.gguf"));
        if path.is_file() && split_name(&format!("{stem}.gguf")).is_none() {
            return Some((ModelId(stem.to_owned()), path));
        }
        let entries = std::fs::read_dir(&self.dir).ok()?;
        entries.flatten().find_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            match split_name(&file) {
                Some((name, 1, _)) if name == stem => Some((ModelId(stem.to_owned()), e.path())),
                _ => None,
            }
        })
    }

    /// Every file of model `name` (a split model's shards in order), when all are in the
    /// folder.
    pub fn files_of(&self, name: &str) -> Option<Vec<PathBuf>> {
        let (_, path) = self.find(name)?;
        let file = path.file_name()?.to_str()?;
        let Some((stem, _, count)) = split_name(file) else {
            return Some(vec![path]);
        };
        let files: Vec<PathBuf> = (1..=count)
            .map(|i| {
                self.dir
                    .join(hearth_protocol::ids::shard_file(stem, i, count))
            })
            .collect();
        files.iter().all(|f| f.is_file()).then_some(files)
    }

    /// The ids of the models in the folder, from their file names only (one listing).
    pub fn scan_ids(&self) -> Vec<ModelId> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut ids: Vec<ModelId> = entries
            .flatten()
            .filter_map(|e| {
                let file = e.file_name().to_string_lossy().into_owned();
                let listed = file.ends_with(".gguf")
                    && !file.starts_with('.')
                    && !is_projector(&file)
                    && split_name(&file).is_none_or(|(_, index, _)| index == 1);
                (listed && e.path().is_file()).then(|| ModelId::from_file_name(&file))
            })
            .collect();
        ids.sort();
        ids
    }

    /// Every model in the folder, described from its header (blocking: reads each header).
    pub fn scan(&self) -> Vec<ModelFile> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut files: Vec<(String, PathBuf, u64)> = entries
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| {
                // Through links: an imported model's size is its file's.
                let size = std::fs::metadata(e.path()).map(|m| m.len()).unwrap_or(0);
                (e.file_name().to_string_lossy().into_owned(), e.path(), size)
            })
            .filter(|(f, _, _)| f.ends_with(".gguf") && !f.starts_with('.') && !is_projector(f))
            .collect();
        files.sort();
        let mut out = Vec::new();
        for (file, path, size) in &files {
            let (id, shards, size_bytes, missing) = match split_name(file) {
                None => (ModelId::from_file_name(file), None, *size, false),
                Some((name, 1, count)) => {
                    let mut total = 0;
                    let mut present = 0;
                    for (f, _, s) in &files {
                        if matches!(split_name(f), Some((n, _, c)) if n == name && c == count) {
                            total += s;
                            present += 1;
                        }
                    }
                    (
                        ModelId(name.to_owned()),
                        Some(count),
                        total,
                        present != count,
                    )
                }
                Some(_) => continue,
            };
            let senses = hearth_engine::projector_senses(path);
            let mut m = ModelFile {
                id,
                file: file.clone(),
                path: path.clone(),
                size_bytes,
                shards,
                architecture: None,
                quantization: None,
                context_length: None,
                parameters: None,
                linked_to: std::fs::symlink_metadata(path)
                    .is_ok_and(|m| m.file_type().is_symlink())
                    .then(|| std::fs::canonicalize(path).ok())
                    .flatten(),
                error: missing.then(|| "some of its shards are missing".to_owned()),
                vision: senses.vision,
                audio: senses.audio,
                gguf: None,
            };
            match hearth_engine::gguf::read(path) {
                Ok(info) => {
                    m.architecture = Some(info.architecture.clone());
                    m.quantization = info.quantization.clone();
                    m.context_length = info.context_length;
                    m.parameters = info.size_label.clone();
                    m.gguf = Some(info);
                }
                Err(e) => {
                    m.error.get_or_insert_with(|| e.to_string());
                }
            }
            out.push(m);
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }
}

impl ModelFile {
    /// A loaded model as the registry would describe its file, for one that lives outside the
    /// folder (a node started with `--model PATH`): `linked_to` says where it is.
    pub fn of_loaded(info: &hearth_engine::ModelInfo) -> Self {
        let g = &info.gguf;
        ModelFile {
            id: info.id.clone(),
            file: info
                .path
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
            path: info.path.clone(),
            size_bytes: info.size_bytes,
            shards: None,
            architecture: Some(g.architecture.clone()),
            quantization: g.quantization.clone(),
            context_length: g.context_length,
            parameters: g.size_label.clone(),
            linked_to: Some(info.path.clone()),
            error: None,
            vision: info.vision,
            audio: info.audio,
            gguf: Some(g.clone()),
        }
    }
}

impl Registry {
    /// Remove `id`'s files from the folder (every shard of a split model; for an imported
    /// model only the link, never the other app's file). Returns the names removed.
    pub fn remove(&self, id: &str) -> std::io::Result<Vec<String>> {
        let Some((id, path)) = self.find(id) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no model named {id} in {}", self.dir.display()),
            ));
        };
        let mut names = vec![];
        // Its projector goes with it (named for the file the engine loads), last: a model
        // whose removal failed keeps it.
        let projector = path
            .file_name()
            .and_then(|f| f.to_str())
            .map(|file| format!("mmproj-{file}"));
        match path
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(split_name)
        {
            None => names.push(format!("{id}.gguf")),
            Some((name, _, count)) => {
                names.extend((1..=count).map(|i| hearth_protocol::ids::shard_file(name, i, count)))
            }
        }
        names.extend(projector);
        let mut removed = vec![];
        for name in names {
            match std::fs::remove_file(self.dir.join(&name)) {
                Ok(()) => removed.push(name),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_paths_are_never_looked_up() {
        for bad in ["../x", "a/b", "..", ".hidden", "a\\b", ""] {
            assert!(!plain_name(bad), "{bad}");
        }
        let r = Registry::new(std::env::temp_dir());
        assert!(r.find("../etc/passwd").is_none());
    }

    #[test]
    fn scan_lists_files_and_split_models_once() {
        let dir = std::env::temp_dir().join(format!("hearth-registry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("broken.gguf"), b"not a gguf").unwrap();
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        std::fs::write(dir.join("big-00001-of-00003.gguf"), b"aa").unwrap();
        std::fs::write(dir.join("big-00002-of-00003.gguf"), b"bbb").unwrap();
        // Projectors are parts of models, never models.
        std::fs::write(dir.join("mmproj-broken.gguf"), b"p").unwrap();
        std::fs::write(dir.join("Model-mmproj-f16.gguf"), b"p").unwrap();
        let r = Registry::new(&dir);
        let files = r.scan();
        let ids: Vec<&str> = files.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["big", "broken"]);
        assert_eq!(
            r.scan_ids(),
            [ModelId("big".into()), ModelId("broken".into())]
        );
        assert_eq!(files[0].size_bytes, 5);
        assert_eq!(files[0].shards, Some(3));
        assert!(files[0].error.as_deref().unwrap().contains("missing"));
        assert!(files[1].error.is_some());
        assert_eq!(
            r.find("big").unwrap().1,
            dir.join("big-00001-of-00003.gguf")
        );
        assert_eq!(r.find("broken.gguf").unwrap().0.as_str(), "broken");
        assert!(r.find("big-00002-of-00003").is_none());
        assert!(r.find("nothing").is_none());
        assert!(r.find("mmproj-broken").is_none());
        assert_eq!(
            r.remove("broken").unwrap(),
            ["broken.gguf", "mmproj-broken.gguf"]
        );
        std::fs::write(dir.join("broken.gguf"), b"not a gguf").unwrap();
        assert_eq!(
            r.remove("big").unwrap(),
            ["big-00001-of-00003.gguf", "big-00002-of-00003.gguf"]
        );
        assert!(r.remove("big").is_err());
        assert!(r.remove("../notes.txt").is_err());
        assert_eq!(r.scan_ids(), [ModelId("broken".into())]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
