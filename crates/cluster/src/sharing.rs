//! Serving this node's model files to peers over cluster connections (NOTES.md: `modelQuery`,
//! `modelTransferRequest`, `modelTransferChunk`, `modelTransferComplete`): a query for a model
//! of this node's folder is answered with its size and its SHA-256 (Hearth's extension); a
//! transfer streams the file in 1 MiB chunks, each read as it goes out through a small outbox
//! of the connection's own, so no file is ever held in memory, and pauses between chunks while
//! the engine generates (transfers yield to decoding). A Hearth peer may ask for a byte range
//! (a resumed transfer, or one of several sources), and the model's vision projector, offered
//! and sent under the name a receiver gives it. Fetching is `hearth_models::sharing`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hearth_protocol::cluster::{
    HearthChunk, Message, ModelFileOffer, ModelQuery, ModelQueryResponse, ModelTransferChunk,
    ModelTransferComplete, ModelTransferRequest, PeerUuid, BINARY_CHUNK_VERSION,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use hearth_models::sharing::{Sharing, CHUNK_BYTES};
use hearth_models::ModelHost;
use hearth_route::Router;
use hearth_store::Store;

/// While the engine generates, the pause after each chunk served: decoding keeps the cores.
const GENERATING_PAUSE: Duration = Duration::from_millis(20);
/// Transfers one connection may have served at once; more are answered empty at once.
pub(crate) const SERVED_AT_ONCE: usize = 4;

/// What serving model files needs of this node: its models folder (the route's registry), the
/// files' digests kept in the store, whether its engine is generating, and the counters.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    pub(crate) router: Router,
    pub(crate) store: Store,
    pub(crate) host: Arc<ModelHost>,
    pub(crate) sharing: Arc<Sharing>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The files of model `name` in this node's folder, in order, when it may be shared: a plain
/// name (no path, no `..`) of a model in one file, or of a split model with every shard here.
fn shareable(state: &Files, name: &str) -> Option<Vec<PathBuf>> {
    // The registry finds plain names only.
    state.router.registry().files_of(name)
}

/// The vision projector that goes with a model of `files`, if one is beside it: the name it is
/// offered under (`mmproj-<first file>`, as a receiver places it) and where it is here.
fn projector_of(files: &[PathBuf]) -> Option<(String, PathBuf)> {
    let first = files.first()?;
    let path = hearth_engine::find_projector(first)?;
    Some((format!("mmproj-{}", name_of(first)), path))
}

/// A file's name (as chunks carry it).
fn name_of(path: &std::path::Path) -> String {
    path.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Append `n` bytes of `file` from `pos` to `buf` (read into its spare room, which is not
/// zeroed first).
fn read_at(file: &std::fs::File, pos: u64, n: u64, buf: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::{Read as _, Seek as _};
    let mut f = file;
    f.seek(std::io::SeekFrom::Start(pos))?;
    if f.take(n).read_to_end(buf)? as u64 != n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The answer to a peer's query: the model's size and SHA-256, or for a split model the size
/// and SHA-256 of each shard.
pub(crate) async fn answer(state: &Files, q: ModelQuery) -> Message {
    let mut files = Vec::new();
    let paths = shareable(state, &q.model_id).unwrap_or_default();
    for path in &paths {
        let Ok(meta) = std::fs::metadata(path) else {
            files.clear();
            break;
        };
        let sha256 = hearth_models::digest::sha256(&state.store, path, None).await;
        files.push(ModelFileOffer {
            file_name: name_of(path),
            size_bytes: meta.len(),
            sha256,
        });
    }
    let projector = match projector_of(&paths) {
        Some((file_name, path)) if !files.is_empty() => match std::fs::metadata(&path) {
            Ok(meta) => Some(ModelFileOffer {
                file_name,
                size_bytes: meta.len(),
                sha256: hearth_models::digest::sha256(&state.store, &path, None).await,
            }),
            Err(_) => None,
        },
        _ => None,
    };
    let total = (!files.is_empty()).then(|| files.iter().map(|f| f.size_bytes).sum());
    // A split model's files (even one shard: its file's name is not the model's) are checked
    // one by one: it has no SHA-256 of its own.
    let split = files
        .iter()
        .any(|f| hearth_protocol::ids::split_shard(&f.file_name).is_some());
    let (sha256, files) = if !split {
        (files.pop().map(|f| f.sha256), Vec::new())
    } else if files.iter().any(|f| f.sha256.is_empty()) {
        (None, Vec::new())
    } else {
        (None, files)
    };
    Message::ModelQueryResponse(ModelQueryResponse {
        model_id: q.model_id,
        available: total.is_some(),
        total_size_bytes: total,
        sha256: sha256.filter(|s| !s.is_empty()),
        files,
        projector: projector.filter(|p| !p.sha256.is_empty()),
    })
}

/// Serve a peer's transfer request through `out`: the chunks of the range asked for (the whole
/// file without one; every file of a split model, one after another, unless one is named),
/// then `modelTransferComplete`. The chunks are binary when the peer asked for them and
/// `binary` says the connection can carry them (a Hearth peer's), else base64 in JSON. A model
/// this node cannot share, or a file that is not one of its, completes at once, empty. Stops
/// when `stop` fires.
pub(crate) async fn send(
    state: Files,
    req: ModelTransferRequest,
    out: mpsc::Sender<Message>,
    stop: CancellationToken,
    binary: bool,
) {
    let binary = binary && req.binary_chunks == BINARY_CHUNK_VERSION;
    let files = shareable(&state, &req.model_id).unwrap_or_default();
    let projector = projector_of(&files);
    // Each file to send, under the name its chunks carry, with the range of it.
    let range = |p: PathBuf| (name_of(&p), p, req.offset.unwrap_or(0), req.length);
    let asked: Vec<(String, PathBuf, u64, Option<u64>)> = match (&req.file_name, projector) {
        (Some(f), Some((name, path))) if name == *f => {
            vec![(name, path, req.offset.unwrap_or(0), req.length)]
        }
        (Some(f), _) => files
            .into_iter()
            .filter(|p| name_of(p) == *f)
            .map(range)
            .collect(),
        (None, _) if files.len() == 1 => files.into_iter().map(range).collect(),
        (None, _) => files
            .into_iter()
            .map(|p| (name_of(&p), p, 0, None))
            .collect(),
    };
    let count = asked.len();
    if asked.is_empty() {
        tracing::info!(model = %req.model_id.chars().take(200).collect::<String>(), "a peer asked for a model this node does not share");
    }
    let to = Outgoing {
        state: &state,
        id: &req.transfer_id,
        model: &req.model_id,
        out: &out,
        stop: &stop,
        binary,
    };
    // As the reference sends a model of several files, only the last file's last chunk is
    // flagged (NOTES.md: a file ends when the next one starts).
    for (i, (name, path, offset, length)) in asked.into_iter().enumerate() {
        if !to.file(name, &path, offset, length, i + 1 == count).await {
            return;
        }
    }
    let _ = out.send(to.complete()).await;
}

/// Where one transfer's chunks go.
struct Outgoing<'a> {
    state: &'a Files,
    id: &'a PeerUuid,
    model: &'a str,
    out: &'a mpsc::Sender<Message>,
    stop: &'a CancellationToken,
    binary: bool,
}

impl Outgoing<'_> {
    /// The transfer's end.
    fn complete(&self) -> Message {
        Message::ModelTransferComplete(ModelTransferComplete {
            transfer_id: self.id.clone(),
            model_id: self.model.to_owned(),
        })
    }

    /// Send `length` bytes (to the end without) from `offset` of the file at `path`, its
    /// chunks named `file_name`, its last chunk flagged when `last_file`. False when the
    /// transfer is over: stopped, the peer gone, or the file unreadable (then completed short:
    /// the peer goes on from another source).
    async fn file(
        &self,
        file_name: String,
        path: &std::path::Path,
        offset: u64,
        length: Option<u64>,
        last_file: bool,
    ) -> bool {
        let file = match std::fs::File::open(path) {
            Ok(f) => Arc::new(f),
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "a shared model cannot be read");
                let _ = self.out.send(self.complete()).await;
                return false;
            }
        };
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let start = offset.min(size);
        let end = length.map_or(size, |l| start.saturating_add(l).min(size));
        tracing::info!(file = %file_name, start, end, "serving a model transfer");
        let mut pos = start;
        while pos < end {
            let n = CHUNK_BYTES.min(end - pos);
            // A place in the outbox first: a chunk is read only when it can go out.
            let permit = tokio::select! {
                p = self.out.reserve() => match p { Ok(p) => p, Err(_) => return false },
                () = self.stop.cancelled() => return false,
            };
            let f = file.clone();
            let last = last_file && pos + n == end;
            let (id, name) = (self.id.clone(), file_name.clone());
            let binary = self.binary;
            // Read straight into the message that goes out (this task alone reads the file).
            let read = tokio::task::spawn_blocking(move || -> std::io::Result<Message> {
                let read = |buf: &mut Vec<u8>| read_at(&f, pos, n, buf);
                if binary {
                    let c = HearthChunk::build(id, name, pos, last, n as usize, read)?;
                    return Ok(Message::HearthChunk(c));
                }
                let mut buf = Vec::with_capacity(n as usize);
                read(&mut buf)?;
                Ok(Message::ModelTransferChunk(ModelTransferChunk {
                    transfer_id: id,
                    file_name: name,
                    offset: pos,
                    data: ModelTransferChunk::encode(&buf),
                    is_last_chunk: last,
                }))
            })
            .await;
            let chunk = match read {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "reading a shared model failed; the transfer stops");
                    permit.send(self.complete());
                    return false;
                }
                Err(_) => return false,
            };
            permit.send(chunk);
            self.state.sharing.count_served(n);
            pos += n;
            let pause = match (
                self.state.host.stats().active > 0,
                self.state.sharing.pace(),
            ) {
                (true, p) => Some(p.unwrap_or_default().max(GENERATING_PAUSE)),
                (false, p) => p,
            };
            if let Some(p) = pause {
                tokio::select! {
                    () = tokio::time::sleep(p) => {}
                    () = self.stop.cancelled() => return false,
                }
            }
        }
        true
    }
}
