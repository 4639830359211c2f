//! Downloads of models into the models folder, from a hub ([`super::model_hub_download`]) or from
//! the cluster's peers ([`super::peer_download`]): the jobs, their progress (bytes, speed, time
//! left: what the UI, the CLI and Ollama's pull show), cancel, and resuming after a restart.
//! Each file goes to a partial file in `.downloads/` beside a note of what it must become, and
//! its SHA-256 is checked before it is moved into place (a mismatch deletes the partial).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::download_error::{io, DownloadError};
use super::model_hub::{ModelHubError, ModelHubFile};
use super::partial::{held_here, Note};

/// The folder of partial files, inside the models folder (the registry lists `*.gguf` only).
pub const PARTIAL_DIR: &str = ".downloads";
/// Attempts in a row that bring no byte before a download gives up (its partial is kept).
pub(super) const MAX_FAILURES: u32 = 8;
/// How long a cancel waits for this download's last write to let go of its partial.
const FORGET_TRIES: u32 = 20;
const FORGET_PAUSE: Duration = Duration::from_millis(50);
/// How often progress is published while bytes arrive.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// A connection that sends nothing for this long is dropped and the download resumed.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DownloadState {
    /// Asking the hub what the file is.
    Starting,
    Downloading,
    /// Interrupted: waiting to resume.
    Retrying,
    /// Checking the SHA-256.
    Verifying,
    Done,
    Failed,
    Cancelled,
}

impl DownloadState {
    pub fn is_over(self) -> bool {
        matches!(
            self,
            DownloadState::Done | DownloadState::Failed | DownloadState::Cancelled
        )
    }
}

/// One download as the UI and clients see it.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// The file's name in the models folder (and the model's id there, without `.gguf`).
    pub id: String,
    /// `OWNER/REPO/FILE` on the hub.
    pub model: String,
    pub state: DownloadState,
    pub received: u64,
    pub total: Option<u64>,
    pub bytes_per_second: f64,
    pub seconds_left: Option<f64>,
    /// The SHA-256 the hub announced.
    pub sha256: Option<String>,
    /// Interruptions so far.
    pub retries: u32,
    /// Bytes that were already here when this run of the download started (a resumed one).
    pub resumed_from: u64,
    /// The peers it comes from (empty from the hub).
    pub sources: Vec<String>,
    /// A split model's number of files (`sha256` is then the current one's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    pub error: Option<String>,
}

/// Where a download comes from.
#[derive(Debug, Clone)]
pub(super) enum Source {
    Hub(ModelHubFile),
    /// The cluster's peers, by the model's name in their folders.
    Peers(String),
}

impl Source {
    /// `OWNER/REPO/FILE.gguf` from the hub; a plain model name from peers.
    fn parse(spec: &str) -> Result<Self, DownloadError> {
        let s = spec.trim();
        if s.contains('/') {
            let file = ModelHubFile::parse(s)?;
            // A split model, named by any of its shards, is downloaded whole: named by its first.
            let first = hearth_protocol::ids::first_file(file.file_name());
            return Ok(Source::Hub(file.sibling(&first)));
        }
        let name = s.strip_suffix(".gguf").unwrap_or(s);
        if !super::registry::plain_name(name) {
            return Err(DownloadError::Hub(ModelHubError::BadName(
                s.chars().take(300).collect(),
            )));
        }
        Ok(Source::Peers(name.to_owned()))
    }

    /// The file's name in the models folder.
    fn file_name(&self) -> String {
        match self {
            Source::Hub(h) => h.file_name().to_owned(),
            Source::Peers(name) => format!("{name}.gguf"),
        }
    }

    pub(super) fn spec(&self) -> String {
        match self {
            Source::Hub(h) => h.spec(),
            Source::Peers(name) => name.clone(),
        }
    }
}

pub(super) struct Job {
    pub(super) id: String,
    pub(super) source: Source,
    pub(super) progress: Mutex<Progress>,
    /// The user's cancel (the partial is deleted); the node's stop keeps it.
    pub(super) cancel: CancellationToken,
    /// Why a peer's transfer was refused, when its cancel came from that.
    pub(super) refused: Mutex<Option<String>>,
    /// The file being written, when not `id` (a split model's shard).
    pub(super) writing: Mutex<Option<String>>,
    /// Every file of a split model's download (each may have a partial), and the files it
    /// moved into the folder or found there as its own: a cancel or a failure part way through
    /// a split model takes them all away.
    pub(super) files: Mutex<Vec<String>>,
    pub(super) placed: Mutex<Vec<String>>,
}

/// The downloads of this node (or of one `hearth-node models pull`).
pub struct Downloads {
    pub(super) models_dir: PathBuf,
    pub(super) hub: String,
    /// The cluster's connections, to fetch a model from peers (none in the CLI).
    pub(super) peers: Option<Arc<crate::sharing::Sharing>>,
    pub(super) http: reqwest::Client,
    jobs: Mutex<Vec<Arc<Job>>>,
    changed: watch::Sender<u64>,
    stop: CancellationToken,
    tasks: tokio_util::task::TaskTracker,
}

impl Downloads {
    /// The hub's GGUF repositories matching `query` (see [`crate::model_hub_search`]).
    pub async fn search(
        &self,
        query: &str,
        limit: usize,
    ) -> Result<Vec<crate::model_hub_search::FoundRepo>, crate::model_hub::ModelHubError> {
        crate::model_hub_search::search(&self.http, &self.hub, query, limit).await
    }

    /// The hub this node downloads from.
    pub fn hub_url(&self) -> &str {
        &self.hub
    }
}

impl std::fmt::Debug for Downloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downloads")
            .field("models_dir", &self.models_dir)
            .field("hub", &self.hub)
            .finish_non_exhaustive()
    }
}

impl Downloads {
    /// Downloads from `hub` into `models_dir`, until `stop` (partials are kept then).
    pub fn new(
        models_dir: PathBuf,
        hub: String,
        peers: Option<Arc<crate::sharing::Sharing>>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("hearth/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Arc::new(Self {
            models_dir,
            hub,
            peers,
            http,
            jobs: Mutex::default(),
            changed: watch::Sender::new(0),
            stop,
            tasks: tokio_util::task::TaskTracker::new(),
        })
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Job>>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn partial_dir(&self) -> PathBuf {
        self.models_dir.join(PARTIAL_DIR)
    }

    /// Start downloading `spec` (`OWNER/REPO/FILE.gguf`), or find it already under way.
    pub fn start(self: &Arc<Self>, spec: &str) -> Result<Progress, DownloadError> {
        let source = Source::parse(spec)?;
        let id = source.file_name();
        let mut jobs = self.jobs();
        if let Some(j) = jobs.iter().find(|j| j.id == id) {
            let p = lock(&j.progress).clone();
            if !p.state.is_over() {
                if p.model != source.spec() {
                    return Err(DownloadError::Busy {
                        file: id,
                        model: p.model,
                    });
                }
                return Ok(p);
            }
        }
        if self.models_dir.join(&id).exists() {
            return Err(DownloadError::Exists(id));
        }
        // A split model whole in the folder (one part way is completed from peers).
        if let Source::Peers(name) = &source {
            if super::registry::Registry::new(&self.models_dir)
                .files_of(name)
                .is_some()
            {
                return Err(DownloadError::Exists(name.clone()));
            }
        }
        jobs.retain(|j| j.id != id);
        let progress = Progress {
            id: id.clone(),
            model: source.spec(),
            state: DownloadState::Starting,
            received: 0,
            total: None,
            bytes_per_second: 0.0,
            seconds_left: None,
            sha256: None,
            retries: 0,
            resumed_from: 0,
            sources: Vec::new(),
            shards: None,
            error: None,
        };
        let job = Arc::new(Job {
            id: id.clone(),
            source,
            progress: Mutex::new(progress.clone()),
            cancel: self.stop.child_token(),
            refused: Mutex::new(None),
            writing: Mutex::new(None),
            files: Mutex::default(),
            placed: Mutex::default(),
        });
        jobs.push(job.clone());
        drop(jobs);
        let this = self.clone();
        self.tasks.spawn(async move { this.run(job).await });
        self.publish();
        Ok(progress)
    }

    /// Every download since the node started, oldest first.
    pub fn list(&self) -> Vec<Progress> {
        self.jobs()
            .iter()
            .map(|j| lock(&j.progress).clone())
            .collect()
    }

    pub fn get(&self, id: &str) -> Option<Progress> {
        self.jobs()
            .iter()
            .find(|j| j.id == id)
            .map(|j| lock(&j.progress).clone())
    }

    /// Cancel a download under way (its partial file is deleted). False when there is none.
    pub fn cancel(&self, id: &str) -> bool {
        let jobs = self.jobs();
        let Some(j) = jobs.iter().find(|j| j.id == id) else {
            return false;
        };
        if lock(&j.progress).state.is_over() {
            return false;
        }
        j.cancel.cancel();
        true
    }

    /// Completes once every download has stopped (after the stop token given at the start).
    pub async fn stopped(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Ticks whenever a download's progress changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Wait until download `id` is over, and how it ended.
    pub async fn wait(&self, id: &str) -> Option<Progress> {
        let mut rx = self.subscribe();
        loop {
            let p = self.get(id)?;
            if p.state.is_over() {
                return Some(p);
            }
            if rx.changed().await.is_err() {
                return self.get(id);
            }
        }
    }

    /// Resume the downloads a previous run left part way (their notes in `.downloads/`).
    pub fn resume_partials(self: &Arc<Self>) {
        let Ok(entries) = std::fs::read_dir(self.partial_dir()) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            // A note half written when the node stopped: the note it was replacing is whole.
            if let Some(id) = path.to_string_lossy().strip_suffix(".json.tmp") {
                // Unless another process (the command line) is writing that download now.
                let id = Path::new(id)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned());
                let (part, _) = self.partial_paths(&id.unwrap_or_default());
                if held_here(&part).is_some() || !part.exists() {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let note = Note::load(&path);
            match note {
                Some(n) => match self.start(&n.model) {
                    Ok(_) => tracing::info!(model = %n.model, "resuming a download"),
                    Err(e) => {
                        tracing::warn!(model = %n.model, error = %e, "a download left part way cannot resume")
                    }
                },
                None => tracing::warn!(path = %path.display(), "not a download note; left alone"),
            }
        }
    }

    fn publish(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(super) fn update(&self, job: &Job, f: impl FnOnce(&mut Progress)) {
        f(&mut lock(&job.progress));
        self.publish();
    }

    async fn run(self: Arc<Self>, job: Arc<Job>) {
        let result = match &job.source {
            Source::Hub(file) => self.fetch_from_hub(&job, file).await,
            Source::Peers(name) => self.fetch_from_peers(&job, name).await,
        };
        let refused = lock(&job.refused).clone();
        let result = match (result, refused) {
            (Err(DownloadError::Cancelled), Some(why)) => Err(DownloadError::BadPeer(why)),
            (r, _) => r,
        };
        let id = job.id.clone();
        match &result {
            Ok(()) => {
                tracing::info!(model = %id, "downloaded and verified");
                let _ = std::fs::remove_file(self.record_path(&job));
            }
            Err(DownloadError::Stopped) => {}
            // Another process's files: not this one's to touch.
            Err(DownloadError::Elsewhere(_)) => {}
            // Worth resuming later (the peers may be back): the partial and its note stay.
            Err(
                DownloadError::GaveUp { .. }
                | DownloadError::Io(_)
                | DownloadError::NoPeerHas(_)
                | DownloadError::NoSpace { .. },
            ) => self.tidy(&job),
            Err(e @ DownloadError::Hub(h)) if h.is_transient() => {
                tracing::warn!(model = %id, error = %e, "download stopped; resumable");
            }
            Err(_) => self.forget(&job).await,
        }
        if let Err(e) = &result {
            tracing::warn!(model = %id, error = %e, "download ended");
        }
        self.update(&job, |p| {
            p.bytes_per_second = 0.0;
            p.seconds_left = None;
            match result {
                Ok(()) => {
                    p.state = DownloadState::Done;
                    p.seconds_left = Some(0.0);
                    // An interruption it came through is no error of the finished download.
                    p.error = None;
                }
                Err(DownloadError::Cancelled) => p.state = DownloadState::Cancelled,
                Err(e) => {
                    p.state = DownloadState::Failed;
                    p.error = Some(e.to_string());
                }
            }
        });
    }

    /// The files of `job` that may have a partial: a split model's shards, else its file.
    fn partial_names(&self, job: &Job) -> Vec<String> {
        let mut names = lock(&job.files).clone();
        names.extend(lock(&job.writing).clone());
        if names.is_empty() {
            names.push(job.id.clone());
        }
        names
    }

    /// A cancelled or failed download leaves nothing: its partials and notes (every note in
    /// `.downloads/` of the same download, from this run or an earlier one), and a split
    /// model's shards it placed. A partial is removed only while this process can hold it
    /// (another process may have taken it; a write of this download may still be ending).
    async fn forget(&self, job: &Job) {
        let spec = job.source.spec();
        let mut names = self.partial_names(job);
        if let Ok(entries) = std::fs::read_dir(self.partial_dir()) {
            for e in entries.flatten() {
                let file = e.file_name().to_string_lossy().into_owned();
                let Some(name) = file.strip_suffix(".json") else {
                    continue;
                };
                let note = Note::load(&e.path());
                if note.is_some_and(|n| n.model == spec) {
                    names.push(name.to_owned());
                }
            }
        }
        for name in names {
            let (part, note) = self.partial_paths(&name);
            let mut held = held_here(&part);
            for _ in 0..FORGET_TRIES {
                if held.is_some() || !part.exists() {
                    break;
                }
                tokio::time::sleep(FORGET_PAUSE).await;
                held = held_here(&part);
            }
            if held.is_none() && part.exists() {
                continue;
            }
            let _ = std::fs::remove_file(&part);
            let _ = std::fs::remove_file(&note);
        }
        for name in lock(&job.placed).drain(..) {
            let _ = std::fs::remove_file(self.models_dir.join(name));
        }
        let _ = std::fs::remove_file(self.record_path(job));
    }

    /// Where a split model's download records the shards it placed (a [`Note`] whose
    /// `placed` lists them).
    pub(super) fn record_path(&self, job: &Job) -> PathBuf {
        self.partial_dir().join(format!("{}.shards.json", job.id))
    }

    /// A download stopped to resume later keeps its partials; one with no note beside it
    /// (stopped before a byte was asked for) could never resume, and goes.
    fn tidy(&self, job: &Job) {
        for name in self.partial_names(job) {
            let (part, note) = self.partial_paths(&name);
            let held = held_here(&part);
            if part.exists() && !note.exists() && held.is_some() {
                let _ = std::fs::remove_file(&part);
            }
        }
    }

    /// A file whose bytes all arrived: when their SHA-256 `got` is the `expected` one, the
    /// partial `part` becomes `name` in the folder (unless the file is there already, or the
    /// download was cancelled while it was checked) and its note goes.
    pub(super) fn place(
        &self,
        job: &Job,
        (part, note): (&Path, &Path),
        name: String,
        expected: String,
        got: String,
    ) -> Result<(), DownloadError> {
        if got != expected {
            return Err(DownloadError::Mismatch { expected, got });
        }
        let to = self.models_dir.join(&name);
        if to.exists() {
            return Err(DownloadError::Exists(name));
        }
        if job.cancel.is_cancelled() {
            return Err(self.why_stopped());
        }
        std::fs::rename(part, &to).map_err(io)?;
        let placed = {
            let mut placed = lock(&job.placed);
            placed.push(name);
            placed.clone()
        };
        let _ = std::fs::remove_file(note);
        // A split model's shard: recorded, so a cancel after a restart takes it away too.
        if !lock(&job.files).is_empty() {
            let record = Note {
                model: job.source.spec(),
                sha256: String::new(),
                size: 0,
                segments: None,
                placed,
            };
            record.save(&self.record_path(job))?;
        }
        Ok(())
    }

    pub(super) fn partial_paths(&self, id: &str) -> (PathBuf, PathBuf) {
        let dir = self.partial_dir();
        (
            dir.join(format!("{id}.part")),
            dir.join(format!("{id}.json")),
        )
    }

    /// Why a job's cancel token fired: the node stops (the partial stays), or the user
    /// cancelled.
    pub(super) fn why_stopped(&self) -> DownloadError {
        if self.stop.is_cancelled() {
            DownloadError::Stopped
        } else {
            DownloadError::Cancelled
        }
    }

    /// Sleep `d`, unless the download is cancelled or the node stops first.
    pub(super) async fn pause(&self, job: &Job, d: Duration) -> Result<(), DownloadError> {
        tokio::select! {
            () = tokio::time::sleep(d) => Ok(()),
            () = job.cancel.cancelled() => Err(self.why_stopped()),
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The first byte of a `Content-Range: bytes FROM-TO/SIZE`.
pub(super) fn range_start(v: &str) -> Option<u64> {
    v.strip_prefix("bytes ")?
        .split('-')
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Speed and time left, smoothed, at most every [`PUBLISH_EVERY`].
pub(super) struct Meter {
    at: Instant,
    bytes: u64,
    speed: f64,
}

impl Meter {
    pub(super) fn new(bytes: u64) -> Self {
        Self {
            at: Instant::now(),
            bytes,
            speed: 0.0,
        }
    }

    pub(super) fn tick(&mut self, bytes: u64, total: u64) -> Option<(f64, Option<f64>)> {
        let elapsed = self.at.elapsed();
        if elapsed < PUBLISH_EVERY {
            return None;
        }
        let now = (bytes - self.bytes) as f64 / elapsed.as_secs_f64();
        self.speed = if self.speed == 0.0 {
            now
        } else {
            0.7 * self.speed + 0.3 * now
        };
        self.at = Instant::now();
        self.bytes = bytes;
        let left = (self.speed > 0.0).then(|| (total - bytes) as f64 / self.speed);
        Some((self.speed, left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges_give_their_start() {
        assert_eq!(range_start("bytes 100-199/200"), Some(100));
        assert_eq!(range_start("bytes */200"), None);
        assert_eq!(range_start("items 1-2/3"), None);
    }
}
