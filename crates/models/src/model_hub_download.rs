//! Downloads from a Hugging Face-style hub ([`super::model_hub`]): the file's size and SHA-256 from
//! the hub's listing, then its bytes into the partial file, resumed with HTTP Range after an
//! interruption, and checked before the file is moved into place. A split model's shards
//! (`NAME-00001-of-0000N.gguf`, named by any one of them) come one after another, the first
//! last so the model appears whole.

use std::time::Duration;

use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncSeekExt as _, AsyncWriteExt as _};

use super::download::{lock, range_start, DownloadState, Downloads, Job, Meter, MAX_FAILURES};
use super::download_error::{io, DownloadError};
use super::model_hub::{ModelHubError, ModelHubFile, Remote};
use super::partial::{hash_prefix, open_partial, Note};
use super::shards::{Shard, Step};

/// Where one file's bytes fall in its download's progress: after `base` bytes (a split
/// model's other shards), of `total`.
#[derive(Debug, Clone, Copy)]
struct Place {
    base: u64,
    total: u64,
}

impl Downloads {
    /// Download `source` from the hub: the vision projector beside it first, if its folder
    /// has one (as `mmproj-<file name>`), then the file, or every shard of a split model: the
    /// model appears last, its projector already there, and a download cut or cancelled before
    /// that leaves no model without its projector.
    pub(super) async fn fetch_from_hub(
        &self,
        job: &Job,
        source: &ModelHubFile,
    ) -> Result<(), DownloadError> {
        let projector = match self.projector_of(job, source).await {
            Some(_) if self.models_dir.join(projector_name(source)).exists() => None,
            found => found,
        };
        let first = projector.as_ref().map_or(0, |(_, r)| r.size);
        let Some((name, _, count)) = hearth_protocol::ids::split_shard(source.file_name()) else {
            let remote = self.lookup(job, source).await?;
            let total = first + remote.size;
            self.fetch_projector(job, source, projector, Place { base: 0, total })
                .await?;
            let name = source.file_name().to_owned();
            return self
                .fetch_hub_file(job, source, name, remote, Place { base: first, total })
                .await;
        };
        let mut files = Vec::new();
        let mut shards = Vec::new();
        for i in 1..=count {
            let file = source.sibling(&hearth_protocol::ids::shard_file(name, i, count));
            let remote = self.lookup(job, &file).await?;
            shards.push(Shard {
                name: file.file_name().to_owned(),
                size: remote.size,
                sha256: remote.sha256.clone(),
            });
            files.push((file, remote));
        }
        let (steps, shards_total) = self.plan_split(job, &shards).await?;
        let total = first + shards_total;
        self.fetch_projector(job, source, projector, Place { base: 0, total })
            .await?;
        for Step { index, base } in steps {
            let (file, remote) = files[index].clone();
            let name = file.file_name().to_owned();
            let at = Place {
                base: first + base,
                total,
            };
            self.fetch_hub_file(job, &file, name, remote, at).await?;
        }
        Ok(())
    }

    /// The projector beside `source` in its repository, and what must arrive of it. A folder
    /// that cannot be listed has none: the model comes without it.
    async fn projector_of(
        &self,
        job: &Job,
        source: &ModelHubFile,
    ) -> Option<(ModelHubFile, Remote)> {
        let found = tokio::select! {
            r = source.projector(&self.http, &self.hub) => r,
            () = job.cancel.cancelled() => return None,
        };
        let file = match found {
            Ok(f) => f?,
            Err(e) => {
                tracing::warn!(model = %source.spec(), error = %e, "its folder's projectors could not be listed");
                return None;
            }
        };
        match self.lookup(job, &file).await {
            Ok(remote) => Some((file, remote)),
            Err(e) => {
                tracing::warn!(projector = %file.spec(), error = %e, "the projector cannot be fetched");
                None
            }
        }
    }

    /// Fetch the projector of the model `source` (verified like any file) as
    /// `mmproj-<model file name>`, where the engine finds it.
    async fn fetch_projector(
        &self,
        job: &Job,
        source: &ModelHubFile,
        projector: Option<(ModelHubFile, Remote)>,
        at: Place,
    ) -> Result<(), DownloadError> {
        let Some((file, remote)) = projector else {
            return Ok(());
        };
        let name = projector_name(source);
        tracing::info!(projector = %file.spec(), as_name = %name, "fetching the model's projector");
        self.fetch_hub_file(job, &file, name, remote, at).await
    }

    /// What the file must be, from the hub (retried like the transfer).
    async fn lookup(&self, job: &Job, source: &ModelHubFile) -> Result<Remote, DownloadError> {
        let mut failures = 0u32;
        let mut delays =
            hearth_base::backoff::jittered(Duration::from_millis(500), Duration::from_secs(30));
        loop {
            let looked = tokio::select! {
                r = source.lookup(&self.http, &self.hub) => r,
                () = job.cancel.cancelled() => return Err(self.why_stopped()),
            };
            match looked {
                Ok(r) => return Ok(r),
                Err(e) if e.is_transient() && failures + 1 < MAX_FAILURES => {
                    failures += 1;
                    self.update(job, |p| {
                        p.state = DownloadState::Retrying;
                        p.retries += 1;
                        p.error = Some(e.to_string());
                    });
                    self.pause(job, delays.next().unwrap_or(Duration::from_secs(30)))
                        .await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Download one file of the hub, `remote` as the hub describes it, into its partial and
    /// then into place as `id` in the models folder.
    async fn fetch_hub_file(
        &self,
        job: &Job,
        source: &ModelHubFile,
        id: String,
        remote: Remote,
        at: Place,
    ) -> Result<(), DownloadError> {
        *lock(&job.writing) = Some(id.clone());
        let (part, note_path) = self.partial_paths(&id);
        std::fs::create_dir_all(self.partial_dir()).map_err(io)?;
        let file = open_partial(&part)?;
        // A partial of another version of the file starts over.
        let same = Note::load(&note_path).is_some_and(|n| {
            n.sha256 == remote.sha256 && n.size == remote.size && n.segments.is_none()
        });
        if !same {
            file.set_len(0).map_err(io)?;
        }
        let note = Note {
            model: job.source.spec(),
            sha256: remote.sha256.clone(),
            size: remote.size,
            segments: None,
            placed: Vec::new(),
        };
        note.save(&note_path)?;
        let mut file = tokio::fs::File::from_std(file);
        let mut have = file.metadata().await.map_err(io)?.len();
        if have > remote.size {
            file.set_len(0).await.map_err(io)?;
            have = 0;
        }
        super::disk::ensure_room(&self.partial_dir(), remote.size - have)?;
        // The bytes already here count toward the hash.
        let mut hasher = hash_prefix(part.clone(), have).await?;
        file.seek(std::io::SeekFrom::Start(have))
            .await
            .map_err(io)?;
        self.update(job, |p| {
            p.total = Some(at.total);
            p.received = at.base + have;
            p.resumed_from += have;
            // The file's (a split model's current shard's: each is checked on its own).
            p.sha256 = Some(remote.sha256.clone());
            p.state = DownloadState::Downloading;
        });
        let url = source.url(&self.hub);
        let mut failures = 0u32;
        let mut delays =
            hearth_base::backoff::jittered(Duration::from_millis(500), Duration::from_secs(30));
        while have < remote.size {
            let before = have;
            let attempt = tokio::select! {
                r = self.attempt(job, source, &url, &remote, at, &mut file, &mut hasher, &mut have) => r,
                () = job.cancel.cancelled() => Err(self.why_stopped()),
            };
            match attempt {
                Ok(()) if have == remote.size => break,
                Ok(()) => {}
                Err(DownloadError::Hub(e)) if e.is_transient() => {
                    tracing::info!(model = %id, received = have, error = %e, "download interrupted; resuming");
                    self.update(job, |p| p.error = Some(e.to_string()));
                }
                Err(e) => {
                    file.flush().await.map_err(io)?;
                    return Err(e);
                }
            }
            file.flush().await.map_err(io)?;
            if have > before {
                failures = 0;
                delays = hearth_base::backoff::jittered(
                    Duration::from_millis(500),
                    Duration::from_secs(30),
                );
            }
            failures += 1;
            if failures >= MAX_FAILURES {
                let last = lock(&job.progress).error.clone().unwrap_or_default();
                return Err(DownloadError::GaveUp {
                    attempts: failures,
                    last,
                });
            }
            self.update(job, |p| {
                p.state = DownloadState::Retrying;
                p.retries += 1;
                p.bytes_per_second = 0.0;
                p.seconds_left = None;
            });
            self.pause(job, delays.next().unwrap_or(Duration::from_secs(30)))
                .await?;
            self.update(job, |p| p.state = DownloadState::Downloading);
        }
        file.flush().await.map_err(io)?;
        file.sync_all().await.map_err(io)?;
        // The file (and its lock) stays open until it is renamed into place.
        self.update(job, |p| p.state = DownloadState::Verifying);
        let got = hex::encode(hasher.finalize());
        self.place(job, (&part, &note_path), id, remote.sha256, got)?;
        drop(file);
        Ok(())
    }

    /// One request for the bytes from `have` on, written as they arrive. Ends when the
    /// response ends (maybe short: the caller resumes).
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        job: &Job,
        source: &ModelHubFile,
        url: &str,
        remote: &Remote,
        at: Place,
        file: &mut tokio::fs::File,
        hasher: &mut Sha256,
        have: &mut u64,
    ) -> Result<(), DownloadError> {
        let unreachable =
            |e: reqwest::Error| DownloadError::Hub(ModelHubError::Unreachable(e.to_string()));
        let mut req = self.http.get(url);
        if *have > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
        }
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status().as_u16();
        match status {
            206 => {
                let from = resp
                    .headers()
                    .get(reqwest::header::CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(range_start);
                if from != Some(*have) {
                    return Err(DownloadError::Hub(ModelHubError::BadListing(format!(
                        "asked for bytes from {have}, got a range from {from:?}"
                    ))));
                }
            }
            200 => {
                // The whole file again (no ranges there): start over.
                if *have > 0 {
                    file.set_len(0).await.map_err(io)?;
                    file.seek(std::io::SeekFrom::Start(0)).await.map_err(io)?;
                    *hasher = Sha256::new();
                    *have = 0;
                }
            }
            416 if *have == remote.size => return Ok(()),
            404 => {
                return Err(DownloadError::Hub(ModelHubError::NotFound {
                    repo: source.repo.clone(),
                    file: source.path.clone(),
                }))
            }
            _ => {
                return Err(DownloadError::Hub(ModelHubError::Status {
                    status,
                    url: url.to_owned(),
                }))
            }
        }
        let mut body = resp.bytes_stream();
        let mut meter = Meter::new(at.base + *have);
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(unreachable)?;
            if *have + chunk.len() as u64 > remote.size {
                return Err(DownloadError::TooLong(remote.size));
            }
            file.write_all(&chunk).await.map_err(io)?;
            hasher.update(&chunk);
            *have += chunk.len() as u64;
            if let Some((speed, left)) = meter.tick(at.base + *have, at.total) {
                let received = at.base + *have;
                self.update(job, |p| {
                    p.received = received;
                    p.bytes_per_second = speed;
                    p.seconds_left = left;
                });
            }
        }
        let received = at.base + *have;
        self.update(job, |p| p.received = received);
        Ok(())
    }
}

/// The name the projector of the model `source` takes in the models folder.
fn projector_name(source: &ModelHubFile) -> String {
    format!("mmproj-{}", source.file_name())
}
