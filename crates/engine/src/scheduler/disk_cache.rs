//! The prompt cache on disk (`--cache-disk DIR`): sequences the prompt cache keeps (and the
//! idle ones when the engine stops) are also written to files, in a folder per model (a hash
//! of its file's start) holding one per cache layout, so that a restart does not lose them.
//! Each file is checksummed (SHA-256); one that does not check out, or that this pool cannot
//! take, is deleted, never loaded again. Files are written on a thread of their own, readable
//! by this user only; the oldest of the model's, all layouts together, go past the size cap.
//! The format is Hearth's own (a short header with the entry's owner, the tokens, llama.cpp's
//! state bytes, the sum): llama.cpp's session files carry no checksum. A request reads only its
//! own owner's files; files of the format before owners (`HKVSEQ01`) are deleted at open.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::token::LlamaToken;
use sha2::{Digest, Sha256};

use super::prompt_cache::common_prefix;
use crate::CacheOwner;

const MAGIC: &[u8; 8] = b"HKVSEQ02";
/// Magic, owner, token count.
const HEADER: usize = 8 + 16 + 8;
/// States waiting to be written; beyond this a save is skipped rather than waited for.
const QUEUE: usize = 4;
/// Bytes of a model file's start hashed for its folder's name: the GGUF header and metadata
/// (architecture, shapes, tokenizer) and its first tensors.
const MODEL_PREFIX: u64 = 4 << 20;

/// One file: whose it is and the tokens its state holds.
struct Entry {
    owner: CacheOwner,
    tokens: Vec<LlamaToken>,
    path: PathBuf,
}

/// A file to write: where, its owner and tokens, the state's bytes.
type Job = (PathBuf, CacheOwner, Vec<LlamaToken>, Vec<u8>);

pub(super) struct DiskCache {
    dir: PathBuf,
    entries: Vec<Entry>,
    writer: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
    /// Owners forgotten: the writer skips their queued files, and deletes one it was writing.
    forgotten: Arc<Mutex<HashSet<CacheOwner>>>,
}

/// The folder of one model's cache in one `layout` (the KV type and where the cache is: a
/// state loads only into the layout it came from): `{file stem}-{hash of the file's size and
/// first bytes}/{hash of the layout}`. The model's folder holds all its layouts (a split's
/// worker has one per share of layers it ever had): the size cap counts them together.
pub(super) fn folder(root: &Path, model: &Path, layout: &str) -> PathBuf {
    let mut h = Sha256::new();
    h.update(
        std::fs::metadata(model)
            .map_or(0, |m| m.len())
            .to_le_bytes(),
    );
    if let Ok(f) = std::fs::File::open(model) {
        let _ = std::io::copy(&mut f.take(MODEL_PREFIX), &mut h);
    }
    let digest = hex(&h.finalize()[..8]);
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let layout = hex(&Sha256::digest(layout.as_bytes())[..6]);
    root.join(format!("{stem}-{digest}")).join(layout)
}

/// Make `dir` and the folders above it, readable by this user only.
fn make_folder(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// The cache files (`.kv`) directly in `dir`: when each was written, its size, its path.
fn files(dir: &Path) -> Vec<(std::time::SystemTime, u64, PathBuf)> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    read.flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "kv"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect()
}

/// Delete the folders that caches of earlier versions left in `root` (one per model and
/// layout, holding entries itself, where a model's folder now holds layouts' folders): no
/// engine reads them again.
fn forget_flat_folders(root: &Path) {
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        // Only a folder of entries this module wrote (of any version: their magic reads).
        if files(&e.path()).iter().any(|(_, _, f)| written_here(f)) {
            tracing::info!(folder = %e.path().display(), "an old prompt cache folder: deleted");
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether `path` starts as the files of this module, of any version of its format, do.
fn written_here(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic[..7] == MAGIC[..7])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A file's bytes: magic, owner, token count, tokens, state length, state, SHA-256 of all
/// before.
fn encode(owner: CacheOwner, tokens: &[LlamaToken], state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + tokens.len() * 4 + 8 + state.len() + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(owner.bytes());
    out.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
    for t in tokens {
        out.extend_from_slice(&t.0.to_le_bytes());
    }
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(state);
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// The owner and tokens of a file, from its header alone.
fn read_tokens(path: &Path) -> Option<(CacheOwner, Vec<LlamaToken>)> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; HEADER];
    f.read_exact(&mut head).ok()?;
    if &head[..8] != MAGIC {
        return None;
    }
    let owner = CacheOwner::from_bytes(head[8..24].try_into().ok()?);
    let n = usize::try_from(u64::from_le_bytes(head[24..32].try_into().ok()?)).ok()?;
    let size = f.metadata().ok()?.len();
    // A header's count is the file's word: no more tokens than the file has bytes for.
    (n as u64).checked_mul(4).filter(|b| *b <= size)?;
    let mut raw = vec![0u8; n * 4];
    f.read_exact(&mut raw).ok()?;
    let tokens = raw
        .chunks_exact(4)
        .map(|c| LlamaToken::new(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    Some((owner, tokens))
}

/// The state of a whole file whose sum checks out and whose owner and tokens are these.
fn decode(bytes: &[u8], owner: CacheOwner, tokens: &[LlamaToken]) -> Option<Vec<u8>> {
    let body = bytes.len().checked_sub(32)?;
    let (content, sum) = bytes.split_at(body);
    if Sha256::digest(content).as_slice() != sum {
        return None;
    }
    let at = HEADER + tokens.len() * 4;
    let same = content.get(8..24)? == owner.bytes()
        && content.get(24..HEADER)? == (tokens.len() as u64).to_le_bytes()
        && content
            .get(HEADER..at)?
            .chunks_exact(4)
            .zip(tokens)
            .all(|(c, t)| c == t.0.to_le_bytes());
    if !same {
        return None;
    }
    let state_len = usize::try_from(u64::from_le_bytes(
        content.get(at..at + 8)?.try_into().ok()?,
    ))
    .ok()?;
    let state = content.get(at + 8..)?;
    (state.len() == state_len).then(|| state.to_vec())
}

/// Write `bytes` to `path` whole (a temporary file of this process renamed), readable by this
/// user only, then delete the oldest files of the model's folders (`dir`'s and its other
/// layouts') past `cap` bytes, and the layouts' folders left empty.
fn write(dir: &Path, path: &Path, bytes: &[u8], cap: u64) -> std::io::Result<()> {
    // Another layout's writer deletes this folder while it is empty.
    make_folder(dir)?;
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    let layouts: Vec<PathBuf> = match dir.parent().map(std::fs::read_dir) {
        Some(Ok(read)) => read.flatten().map(|e| e.path()).collect(),
        _ => vec![dir.to_path_buf()],
    };
    let mut all: Vec<_> = layouts.iter().flat_map(|d| files(d)).collect();
    all.sort();
    let mut total: u64 = all.iter().map(|f| f.1).sum();
    for (_, len, file) in all {
        if total <= cap || file == path {
            break;
        }
        let _ = std::fs::remove_file(&file);
        total -= len;
    }
    for other in layouts.iter().filter(|d| d.as_path() != dir) {
        // Fails unless empty (a file being written there keeps it).
        let _ = std::fs::remove_dir(other);
    }
    Ok(())
}

/// Delete the files of `owner` in every model's folders under `root` (`--cache-disk`): those of
/// models not loaded now too.
pub(crate) fn forget_owner(root: &Path, owner: CacheOwner) {
    let models = std::fs::read_dir(root).into_iter().flatten().flatten();
    for layout in models.flat_map(|m| std::fs::read_dir(m.path()).into_iter().flatten().flatten()) {
        for (_, _, file) in files(&layout.path()) {
            if read_tokens(&file).is_some_and(|(o, _)| o == owner) {
                let _ = std::fs::remove_file(&file);
            }
        }
    }
}

impl DiskCache {
    /// The cache in `dir` ([`folder`]: made if need be, this user's only), its files' tokens
    /// read, at most `cap` bytes on disk for the model (all its layouts). Files that are not
    /// entries (a write cut short) are deleted, and the folders of earlier versions' flat
    /// layout.
    pub(super) fn open(dir: PathBuf, cap: u64) -> std::io::Result<Self> {
        if let Some(root) = dir.parent().and_then(Path::parent) {
            forget_flat_folders(root);
        }
        make_folder(&dir)?;
        // Another layout's writer deletes this folder while it is empty: then it holds nothing
        // to read, and the writer here makes it again.
        let read = match std::fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            r => r?.flatten().collect(),
        };
        let mut entries = Vec::new();
        for e in read {
            let path = e.path();
            match (
                path.extension().and_then(|x| x.to_str()),
                read_tokens(&path),
            ) {
                (Some("kv"), Some((owner, tokens))) => entries.push(Entry {
                    owner,
                    tokens,
                    path,
                }),
                _ => {
                    tracing::warn!(file = %path.display(), "not a prompt cache entry: deleted");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        tracing::info!(dir = %dir.display(), entries = entries.len(), "prompt cache on disk");
        let (writer, jobs) = sync_channel::<Job>(QUEUE);
        let folder = dir.clone();
        let forgotten = Arc::new(Mutex::new(HashSet::new()));
        let gone = forgotten.clone();
        let is_gone = move |owner: &CacheOwner| {
            gone.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(owner)
        };
        let thread = std::thread::Builder::new()
            .name("hearth-kv-disk".into())
            .spawn(move || {
                for (path, owner, tokens, state) in jobs {
                    if is_gone(&owner) {
                        continue;
                    }
                    let bytes = encode(owner, &tokens, &state);
                    if let Err(e) = write(&folder, &path, &bytes, cap) {
                        tracing::warn!(%e, file = %path.display(), "a prompt cache file was not written");
                    }
                    // Forgotten while it was being written.
                    if is_gone(&owner) {
                        let _ = std::fs::remove_file(&path);
                    }
                }
            })?;
        Ok(Self {
            dir,
            entries,
            writer: Some(writer),
            thread: Some(thread),
            forgotten,
        })
    }

    /// The entries whose file is there (the writer may not have written one yet, or has
    /// deleted it for the cap).
    fn present(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.path.is_file())
    }

    /// Whether a file of `owner` holds `tokens` already (or more).
    pub(super) fn covers(&self, owner: CacheOwner, tokens: &[LlamaToken]) -> bool {
        self.present()
            .filter(|e| e.owner == owner)
            .any(|e| e.tokens.len() >= tokens.len() && e.tokens.starts_with(tokens))
    }

    /// How many tokens the file of `owner` sharing the longest prefix with `tokens` shares.
    pub(super) fn longest(&self, owner: CacheOwner, tokens: &[LlamaToken]) -> usize {
        self.present()
            .filter(|e| e.owner == owner)
            .map(|e| common_prefix(&e.tokens, tokens))
            .max()
            .unwrap_or(0)
    }

    /// The state of the file of `owner` sharing the longest prefix with `tokens`, and its
    /// tokens; a file that does not check out is deleted and the next one tried.
    pub(super) fn load(
        &mut self,
        owner: CacheOwner,
        tokens: &[LlamaToken],
    ) -> Option<(SeqState, Vec<LlamaToken>)> {
        loop {
            let i = (0..self.entries.len())
                .filter(|&i| self.entries[i].owner == owner)
                .max_by_key(|&i| common_prefix(&self.entries[i].tokens, tokens))
                .filter(|&i| common_prefix(&self.entries[i].tokens, tokens) > 0)?;
            let bytes = match std::fs::read(&self.entries[i].path) {
                Ok(b) => Some(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Deleted for the cap, or not written yet: not a damaged file.
                    self.entries.swap_remove(i);
                    continue;
                }
                Err(_) => None,
            };
            match bytes.and_then(|b| decode(&b, owner, &self.entries[i].tokens)) {
                Some(state) => {
                    // SAFETY: the bytes are a state `SeqState::as_bytes` gave (`save`), whole
                    // (the sum checks out), for this model and cache layout (the folder's
                    // name); llama.cpp's reader checks each length and shape besides and
                    // refuses a state this pool cannot take.
                    let state = unsafe { SeqState::from_bytes(state, LlamaStateSeqFlags::empty()) };
                    return Some((state, self.entries[i].tokens.clone()));
                }
                None => {
                    let e = self.entries.swap_remove(i);
                    tracing::warn!(file = %e.path.display(), "a damaged prompt cache file: deleted, not loaded");
                    let _ = std::fs::remove_file(&e.path);
                }
            }
        }
    }

    /// Forget the file of `owner` holding `tokens`, and delete it: this pool did not take its
    /// state.
    pub(super) fn reject(&mut self, owner: CacheOwner, tokens: &[LlamaToken]) {
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.owner == owner && e.tokens == tokens)
        {
            let e = self.entries.swap_remove(i);
            tracing::warn!(file = %e.path.display(), "a prompt cache file this pool cannot take: deleted");
            let _ = std::fs::remove_file(&e.path);
        }
    }

    /// Delete every file of `owner`, those still queued for the writer too.
    pub(super) fn forget(&mut self, owner: CacheOwner) {
        self.forgotten
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(owner);
        for e in self.entries.iter().filter(|e| e.owner == owner) {
            let _ = std::fs::remove_file(&e.path);
        }
        self.entries.retain(|e| e.owner != owner);
    }

    /// Keep `state` (the KV of `owner`'s `tokens`) on disk too, unless a file of theirs holds
    /// them already; with `wait`, even when the writer is behind (the engine stops), else it
    /// is skipped then.
    pub(super) fn save(
        &mut self,
        owner: CacheOwner,
        tokens: &[LlamaToken],
        state: &SeqState,
        wait: bool,
    ) {
        if self.covers(owner, tokens) {
            return;
        }
        let Some(writer) = &self.writer else {
            return;
        };
        let name = {
            let mut h = Sha256::new();
            h.update(owner.bytes());
            for t in tokens {
                h.update(t.0.to_le_bytes());
            }
            hex(&h.finalize()[..12])
        };
        let path = self.dir.join(format!("{name}.kv"));
        let job = (
            path.clone(),
            owner,
            tokens.to_vec(),
            state.as_bytes().to_vec(),
        );
        let sent = if wait {
            writer
                .send(job)
                .map_err(|e| TrySendError::Disconnected(e.0))
        } else {
            writer.try_send(job)
        };
        match sent {
            Ok(()) => {
                // The owner's shorter files it holds go.
                let superseded = |e: &Entry| e.owner == owner && tokens.starts_with(&e.tokens);
                for e in self.entries.iter().filter(|e| superseded(e)) {
                    let _ = std::fs::remove_file(&e.path);
                }
                self.entries.retain(|e| !superseded(e));
                self.entries.push(Entry {
                    owner,
                    tokens: tokens.to_vec(),
                    path,
                });
            }
            Err(TrySendError::Full(_)) => tracing::debug!("prompt cache writer busy: not saved"),
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Write what is queued and wait for it (the engine stops).
    pub(super) fn close(&mut self) {
        self.writer.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_back_and_a_damaged_one_does_not() {
        let tokens: Vec<LlamaToken> = (0..70).map(LlamaToken::new).collect();
        let state = vec![7u8; 300];
        let owner = CacheOwner::caller("key a");
        let bytes = encode(owner, &tokens, &state);
        assert_eq!(decode(&bytes, owner, &tokens), Some(state));
        // Another owner's file, however alike, is not theirs.
        assert_eq!(decode(&bytes, CacheOwner::caller("key b"), &tokens), None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.kv");
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_tokens(&path), Some((owner, tokens.clone())));
        for at in [3, 12, 30, 400, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert_eq!(decode(&bad, owner, &tokens), None, "byte {at}");
        }
        assert_eq!(decode(&bytes[..bytes.len() - 5], owner, &tokens), None);
        let mut huge = b"HKVSEQ02".to_vec();
        huge.extend_from_slice(&[0; 16]);
        huge.extend_from_slice(b"\xff\xff\xff\xff\xff\xff\xff\x7f");
        std::fs::write(&path, huge).unwrap();
        assert_eq!(read_tokens(&path), None);
        // A file of the format before owners is no entry (`open` deletes it).
        let mut old = b"HKVSEQ01".to_vec();
        old.extend_from_slice(&bytes[24..]);
        std::fs::write(&path, old).unwrap();
        assert_eq!(read_tokens(&path), None);
    }

    /// A model's layouts (a split's worker has one per share of layers) share its size cap,
    /// the oldest files going first and an emptied layout's folder with them; the flat
    /// folders of earlier versions are deleted when a cache opens.
    #[test]
    fn a_models_layouts_share_its_cap_and_old_flat_folders_go() {
        let root = tempfile::tempdir().unwrap();
        let models = tempfile::tempdir().unwrap();
        let model = models.path().join("tiny-model.gguf");
        std::fs::write(&model, b"GGUF and the rest of a model").unwrap();
        let tokens: Vec<LlamaToken> = (0..10).map(LlamaToken::new).collect();
        let flat = root.path().join("tiny-model-0011223344556677");
        std::fs::create_dir(&flat).unwrap();
        // An entry as the versions of that layout wrote it (the format before owners).
        let mut old = b"HKVSEQ01".to_vec();
        old.extend_from_slice(&10u64.to_le_bytes());
        old.extend(tokens.iter().flat_map(|t| t.0.to_le_bytes()));
        std::fs::write(flat.join("x.kv"), old).unwrap();
        // A folder of the user's in the same root: not the cache's, kept.
        let theirs = root.path().join("notes");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("a.kv"), b"not a cache entry").unwrap();

        let (a, b) = (
            folder(root.path(), &model, "f16-CPU-30"),
            folder(root.path(), &model, "f16-CPU-20"),
        );
        assert_ne!(a, b);
        assert_eq!(a.parent(), b.parent());
        DiskCache::open(a.clone(), 0).unwrap().close();
        assert!(!flat.exists(), "the flat folder stayed");
        assert!(
            theirs.join("a.kv").exists(),
            "a folder not the cache's was touched"
        );
        assert!(a.is_dir());

        let bytes = encode(CacheOwner::NODE, &tokens, &[0u8; 1000]);
        let cap = 3 * bytes.len() as u64 - 1;
        // Each file older than the next by a minute, whatever the file system's clock grain.
        let made = std::cell::Cell::new(std::time::SystemTime::UNIX_EPOCH);
        let put = |dir: &Path, name: &str| {
            made.set(made.get() + std::time::Duration::from_secs(60));
            let (path, when) = (dir.join(name), made.get());
            write(dir, &path, &bytes, cap).unwrap();
            if let Ok(f) = std::fs::File::options().write(true).open(&path) {
                f.set_modified(when).unwrap();
            }
        };
        put(&a, "1.kv");
        put(&a, "2.kv");
        put(&b, "3.kv");
        assert!(
            !a.join("1.kv").exists(),
            "the model's oldest file stayed past the cap"
        );
        assert!(a.join("2.kv").exists() && b.join("3.kv").exists());
        put(&b, "4.kv");
        assert!(!a.exists(), "the emptied layout's folder stayed");
        // Its engine writes there again all the same.
        put(&a, "5.kv");
        assert!(a.join("5.kv").exists() && !b.join("3.kv").exists());
    }
}
