//! Finding models on the hub: its model search (`GET {hub}/api/models`, GGUF repositories, the
//! most downloaded first, as the hub documents it) and each repository's GGUF files with their
//! size and quantisation (`tree/main?recursive=true`), a split model's shards as one file, and
//! the vision projector a download of it would bring.
//! Whether a file fits this machine is the host's to say (`ModelHost::fit`).

use futures_util::StreamExt as _;
use hearth_protocol::gguf::quant_in_name;
use hearth_protocol::ids::split_shard;
use serde::{Deserialize, Serialize};

use crate::model_hub::{
    best_projector, get_json, ModelHubError, ModelHubFile, TreeEntry, REVISION,
};
use crate::registry::{is_projector, plain_name};

/// Repositories one search lists when the caller does not say.
pub const DEFAULT_LIMIT: usize = 12;
/// The most one search lists: each costs a listing of its files.
pub const MAX_LIMIT: usize = 30;
/// Repositories listed at once.
const LISTINGS_AT_ONCE: usize = 4;
/// Longest query sent on.
const MAX_QUERY_BYTES: usize = 200;

/// A repository the search found, with its GGUF files.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FoundRepo {
    /// `OWNER/REPO`.
    pub id: String,
    pub downloads: u64,
    pub likes: u64,
    pub last_modified: Option<String>,
    pub files: Vec<FoundFile>,
    /// Why its files could not be listed, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One model of a repository: a GGUF file, or a split model's shards together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundFile {
    /// The file's name (a split model's first shard).
    pub name: String,
    /// What to download: `OWNER/REPO/PATH`.
    pub spec: String,
    /// Bytes, every shard counted.
    pub size: u64,
    /// The quantisation its name says (`Q4_K_M`), when it says one.
    pub quant: Option<String>,
    /// Shards of a split model (1 for a single file).
    pub shards: u32,
    /// The bytes of the vision projector a download brings with it (the one its folder holds,
    /// chosen as the download chooses), when there is one: the model sees images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projector_size: Option<u64>,
}

impl FoundFile {
    /// What loads when it does: the model and its projector, if one comes with it.
    pub fn bytes_to_load(&self) -> u64 {
        self.size + self.projector_size.unwrap_or(0)
    }
}

/// One result of the hub's model search, as documented (`id`, `downloads`, `likes`, and
/// `lastModified` when asked for).
#[derive(Debug, Deserialize)]
struct Hit {
    id: String,
    #[serde(default)]
    downloads: u64,
    #[serde(default)]
    likes: u64,
    #[serde(default, rename = "lastModified")]
    last_modified: Option<String>,
}

/// Why a search was refused before it reached the hub.
pub fn check_query(query: &str) -> Result<&str, ModelHubError> {
    let q = query.trim();
    if q.is_empty() || q.len() > MAX_QUERY_BYTES || q.chars().any(char::is_control) {
        return Err(ModelHubError::BadQuery(q.chars().take(60).collect()));
    }
    Ok(q)
}

/// The GGUF repositories matching `query`, the most downloaded first, each with its files.
pub async fn search(
    http: &reqwest::Client,
    hub: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<FoundRepo>, ModelHubError> {
    let q = check_query(query)?;
    let hub = hub.trim_end_matches('/');
    let url = reqwest::Url::parse_with_params(
        &format!("{hub}/api/models"),
        [
            ("search", q),
            ("filter", "gguf"),
            ("sort", "downloads"),
            ("direction", "-1"),
            ("limit", &limit.clamp(1, MAX_LIMIT).to_string()),
            ("expand", "downloads"),
            ("expand", "likes"),
            ("expand", "lastModified"),
        ],
    )
    .map_err(|e| ModelHubError::BadListing(e.to_string()))?;
    let body = get_json(http, url.as_str())
        .await?
        .ok_or_else(|| ModelHubError::Status {
            status: 404,
            url: url.to_string(),
        })?;
    let mut hits: Vec<Hit> =
        serde_json::from_slice(&body).map_err(|e| ModelHubError::BadListing(e.to_string()))?;
    // The hub's word on how many is not taken: each hit costs a listing.
    hits.truncate(limit.clamp(1, MAX_LIMIT));
    let ids: Vec<String> = hits.iter().map(|h| h.id.clone()).collect();
    let listed: Vec<_> = futures_util::stream::iter(ids)
        .map(|id| async move { files_of(http, hub, &id).await })
        .buffered(LISTINGS_AT_ONCE)
        .collect()
        .await;
    Ok(hits
        .into_iter()
        .zip(listed)
        .map(|(h, files)| {
            let (files, error) = match files {
                Ok(f) => (f, None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            };
            FoundRepo {
                id: h.id,
                downloads: h.downloads,
                likes: h.likes,
                last_modified: h.last_modified,
                files,
                error,
            }
        })
        .collect())
}

/// A repository's models: its GGUF files (vision projectors left out), shards together,
/// smallest first.
pub async fn files_of(
    http: &reqwest::Client,
    hub: &str,
    repo: &str,
) -> Result<Vec<FoundFile>, ModelHubError> {
    let url = format!(
        "{hub}/api/models/{}/tree/{REVISION}?recursive=true",
        ModelHubFile::encoded(repo)
    );
    let body = get_json(http, &url)
        .await?
        .ok_or(ModelHubError::Status { status: 404, url })?;
    let entries: Vec<TreeEntry> =
        serde_json::from_slice(&body).map_err(|e| ModelHubError::BadListing(e.to_string()))?;
    Ok(models_in(repo, &entries))
}

fn models_in(repo: &str, entries: &[TreeEntry]) -> Vec<FoundFile> {
    let mut out: Vec<FoundFile> = Vec::new();
    for e in entries.iter().filter(|e| e.kind == "file") {
        let name = e.path.rsplit('/').next().unwrap_or(&e.path);
        let lower = name.to_ascii_lowercase();
        // Only names the models folder can hold as they are (no `\`, no `..`, no drive).
        if !lower.ends_with(".gguf")
            || is_projector(name)
            || !plain_name(name)
            || name.contains(':')
        {
            continue;
        }
        let size = e.lfs.as_ref().map_or(e.size, |l| l.size);
        if let Some((model, _, count)) = split_shard(name) {
            let first = hearth_protocol::ids::shard_file(model, 1, count);
            let folder = e.path.rsplit_once('/').map(|(d, _)| d);
            let spec_path = folder.map_or_else(|| first.clone(), |d| format!("{d}/{first}"));
            let spec = format!("{repo}/{spec_path}");
            match out.iter_mut().find(|f| f.spec == spec) {
                Some(f) => f.size += size,
                None => out.push(FoundFile {
                    name: first,
                    spec,
                    size,
                    quant: quant_in_name(name).map(str::to_owned),
                    shards: count,
                    projector_size: None,
                }),
            }
        } else {
            out.push(FoundFile {
                name: name.to_owned(),
                spec: format!("{repo}/{}", e.path),
                size,
                quant: quant_in_name(name).map(str::to_owned),
                shards: 1,
                projector_size: None,
            });
        }
    }
    for f in &mut out {
        f.projector_size = projector_beside(repo, f, entries);
    }
    out.sort_by(|a, b| a.size.cmp(&b.size).then_with(|| a.name.cmp(&b.name)));
    out
}

/// The size of the projector a download of `file` brings: the one of its folder
/// [`best_projector`] picks.
fn projector_beside(repo: &str, file: &FoundFile, entries: &[TreeEntry]) -> Option<u64> {
    let path = file.spec.strip_prefix(repo)?.trim_start_matches('/');
    let folder = path.rsplit_once('/').map_or("", |(d, _)| d);
    let in_folder = entries
        .iter()
        .filter(|e| e.kind == "file" && e.path.rsplit_once('/').map_or("", |(d, _)| d) == folder);
    let best = best_projector(in_folder.map(|e| e.path.as_str()), &file.name)?;
    let entry = entries.iter().find(|e| e.path == best)?;
    Some(entry.lfs.as_ref().map_or(entry.size, |l| l.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, size: u64, lfs: bool) -> TreeEntry {
        serde_json::from_value(serde_json::json!({
            "type": "file", "path": path, "size": if lfs { 134 } else { size },
            "lfs": if lfs { serde_json::json!({"oid": "ab".repeat(32), "size": size}) } else { serde_json::Value::Null },
        }))
        .unwrap()
    }

    #[test]
    fn files_are_models_with_their_quantisation_and_shards_summed() {
        let entries = vec![
            entry("README.md", 10, false),
            entry("Model-Q8_0.gguf", 800, true),
            entry("Model-Q4_K_M.gguf", 500, true),
            entry("mmproj-Model-f16.gguf", 300, true),
            entry("BF16/Model-BF16-00001-of-00002.gguf", 1000, true),
            entry("BF16/Model-BF16-00002-of-00002.gguf", 900, true),
            entry("..\\..\\evil.gguf", 1, true),
        ];
        let files = models_in("me/Model-GGUF", &entries);
        type Row<'a> = (&'a str, u64, Option<&'a str>, u32, Option<u64>);
        let names: Vec<Row<'_>> = files
            .iter()
            .map(|f| {
                let spec = f.spec.as_str();
                (spec, f.size, f.quant.as_deref(), f.shards, f.projector_size)
            })
            .collect();
        // The projector beside the top folder's models comes with them (and counts in their
        // size to fit), not with the split model's in another folder.
        assert_eq!(
            names,
            [
                (
                    "me/Model-GGUF/Model-Q4_K_M.gguf",
                    500,
                    Some("Q4_K_M"),
                    1,
                    Some(300)
                ),
                (
                    "me/Model-GGUF/Model-Q8_0.gguf",
                    800,
                    Some("Q8_0"),
                    1,
                    Some(300)
                ),
                (
                    "me/Model-GGUF/BF16/Model-BF16-00001-of-00002.gguf",
                    1900,
                    Some("BF16"),
                    2,
                    None
                ),
            ]
        );
    }

    #[test]
    fn queries_are_bounded() {
        assert!(check_query("  ").is_err());
        assert!(check_query(&"x".repeat(201)).is_err());
        assert!(check_query("a\nb").is_err());
        assert_eq!(check_query(" smollm ").unwrap(), "smollm");
    }
}
