//! A download from the cluster's peers ([`crate::sharing`]): every connected peer is
//! asked for the model; those that have it with the same SHA-256 and size each send a range of
//! the file (up to [`MAX_SOURCES`] at once), written where it belongs in the partial file as it
//! arrives. The note beside the partial keeps how much of each range has arrived, so a
//! transfer cut by a lost peer goes on from another (or the same, back again), and one cut by
//! a restart resumes from its offsets. The whole file's SHA-256 is checked before it is moved
//! into place; a chunk with another file's name (a path, `..`) or out of place fails it. The
//! model's vision projector, when the peers offer one, comes first, the same way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::Digest as _;

use super::download::{lock, DownloadState, Downloads, Job, Meter, MAX_FAILURES};
use super::download_error::{io, DownloadError};
use super::partial::{hash_on, hash_prefix, open_partial, Note, Segment};
use super::shards::{Shard, Step, MAX_SHARDS};
use crate::sharing::{Offer, Piece, Sharing, CHUNK_BYTES};
use hearth_protocol::cluster::ModelFileOffer;

/// Peers sending ranges of one file at once.
const MAX_SOURCES: usize = 4;
/// How long the peers have to answer a query (a peer hashes a file it has not hashed yet).
const QUERY_WAIT: Duration = Duration::from_secs(30);
/// A peer silent this long in a transfer is taken as gone (its range goes on elsewhere).
const SILENT_PEER: Duration = Duration::from_secs(60);
/// The note is saved after about this many bytes of a range.
const NOTE_EVERY: u64 = 8 << 20;

/// One file to fetch from peers.
struct Wanted {
    /// Its name in the models folder, which every chunk must carry.
    file_name: String,
    /// The name a request gives it: a split model's shard (`None`: the model's one file).
    asked: Option<String>,
    sha256: String,
    size: u64,
    /// The bytes of the download before this file's (a split model's other shards), and of
    /// the whole download: its progress.
    base: u64,
    total: u64,
}

/// What the ranges' tasks share.
struct Shared {
    /// The model's name.
    name: String,
    /// The file.
    want: Wanted,
    offers: Mutex<Vec<Offer>>,
    segments: Mutex<Vec<Segment>>,
    received: AtomicU64,
    meter: Mutex<Meter>,
    file: Arc<std::fs::File>,
    note: std::path::PathBuf,
    /// The SHA-256 of the file's first bytes, fed as chunks arrive where it stops (the first
    /// range's, in order): only what it has not seen is read again to verify the file.
    hashed: Arc<Hashed>,
}

/// The SHA-256 of a file's first bytes, fed in order as they arrive.
struct Hashed {
    state: Mutex<(sha2::Sha256, u64)>,
    /// Where it stops, read without the lock: a chunk of another range is never due, and its
    /// check never waits for a chunk being hashed.
    to: AtomicU64,
}

impl Hashed {
    fn new(hasher: sha2::Sha256, to: u64) -> Self {
        Self {
            state: Mutex::new((hasher, to)),
            to: AtomicU64::new(to),
        }
    }

    fn due(&self, offset: u64) -> bool {
        self.to.load(Ordering::Acquire) == offset
    }

    /// Feed `data` found at `offset`, when the hash still stops there (checked under its lock:
    /// another range may have reset it). Blocking: one megabyte of SHA-256.
    fn feed(&self, offset: u64, data: &[u8]) {
        let mut h = lock(&self.state);
        if h.1 == offset {
            h.0.update(data);
            h.1 += data.len() as u64;
            self.to.store(h.1, Ordering::Release);
        }
    }

    /// Start again from nothing (the file may not have the bytes the hash has).
    fn reset(&self) {
        *lock(&self.state) = (sha2::Sha256::new(), 0);
        self.to.store(0, Ordering::Release);
    }

    /// The hash so far, and where it stops.
    fn snapshot(&self) -> (sha2::Sha256, u64) {
        let h = lock(&self.state);
        (h.0.clone(), h.1)
    }
}

impl Shared {
    fn save_note(&self) -> Result<(), DownloadError> {
        Note {
            model: self.name.clone(),
            sha256: self.want.sha256.clone(),
            size: self.want.size,
            segments: Some(lock(&self.segments).clone()),
            placed: Vec::new(),
        }
        .save(&self.note)
    }
}

/// The offers to take: those with a SHA-256 (a TealeNet peer gives none, so its file could
/// not be checked), or a split model's files with theirs, of the SHA-256s and size most peers
/// agree on.
fn agreed(offers: Vec<Offer>) -> Option<Vec<Offer>> {
    type Key = (
        Option<String>,
        Vec<hearth_protocol::cluster::ModelFileOffer>,
        u64,
    );
    let mut groups: Vec<(Key, Vec<Offer>)> = Vec::new();
    for o in offers {
        if o.sha256.is_none() && o.files.is_empty() {
            continue;
        }
        let key = (o.sha256.clone(), o.files.clone(), o.size);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(o),
            None => groups.push((key, vec![o])),
        }
    }
    groups
        .into_iter()
        .max_by_key(|(_, g)| g.len())
        .map(|(_, g)| g)
}

/// `size` bytes in `n` ranges of whole chunks.
fn split(size: u64, n: usize) -> Vec<Segment> {
    let chunks = size.div_ceil(CHUNK_BYTES).max(1);
    let per = chunks.div_ceil(n.max(1) as u64) * CHUNK_BYTES;
    let mut out = Vec::new();
    let mut start = 0;
    while start < size {
        let end = (start + per).min(size);
        out.push(Segment {
            start,
            end,
            done: 0,
        });
        start = end;
    }
    out
}

impl Downloads {
    /// Fetch model `name` from the peers that have it: its file, or a split model's shards one
    /// after another.
    pub(super) async fn fetch_from_peers(
        &self,
        job: &Job,
        name: &str,
    ) -> Result<(), DownloadError> {
        let sharing = self
            .peers
            .clone()
            .ok_or_else(|| DownloadError::NoPeerHas(name.to_owned()))?;
        let offers = self.find_offers(job, &sharing, name).await?;
        let first = offers[0].clone();
        let model_file = first.files.first().map_or(&job.id, |f| &f.file_name);
        let projector = self.projector_offered(&offers, model_file);
        let before = projector.as_ref().map_or(0, |(p, _)| p.size_bytes);
        if first.files.is_empty() {
            let total = before + first.size;
            self.fetch_projector_from_peers(job, &sharing, name, projector, total)
                .await?;
            let want = Wanted {
                file_name: job.id.clone(),
                asked: None,
                sha256: first.sha256.clone().unwrap_or_default(),
                size: first.size,
                base: before,
                total,
            };
            return self.fetch_file(job, &sharing, name, offers, want).await;
        }
        let files = &first.files;
        if files.len() > MAX_SHARDS {
            return Err(DownloadError::BadPeer(format!(
                "a model of {} files",
                files.len()
            )));
        }
        let count = u32::try_from(files.len()).unwrap_or(u32::MAX);
        for (i, f) in (1..).zip(files) {
            let expected = hearth_protocol::ids::shard_file(name, i, count);
            if f.file_name != expected {
                let shown: String = f.file_name.chars().take(200).collect();
                return Err(DownloadError::BadPeer(format!(
                    "a file named {shown:?} instead of {expected}"
                )));
            }
        }
        let shards: Vec<Shard> = files
            .iter()
            .map(|f| Shard {
                name: f.file_name.clone(),
                size: f.size_bytes,
                sha256: f.sha256.clone(),
            })
            .collect();
        let (steps, shards_total) = self.plan_split(job, &shards).await?;
        let total = before + shards_total;
        self.fetch_projector_from_peers(job, &sharing, name, projector, total)
            .await?;
        for Step { index, base } in steps {
            let f = &files[index];
            let holders = offers
                .iter()
                .filter(|o| o.has(Some(&f.file_name), f.size_bytes, &f.sha256))
                .cloned()
                .collect();
            let want = Wanted {
                file_name: f.file_name.clone(),
                asked: Some(f.file_name.clone()),
                sha256: f.sha256.clone(),
                size: f.size_bytes,
                base: before + base,
                total,
            };
            self.fetch_file(job, &sharing, name, holders, want).await?;
        }
        Ok(())
    }

    /// The vision projector the peers offer with a model whose (first) file is `model_file`,
    /// and the offers that have it, when this node lacks it: the one most peers offer (the
    /// first of those as many), named `mmproj-<model_file>` as this node places it (a
    /// projector under any other name is left alone).
    fn projector_offered(
        &self,
        offers: &[Offer],
        model_file: &str,
    ) -> Option<(ModelFileOffer, Vec<Offer>)> {
        let holding = |p: &ModelFileOffer| {
            offers
                .iter()
                .filter(|o| o.projector.as_ref() == Some(p))
                .count()
        };
        let projector = offers
            .iter()
            .filter_map(|o| o.projector.clone())
            .rev()
            .max_by_key(|p| holding(p))?;
        let expected = format!("mmproj-{model_file}");
        if projector.file_name != expected {
            let shown: String = projector.file_name.chars().take(200).collect();
            tracing::warn!(offered = %shown, %expected, "a peer offered a projector under another name; the model comes without it");
            return None;
        }
        if self.models_dir.join(&projector.file_name).exists() {
            return None;
        }
        let holders = offers
            .iter()
            .filter(|o| o.projector.as_ref() == Some(&projector))
            .cloned()
            .collect();
        Some((projector, holders))
    }

    /// Fetch the model's projector before the model (the first `size` bytes of a download of
    /// `total`), so that the model never appears without it. A projector that fails its check
    /// is left out, never the model.
    async fn fetch_projector_from_peers(
        &self,
        job: &Job,
        sharing: &Sharing,
        name: &str,
        projector: Option<(ModelFileOffer, Vec<Offer>)>,
        total: u64,
    ) -> Result<(), DownloadError> {
        let Some((p, holders)) = projector else {
            return Ok(());
        };
        tracing::info!(projector = %p.file_name, "fetching the model's projector from peers");
        let (part, note) = self.partial_paths(&p.file_name);
        let want = Wanted {
            file_name: p.file_name.clone(),
            asked: Some(p.file_name),
            sha256: p.sha256,
            size: p.size_bytes,
            base: 0,
            total,
        };
        match self.fetch_file(job, sharing, name, holders, want).await {
            // Stopped (by the user, or a peer sending what no peer may): the download ends.
            Err(e) if job.cancel.is_cancelled() => Err(e),
            // The peers' projector is not what they said (or does not fit): the model still
            // comes, without it, as a model that cannot see.
            Err(e) => {
                tracing::warn!(model = %name, error = %e, "the model's projector could not be fetched from peers; the model comes without it");
                let _ = std::fs::remove_file(part);
                let _ = std::fs::remove_file(note);
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// Fetch one file from `offers` (up to [`MAX_SOURCES`] ranges at once) into its partial,
    /// check its SHA-256 and move it into place.
    async fn fetch_file(
        &self,
        job: &Job,
        sharing: &Sharing,
        name: &str,
        offers: Vec<Offer>,
        want: Wanted,
    ) -> Result<(), DownloadError> {
        let (size, base, total) = (want.size, want.base, want.total);
        let (file_name, sha256) = (want.file_name.clone(), want.sha256.clone());
        *lock(&job.writing) = Some(file_name.clone());
        let (part, note_path) = self.partial_paths(&file_name);
        std::fs::create_dir_all(self.partial_dir()).map_err(io)?;
        let file = open_partial(&part)?;
        // The ranges already here, when the partial is of the same file.
        let had = file.metadata().map_err(io)?.len();
        let kept = Note::load(&note_path)
            .filter(|n| n.sha256 == sha256 && n.size == size && had == size)
            .and_then(|n| n.segments);
        let segments = match kept {
            Some(kept) => kept,
            None => {
                file.set_len(0).map_err(io)?;
                split(size, offers.len().min(MAX_SOURCES))
            }
        };
        let done: u64 = segments.iter().map(|s| s.done).sum();
        super::disk::ensure_room(&self.partial_dir(), size.saturating_sub(done))?;
        file.set_len(size).map_err(io)?;
        let already: u64 = segments.iter().map(|s| s.done).sum();
        // The first range's bytes already here start the hash.
        let first = segments.iter().find(|s| s.start == 0).map_or(0, |s| s.done);
        let hashed = Arc::new(Hashed::new(hash_prefix(part.clone(), first).await?, first));
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            want,
            segments: Mutex::new(segments),
            received: AtomicU64::new(already),
            meter: Mutex::new(Meter::new(base + already)),
            offers: Mutex::new(offers),
            file: Arc::new(file),
            note: note_path.clone(),
            hashed,
        });
        shared.save_note()?;
        self.update(job, |p| {
            p.total = Some(total);
            p.received = base + already;
            p.resumed_from += already;
            // The file's (a split model's current shard's: each is checked on its own).
            p.sha256 = Some(sha256.clone());
            p.state = DownloadState::Downloading;
            // The peers it comes from: those it came from so far stay listed.
            for o in lock(&shared.offers).iter() {
                if !p.sources.contains(&o.peer) {
                    p.sources.push(o.peer.clone());
                }
            }
        });
        let count = lock(&shared.segments).len();
        let ranges = (0..count).map(|i| self.fetch_range(job, sharing, &shared, i));
        let results = futures_util::future::join_all(ranges).await;
        shared.save_note()?;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            return Err(e);
        }
        self.update(job, |p| {
            p.received = base + size;
            p.state = DownloadState::Verifying;
        });
        let (hasher, seen) = shared.hashed.snapshot();
        let got = hex::encode(hash_on(part.clone(), hasher, seen, size).await?.finalize());
        // The partial stays open (and locked) until it is in place.
        self.place(job, (&part, &note_path), file_name, sha256, got)
    }

    /// The peers to fetch from, asking again (with backoff) while none has the model: peers
    /// connect some seconds after this node starts.
    async fn find_offers(
        &self,
        job: &Job,
        sharing: &Sharing,
        name: &str,
    ) -> Result<Vec<Offer>, DownloadError> {
        let mut delays =
            hearth_base::backoff::jittered(Duration::from_millis(500), Duration::from_secs(10));
        for attempt in 1..=MAX_FAILURES {
            let asked = tokio::select! {
                o = sharing.query(name, QUERY_WAIT) => o,
                () = job.cancel.cancelled() => return Err(self.why_stopped()),
            };
            if let Some(offers) = agreed(asked) {
                return Ok(offers);
            }
            if attempt == MAX_FAILURES {
                break;
            }
            self.update(job, |p| p.error = Some(format!("no peer has {name} yet")));
            self.pause(job, delays.next().unwrap_or(Duration::from_secs(10)))
                .await?;
        }
        Err(DownloadError::NoPeerHas(name.to_owned()))
    }

    /// Fetch range `i` to its end, from its own peer first and from the others when one is
    /// lost.
    async fn fetch_range(
        &self,
        job: &Job,
        sharing: &Sharing,
        shared: &Shared,
        i: usize,
    ) -> Result<(), DownloadError> {
        let mut failures = 0u32;
        let mut which = i;
        let mut delays =
            hearth_base::backoff::jittered(Duration::from_millis(300), Duration::from_secs(5));
        loop {
            let seg = lock(&shared.segments)[i];
            let from = seg.start + seg.done;
            if from >= seg.end {
                return Ok(());
            }
            let offer = {
                let offers = lock(&shared.offers);
                offers[which % offers.len()].clone()
            };
            let before = seg.done;
            let asked = shared.want.asked.as_deref();
            let outcome =
                match sharing.request(offer.conn, &shared.name, asked, from, seg.end - from) {
                    Ok(mut rx) => {
                        tokio::select! {
                            r = self.receive(job, shared, i, &mut rx) => r,
                            () = job.cancel.cancelled() => return Err(self.why_stopped()),
                        }
                    }
                    Err(e) => Err(e),
                };
            let _ = shared.save_note();
            let done = lock(&shared.segments)[i].done;
            match outcome {
                Ok(()) if seg.start + done >= seg.end => return Ok(()),
                Ok(()) => {
                    tracing::info!(peer = %offer.peer, "a peer ended its range early");
                }
                Err(why) => {
                    tracing::info!(peer = %offer.peer, %why, "a range from a peer stopped; going on from another");
                }
            }
            if done > before {
                failures = 0;
            }
            failures += 1;
            if failures >= MAX_FAILURES {
                return Err(DownloadError::GaveUp {
                    attempts: failures,
                    last: format!("the peers stopped sending {}", shared.name),
                });
            }
            self.update(job, |p| {
                p.retries += 1;
                p.state = DownloadState::Retrying;
            });
            self.pause(job, delays.next().unwrap_or(Duration::from_secs(5)))
                .await?;
            // The peers connected now (a lost one may be back, under a new connection).
            let fresh = sharing.query(&shared.name, QUERY_WAIT).await;
            let fresh: Vec<Offer> = fresh
                .into_iter()
                .filter(|o| {
                    let w = &shared.want;
                    o.has(w.asked.as_deref(), w.size, &w.sha256)
                })
                .collect();
            if !fresh.is_empty() {
                // The peers it comes from: those it came from so far stay listed.
                self.update(job, |p| {
                    for o in &fresh {
                        if !p.sources.contains(&o.peer) {
                            p.sources.push(o.peer.clone());
                        }
                    }
                });
                *lock(&shared.offers) = fresh;
            }
            which += 1;
            self.update(job, |p| p.state = DownloadState::Downloading);
        }
    }

    /// The pieces of one request for range `i`, written in place, until the peer completes
    /// (`Ok`) or stops sending (`Err` with why: another peer goes on). A chunk of another file
    /// fails the whole download (see [`Downloads::refuse`]).
    async fn receive(
        &self,
        job: &Job,
        shared: &Shared,
        i: usize,
        rx: &mut tokio::sync::mpsc::Receiver<Piece>,
    ) -> Result<(), String> {
        let mut since_note = 0u64;
        loop {
            // A peer that sends nothing for this long is taken as gone.
            let piece = match tokio::time::timeout(SILENT_PEER, rx.recv()).await {
                Ok(Some(p)) => p,
                Ok(None) => return Err("the peer is gone".into()),
                Err(_) => return Err("the peer sent nothing for a minute".into()),
            };
            let (file_name, offset, data) = match piece {
                Piece::Complete => return Ok(()),
                Piece::Bad(why) => return Err(why),
                Piece::Chunk {
                    file_name,
                    offset,
                    data,
                } => (file_name, offset, data),
            };
            let seg = lock(&shared.segments)[i];
            match check_chunk(
                &shared.want.file_name,
                seg,
                &file_name,
                offset,
                data.len() as u64,
            ) {
                Ok(()) => {}
                Err(ChunkFault::OtherFile(why)) => {
                    job.cancel.cancel();
                    self.refuse(job, why);
                    return Err("a chunk of another file".into());
                }
                Err(ChunkFault::OutOfPlace(why)) => return Err(why),
            }
            let (file, hashed) = (shared.file.clone(), shared.hashed.clone());
            let n = data.len() as u64;
            // Written and hashed at once, on two threads (the hash is fed in order: the next
            // chunk of this range waits for both).
            let hash = hashed.due(offset).then(|| {
                let data = data.clone();
                tokio::task::spawn_blocking(move || hashed.feed(offset, &data))
            });
            let write = tokio::task::spawn_blocking(move || {
                std::os::unix::fs::FileExt::write_all_at(&*file, &data, offset)
            });
            if let Some(hash) = hash {
                hash.await.map_err(|e| e.to_string())?;
            }
            let written = write.await.map_err(|e| e.to_string());
            if let Err(e) = written.and_then(|w| w.map_err(|e| e.to_string())) {
                // The hash has bytes the file may not: verifying reads the whole file instead.
                shared.hashed.reset();
                return Err(e);
            }
            lock(&shared.segments)[i].done += n;
            let received = shared.received.fetch_add(n, Ordering::Relaxed) + n;
            since_note += n;
            if since_note >= NOTE_EVERY {
                since_note = 0;
                let _ = shared.save_note();
            }
            let received = shared.want.base + received;
            let tick = lock(&shared.meter).tick(received, shared.want.total);
            match tick {
                Some((speed, left)) => self.update(job, |p| {
                    p.received = received;
                    p.bytes_per_second = speed;
                    p.seconds_left = left;
                }),
                None => lock(&job.progress).received = received,
            }
        }
    }

    /// A peer sent what no peer may: the download fails with the reason (set before the
    /// cancel that stops it is read as the user's).
    fn refuse(&self, job: &Job, why: String) {
        tracing::warn!(model = %job.id, %why, "refused a peer's transfer");
        lock(&job.refused).get_or_insert(why);
    }
}

/// Why a chunk is not written.
#[derive(Debug, PartialEq, Eq)]
enum ChunkFault {
    /// Named for another file (a path, `..`, another name): the peer is refused.
    OtherFile(String),
    /// Not where its range goes on, or past its end: that peer's range stops.
    OutOfPlace(String),
}

/// Whether a chunk named `file_name` at `offset` with `len` bytes may be written for `seg` of
/// the file named `expected`. The peer's name is only compared, never made into a path.
fn check_chunk(
    expected: &str,
    seg: Segment,
    file_name: &str,
    offset: u64,
    len: u64,
) -> Result<(), ChunkFault> {
    if file_name != expected {
        let shown: String = file_name.chars().take(200).collect();
        return Err(ChunkFault::OtherFile(format!(
            "a file named {shown:?} instead of {expected}"
        )));
    }
    let at = seg.start + seg.done;
    if offset != at || len > seg.end - at {
        return Err(ChunkFault::OutOfPlace(format!(
            "a chunk at {offset} where {at} was due"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chunks_of_this_file_in_their_place_are_written() {
        let seg = Segment {
            start: CHUNK_BYTES,
            end: 3 * CHUNK_BYTES,
            done: CHUNK_BYTES,
        };
        let due = 2 * CHUNK_BYTES;
        assert_eq!(
            check_chunk("m.gguf", seg, "m.gguf", due, CHUNK_BYTES),
            Ok(())
        );
        for name in [
            "../m.gguf",
            "/tmp/m.gguf",
            "sub/m.gguf",
            "./m.gguf",
            "M.gguf",
            "m.gguf\0",
            "",
        ] {
            assert!(
                matches!(
                    check_chunk("m.gguf", seg, name, due, 1),
                    Err(ChunkFault::OtherFile(_))
                ),
                "{name:?}"
            );
        }
        for (offset, len) in [(0, 1), (due + 1, 1), (due, CHUNK_BYTES + 1)] {
            assert!(
                matches!(
                    check_chunk("m.gguf", seg, "m.gguf", offset, len),
                    Err(ChunkFault::OutOfPlace(_))
                ),
                "{offset} {len}"
            );
        }
    }

    #[test]
    fn the_hash_takes_bytes_only_where_it_stops() {
        let h = Hashed::new(sha2::Sha256::new(), 0);
        assert!(h.due(0) && !h.due(3));
        h.feed(3, b"def");
        assert!(
            h.due(0),
            "bytes past where it stops are left for the verify"
        );
        h.feed(0, b"abc");
        h.feed(3, b"def");
        assert!(h.due(6));
        let (hasher, to) = h.snapshot();
        assert_eq!(to, 6);
        assert_eq!(hasher.finalize()[..], sha2::Sha256::digest(b"abcdef")[..]);
        h.reset();
        assert!(h.due(0));
        assert_eq!(h.snapshot().1, 0);
    }

    #[test]
    fn ranges_are_whole_chunks_covering_the_file() {
        let size = 5 * CHUNK_BYTES + 7;
        let s = split(size, 2);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].start, s[0].end), (0, 3 * CHUNK_BYTES));
        assert_eq!((s[1].start, s[1].end), (3 * CHUNK_BYTES, size));
        assert_eq!(split(10, 4).len(), 1, "a small file is one range");
    }

    #[test]
    fn the_hash_most_peers_give_wins_and_peers_without_one_are_left_out() {
        let offer = |peer: &str, sha: Option<&str>| Offer {
            projector: None,
            conn: 0,
            peer: peer.into(),
            size: 10,
            sha256: sha.map(str::to_owned),
            files: Vec::new(),
        };
        let chosen = agreed(vec![
            offer("a", Some("11")),
            offer("b", Some("22")),
            offer("c", Some("22")),
            offer("tealenet", None),
        ])
        .unwrap();
        let peers: Vec<&str> = chosen.iter().map(|o| o.peer.as_str()).collect();
        assert_eq!(peers, ["b", "c"]);
        assert!(agreed(vec![offer("tealenet", None)]).is_none());
    }
}
