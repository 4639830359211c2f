//! A split model's download (`NAME-00001-of-0000N.gguf` and its siblings), from the hub or from
//! peers: the shards already in the folder are checked before any is fetched (kept when they
//! are the download's, else it stops having written nothing), the room for the others is
//! checked at once, and the first shard comes last, so the registry lists the model only whole.
//! A cancelled or failed one takes away the shards it placed (see [`Downloads::forget`]).

use std::path::Path;

use sha2::Digest as _;

use super::download::{lock, Downloads, Job, Source};
use super::download_error::DownloadError;
use super::model_hub::ModelHubError;
use super::partial::{hash_prefix, Note};

/// Shards a split model may have: five digits (`-00001-of-0000N`).
pub(super) const MAX_SHARDS: usize = hearth_protocol::limits::MAX_MODEL_FILES;

/// One shard of a split model: its file name, size and SHA-256.
#[derive(Debug, Clone)]
pub(super) struct Shard {
    pub(super) name: String,
    pub(super) size: u64,
    pub(super) sha256: String,
}

/// A shard to fetch: its index among the shards, and the bytes of the download before it (the
/// shards kept and fetched so far), for the progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Step {
    pub(super) index: usize,
    pub(super) base: u64,
}

impl Downloads {
    /// Prepare the download of `shards` (shard 1 first): the shards to fetch, in the order to
    /// fetch them, and the bytes of the whole model.
    pub(super) async fn plan_split(
        &self,
        job: &Job,
        shards: &[Shard],
    ) -> Result<(Vec<Step>, u64), DownloadError> {
        let total = shards
            .iter()
            .try_fold(0u64, |sum, s| sum.checked_add(s.size))
            .ok_or_else(|| {
                let why = "shard sizes past any disk".to_owned();
                match job.source {
                    Source::Hub(_) => DownloadError::Hub(ModelHubError::BadListing(why)),
                    Source::Peers(_) => DownloadError::BadPeer(why),
                }
            })?;
        *lock(&job.files) = shards.iter().map(|s| s.name.clone()).collect();
        self.update(job, |p| {
            p.total = Some(total);
            p.shards = u32::try_from(shards.len()).ok();
        });
        // The shards an earlier run of this download placed: its own, which a cancel takes
        // away. Any other shard found here is the user's, and stays.
        let ours: std::collections::HashSet<String> = Note::load(&self.record_path(job))
            .map(|n| n.placed.into_iter().collect())
            .unwrap_or_default();
        let mut kept = 0;
        let mut missing = Vec::new();
        for (i, s) in shards.iter().enumerate() {
            let path = self.models_dir.join(&s.name);
            if path.exists() {
                self.kept_shard(job, &path, s).await?;
                if ours.contains(&s.name) {
                    lock(&job.placed).push(s.name.clone());
                }
                kept += s.size;
            } else {
                missing.push(i);
            }
        }
        // Room for every shard still to come, less what their partials hold.
        let need: u64 = missing
            .iter()
            .map(|&i| {
                shards[i]
                    .size
                    .saturating_sub(self.partial_bytes(&shards[i]))
            })
            .sum();
        super::disk::ensure_room(&self.models_dir, need)?;
        // The first shard last.
        missing.sort_by_key(|&i| i == 0);
        let mut base = kept;
        let steps = missing
            .into_iter()
            .map(|index| {
                let step = Step { index, base };
                base += shards[index].size;
                step
            })
            .collect();
        Ok((steps, total))
    }

    /// The bytes of `shard` its partial holds, when its note says it is that file.
    fn partial_bytes(&self, shard: &Shard) -> u64 {
        let (part, note) = self.partial_paths(&shard.name);
        let note = Note::load(&note).filter(|n| n.sha256 == shard.sha256 && n.size == shard.size);
        match note {
            // From peers: the ranges' bytes (the file itself is as long as the shard).
            Some(n) => match n.segments {
                Some(segments) => segments.iter().map(|s| s.done).sum(),
                None => std::fs::metadata(part).map_or(0, |m| m.len().min(shard.size)),
            },
            None => 0,
        }
    }

    /// A shard found in the folder: counted as here when it is `shard`, else the download
    /// stops rather than replace it.
    async fn kept_shard(&self, job: &Job, path: &Path, shard: &Shard) -> Result<(), DownloadError> {
        let exists = || DownloadError::Exists(shard.name.clone());
        if std::fs::metadata(path).ok().map(|m| m.len()) != Some(shard.size) {
            return Err(exists());
        }
        let got = tokio::select! {
            h = hash_prefix(path.to_owned(), shard.size) => hex::encode(h?.finalize()),
            () = job.cancel.cancelled() => return Err(self.why_stopped()),
        };
        if got != shard.sha256 {
            return Err(exists());
        }
        self.update(job, |p| {
            p.received += shard.size;
            p.resumed_from += shard.size;
        });
        Ok(())
    }
}
