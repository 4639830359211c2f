//! Where a download comes from: a Hugging Face-style hub (`--hub-url`). A model is named
//! `OWNER/REPO/FILE.gguf` (the file may sit in a folder of the repository; `hf.co/` in front
//! is accepted, as Ollama's clients write it). The file is read from
//! `{hub}/{OWNER}/{REPO}/resolve/main/{FILE}`, and its size and SHA-256 from the hub's LFS
//! metadata in the repository's file listing (`{hub}/api/models/{OWNER}/{REPO}/tree/main/{DIR}`),
//! or, from a mirror without listings, from the `resolve` answer's headers (`X-Linked-Etag`,
//! `X-Linked-Size`), as the hub's own client reads them.

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use serde::Deserialize;

use super::registry::{is_projector, plain_name};

/// The public hub.
pub const DEFAULT_HUB_URL: &str = "https://huggingface.co";
/// The revision downloads take.
pub(crate) const REVISION: &str = "main";
/// A file listing is small; anything past this is not one.
const MAX_LISTING_BYTES: usize = 8 << 20;

/// What a URL path segment may not hold as is.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelHubError {
    #[error("'{0}' is not a model to download: name a file on the hub as OWNER/REPO/FILE.gguf (for example bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_K_M.gguf), or a model a peer of this cluster has by its name")]
    BadName(String),
    #[error("'{0}' is a vision projector, not a model: download its model, and the projector in its folder comes with it")]
    Projector(String),
    #[error("the hub has no file {file} in {repo}")]
    NotFound { repo: String, file: String },
    #[error("the hub gives no SHA-256 for {0} (it is not stored with LFS), so it cannot be checked; download refused")]
    NoDigest(String),
    #[error("the hub answered {status} for {url}")]
    Status { status: u16, url: String },
    #[error("the hub could not be reached: {0}")]
    Unreachable(String),
    #[error("the hub's file listing is not what it should be: {0}")]
    BadListing(String),
    #[error("'{0}' is not a search: give a few words of a model's name (at most 200 bytes)")]
    BadQuery(String),
}

impl ModelHubError {
    /// Whether trying again later may work (the network, or the hub busy).
    pub fn is_transient(&self) -> bool {
        match self {
            ModelHubError::Unreachable(_) => true,
            ModelHubError::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

/// A file of a hub repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelHubFile {
    /// `OWNER/REPO`.
    pub repo: String,
    /// Its path in the repository.
    pub path: String,
}

/// What the hub says of a file: what must arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
}

impl ModelHubFile {
    /// `OWNER/REPO/[DIR/]FILE.gguf`, with `hf.co/` or `huggingface.co/` in front or not.
    pub fn parse(spec: &str) -> Result<Self, ModelHubError> {
        let bad = || ModelHubError::BadName(spec.chars().take(300).collect());
        let s = spec.trim();
        let s = ["https://", "http://"]
            .iter()
            .fold(s, |s, p| s.strip_prefix(p).unwrap_or(s));
        let s = ["hf.co/", "huggingface.co/"]
            .iter()
            .fold(s, |s, p| s.strip_prefix(p).unwrap_or(s));
        let parts: Vec<&str> = s.split('/').collect();
        if parts.len() < 3 {
            return Err(bad());
        }
        let ok = |p: &&str| {
            !p.is_empty()
                && *p != "."
                && *p != ".."
                && !p.contains('\\')
                && !p.chars().any(char::is_control)
        };
        if !parts.iter().all(ok) {
            return Err(bad());
        }
        let file = parts[parts.len() - 1];
        // Lowercase, as the models folder lists them.
        if !file.ends_with(".gguf") || !plain_name(file) {
            return Err(bad());
        }
        if is_projector(file) {
            return Err(ModelHubError::Projector(file.to_owned()));
        }
        Ok(Self {
            repo: format!("{}/{}", parts[0], parts[1]),
            path: parts[2..].join("/"),
        })
    }

    /// The name it takes in the models folder: the file's own name.
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// The file named `name` in the same folder of the same repository.
    pub fn sibling(&self, name: &str) -> ModelHubFile {
        let path = match self.path.rsplit_once('/') {
            Some((folder, _)) => format!("{folder}/{name}"),
            None => name.to_owned(),
        };
        ModelHubFile {
            repo: self.repo.clone(),
            path,
        }
    }

    /// `OWNER/REPO/PATH`, as a user names it.
    pub fn spec(&self) -> String {
        format!("{}/{}", self.repo, self.path)
    }

    pub(crate) fn encoded(path: &str) -> String {
        path.split('/')
            .map(|p| utf8_percent_encode(p, SEGMENT).to_string())
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Where its bytes are.
    pub fn url(&self, hub: &str) -> String {
        format!(
            "{}/{}/resolve/{REVISION}/{}",
            hub.trim_end_matches('/'),
            Self::encoded(&self.repo),
            Self::encoded(&self.path)
        )
    }

    /// The listing of the folder it is in.
    fn listing_url(&self, hub: &str) -> String {
        let dir = self.path.rsplit_once('/').map(|(d, _)| d);
        let mut url = format!(
            "{}/api/models/{}/tree/{REVISION}",
            hub.trim_end_matches('/'),
            Self::encoded(&self.repo)
        );
        if let Some(d) = dir {
            url.push('/');
            url.push_str(&Self::encoded(d));
        }
        url
    }

    /// The vision projector beside it in its repository's folder (an `mmproj*.gguf`, as
    /// llama.cpp's converters name them), the most precise first (f16, bf16, f32, q8, then
    /// any); `None` when the folder has none or lists nothing.
    pub async fn projector(
        &self,
        http: &reqwest::Client,
        hub: &str,
    ) -> Result<Option<ModelHubFile>, ModelHubError> {
        let url = self.listing_url(hub);
        let Some(body) = get_json(http, &url).await? else {
            return Ok(None);
        };
        let entries: Vec<TreeEntry> =
            serde_json::from_slice(&body).map_err(|e| ModelHubError::BadListing(e.to_string()))?;
        let files = entries
            .iter()
            .filter(|e| e.kind == "file")
            .map(|e| e.path.as_str());
        let best = best_projector(files, self.file_name());
        Ok(best.map(|path| ModelHubFile {
            repo: self.repo.clone(),
            path: path.to_owned(),
        }))
    }

    /// Its size and SHA-256, from the hub's LFS metadata.
    pub async fn lookup(&self, http: &reqwest::Client, hub: &str) -> Result<Remote, ModelHubError> {
        let url = self.listing_url(hub);
        let Some(body) = get_json(http, &url).await? else {
            // No listing: a mirror that serves files only says it in their headers.
            return self.lookup_by_head(hub).await;
        };
        let entries: Vec<TreeEntry> =
            serde_json::from_slice(&body).map_err(|e| ModelHubError::BadListing(e.to_string()))?;
        let entry = entries
            .into_iter()
            .find(|e| e.path == self.path && e.kind == "file")
            .ok_or_else(|| self.not_found())?;
        let lfs = entry
            .lfs
            .ok_or_else(|| ModelHubError::NoDigest(self.spec()))?;
        let sha256 = lfs.oid.to_ascii_lowercase();
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ModelHubError::BadListing(format!(
                "the LFS oid of {} is not a SHA-256",
                self.path
            )));
        }
        Ok(Remote {
            size: lfs.size,
            sha256,
        })
    }

    /// Its size and SHA-256 from the headers of its `resolve` answer, as the hub's own client
    /// reads them (`X-Linked-Etag`, `X-Linked-Size`, else `ETag` and `Content-Length`): for a
    /// mirror that serves files but no listing. The answer is not followed past a redirect
    /// (the headers are on it).
    async fn lookup_by_head(&self, hub: &str) -> Result<Remote, ModelHubError> {
        let url = self.url(hub);
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(std::time::Duration::from_secs(15))
            .timeout(std::time::Duration::from_secs(60))
            .user_agent(concat!("hearth/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ModelHubError::Unreachable(e.to_string()))?;
        let resp = http
            .head(&url)
            .send()
            .await
            .map_err(|e| ModelHubError::Unreachable(e.to_string()))?;
        let status = resp.status();
        if status.as_u16() == 404 {
            return Err(self.not_found());
        }
        if !(status.is_success() || status.is_redirection()) {
            return Err(ModelHubError::Status {
                status: status.as_u16(),
                url,
            });
        }
        let header = |names: [&str; 2]| {
            names.iter().find_map(|n| {
                resp.headers()
                    .get(*n)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            })
        };
        let etag = header(["x-linked-etag", "etag"]).unwrap_or_default();
        let sha256 = etag
            .trim_start_matches("W/")
            .trim_matches('"')
            .to_ascii_lowercase();
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ModelHubError::NoDigest(self.spec()));
        }
        let size = header(["x-linked-size", "content-length"])
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| ModelHubError::BadListing(format!("{url} says no size")))?;
        Ok(Remote { size, sha256 })
    }

    fn not_found(&self) -> ModelHubError {
        ModelHubError::NotFound {
            repo: self.repo.clone(),
            file: self.path.clone(),
        }
    }
}

/// The projector among `paths` (a folder's files) that goes with model file `model`: the one
/// named for it first (a folder may hold several models'), then the most precise.
pub(crate) fn best_projector<'a>(
    paths: impl Iterator<Item = &'a str>,
    model: &str,
) -> Option<&'a str> {
    paths
        .filter(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            is_projector(name) && plain_name(name)
        })
        .min_by_key(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            let shared = shared_stem(name, model);
            (std::cmp::Reverse(shared), projector_rank(p), p.to_string())
        })
}

/// How many leading characters a projector's name shares with the model's, both without
/// `mmproj`, `.gguf` and a trailing quantisation (`gemma-3-4b-it` of
/// `gemma-3-4b-it-Q4_K_M.gguf`), ignoring case: the quantisations of the two files say
/// nothing of whether they belong together.
fn shared_stem(projector: &str, model: &str) -> usize {
    let stem = |name: &str| {
        let lower = name.to_ascii_lowercase().replacen("mmproj", "", 1);
        let lower = lower
            .trim_end_matches(".gguf")
            .trim_start_matches(['-', '_', '.'])
            .to_owned();
        match lower.rfind(['-', '.']) {
            Some(at) if is_quant(&lower[at + 1..]) => lower[..at].to_owned(),
            _ => lower,
        }
    };
    let (p, m) = (stem(projector), stem(model));
    p.chars().zip(m.chars()).take_while(|(a, b)| a == b).count()
}

/// A quantisation's name as files end with it: `q4`, `q4_k_m`, `iq2_xxs`, `f16`, `bf16`.
fn is_quant(part: &str) -> bool {
    let rest = ["iq", "q", "bf", "f"]
        .iter()
        .find_map(|p| part.strip_prefix(p))
        .unwrap_or("");
    rest.starts_with(|c: char| c.is_ascii_digit())
}

/// How much of the projector's precision a file keeps: lower first.
fn projector_rank(path: &str) -> u8 {
    let lower = path.to_ascii_lowercase();
    let has = |q: &str| lower.contains(q);
    if has("bf16") {
        1
    } else if has("f16") {
        0
    } else if has("f32") {
        2
    } else if has("q8") {
        3
    } else {
        4
    }
}

/// The body of a JSON answer of the hub's API, bounded (a listing or a search is small);
/// `None` for a 404.
pub(crate) async fn get_json(
    http: &reqwest::Client,
    url: &str,
) -> Result<Option<Vec<u8>>, ModelHubError> {
    let resp = http
        .get(url)
        .send()
        .await
        .map_err(|e| ModelHubError::Unreachable(e.to_string()))?;
    let status = resp.status().as_u16();
    if status == 404 {
        return Ok(None);
    }
    if !resp.status().is_success() {
        return Err(ModelHubError::Status {
            status,
            url: url.to_owned(),
        });
    }
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_LISTING_BYTES as u64)
    {
        return Err(ModelHubError::BadListing("too large".into()));
    }
    let mut resp = resp;
    let mut body = Vec::new();
    while let Some(piece) = resp
        .chunk()
        .await
        .map_err(|e| ModelHubError::Unreachable(e.to_string()))?
    {
        if body.len() + piece.len() > MAX_LISTING_BYTES {
            return Err(ModelHubError::BadListing("too large".into()));
        }
        body.extend_from_slice(&piece);
    }
    Ok(Some(body))
}

/// One entry of a repository's file listing.
#[derive(Debug, Deserialize)]
pub(crate) struct TreeEntry {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) path: String,
    #[serde(default)]
    pub(crate) size: u64,
    #[serde(default)]
    pub(crate) lfs: Option<Lfs>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Lfs {
    pub(crate) oid: String,
    pub(crate) size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_precise_projector_is_taken() {
        let mut names = [
            "mmproj-Model-Q8_0.gguf",
            "mmproj-Model-bf16.gguf",
            "mmproj-model-f16.gguf",
            "mmproj-Model-q4.gguf",
        ];
        names.sort_by_key(|p| projector_rank(p));
        assert_eq!(names[0], "mmproj-model-f16.gguf");
        assert_eq!(names[1], "mmproj-Model-bf16.gguf");
        assert_eq!(names[2], "mmproj-Model-Q8_0.gguf");
        assert!(is_projector("SmolVLM-256M-mmproj-f16.gguf"));
        assert!(!is_projector("SmolVLM-256M-Q8_0.gguf"));
        // A folder of several models: the projector named for this one.
        // Quantisations never count: f16 and Q8_0 projectors of one model tie, and f16 wins.
        assert_eq!(
            shared_stem("mmproj-Tiny-Q8_0.gguf", "Tiny-Q4.gguf"),
            shared_stem("mmproj-Tiny-f16.gguf", "Tiny-Q4.gguf")
        );
        assert!(
            shared_stem("mmproj-gemma-3-4b-it-f16.gguf", "gemma-3-4b-it-Q4_K_M.gguf")
                > shared_stem(
                    "mmproj-gemma-3-12b-it-f16.gguf",
                    "gemma-3-4b-it-Q4_K_M.gguf"
                )
        );
        assert_eq!(
            ModelHubFile::parse("o/r/mmproj-model-f16.gguf"),
            Err(ModelHubError::Projector("mmproj-model-f16.gguf".into()))
        );
    }

    #[test]
    fn names_are_owner_repo_and_a_gguf_file() {
        let f = ModelHubFile::parse("hf.co/owner/repo/sub dir/Model-Q4.gguf").unwrap();
        assert_eq!(f.repo, "owner/repo");
        assert_eq!(f.path, "sub dir/Model-Q4.gguf");
        assert_eq!(f.file_name(), "Model-Q4.gguf");
        assert_eq!(
            f.url("http://127.0.0.1:9/"),
            "http://127.0.0.1:9/owner/repo/resolve/main/sub%20dir/Model-Q4.gguf"
        );
        assert_eq!(
            f.listing_url("http://h"),
            "http://h/api/models/owner/repo/tree/main/sub%20dir"
        );
        for bad in [
            "owner/Model.gguf",
            "owner/repo/../x.gguf",
            "owner/repo/model.bin",
            "owner//repo/m.gguf",
            "owner/repo/a\\b.gguf",
            "",
        ] {
            assert!(ModelHubFile::parse(bad).is_err(), "{bad}");
        }
    }
}
