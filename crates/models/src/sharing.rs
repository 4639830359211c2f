//! Fetching models from peers over cluster connections (NOTES.md: `modelQuery`,
//! `modelTransferRequest`, `modelTransferChunk`, `modelTransferComplete`): the queries and
//! transfers of this node's downloads ([`crate::download`]) go out on the connections the
//! cluster registers here and get their answers back by connection and transfer id. Serving
//! this node's files to peers is the cluster's (its `sharing` module), which counts what it
//! served and reads the pace here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hearth_protocol::cluster::{
    HearthChunk, Message, ModelFileOffer, ModelQuery, ModelQueryResponse, ModelTransferChunk,
    ModelTransferComplete, ModelTransferRequest, PeerUuid, BINARY_CHUNK_VERSION,
};
use tokio::sync::mpsc;
use tokio_util::bytes::Bytes;

/// The bytes of one chunk (NOTES.md).
pub const CHUNK_BYTES: u64 = 1 << 20;
/// Pieces of one transfer waiting for its writer.
const PIECES_WAITING: usize = 4;
/// How long a connection waits for a transfer's writer to take a piece.
const WRITER_WAIT: Duration = Duration::from_secs(1);

/// What arrives for a transfer this node asked for.
#[derive(Debug)]
pub enum Piece {
    Chunk {
        file_name: String,
        offset: u64,
        data: Bytes,
    },
    Complete,
    /// A chunk that cannot be one (not base64, or over 1 MiB).
    Bad(String),
}

/// A peer's answer to a query: it has the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The connection it came on.
    pub conn: u64,
    pub peer: String,
    pub size: u64,
    pub sha256: Option<String>,
    /// A split model's files (each with its size and SHA-256); empty for a model of one file.
    pub files: Vec<ModelFileOffer>,
    /// The model's vision projector, when the peer has one beside it.
    pub projector: Option<ModelFileOffer>,
}

impl Offer {
    /// Whether the peer has file `file` (`None`: the model's one file; a projector is named) of
    /// `size` bytes with SHA-256 `sha256`.
    pub fn has(&self, file: Option<&str>, size: u64, sha256: &str) -> bool {
        match file {
            None => {
                self.files.is_empty() && self.size == size && self.sha256.as_deref() == Some(sha256)
            }
            Some(f) => self
                .files
                .iter()
                .chain(&self.projector)
                .any(|o| o.file_name == f && o.size_bytes == size && o.sha256 == sha256),
        }
    }
}

#[derive(Debug)]
struct Conn {
    peer: String,
    /// A Hearth node: the only peers asked, since only they give a SHA-256 to check (and a
    /// TealeNet peer does not answer for a model it lacks, so every query would wait for it).
    hearth: bool,
    out: mpsc::Sender<Message>,
}

#[derive(Debug)]
struct Query {
    model: String,
    /// The connections asked that have not answered yet: one answer each counts.
    waiting: std::collections::HashSet<u64>,
    answers: mpsc::UnboundedSender<(u64, Option<Offer>)>,
}

/// One of this node's transfers: the connection it was asked on, the model, its writer.
#[derive(Debug)]
struct Asked {
    conn: u64,
    model: String,
    tx: mpsc::Sender<Piece>,
}

/// The connections model sharing goes over, and this node's queries and transfers on them.
#[derive(Debug, Default)]
pub struct Sharing {
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Conn>>,
    queries: Mutex<Vec<Query>>,
    transfers: Mutex<HashMap<PeerUuid, Asked>>,
    /// A pause after each chunk served (a hidden setting, for tests that stop a transfer
    /// part way).
    pace: Mutex<Option<Duration>>,
    /// Model bytes served to peers since the node started.
    served: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A connection registered for sharing; it leaves (and its transfers end) when dropped.
#[derive(Debug)]
pub struct Registered {
    sharing: Arc<Sharing>,
    pub key: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.sharing.conns).remove(&self.key);
        // Their senders dropped: each transfer's writer sees the source gone.
        lock(&self.sharing.transfers).retain(|_, a| a.conn != self.key);
    }
}

impl Sharing {
    pub fn set_pace(&self, pace: Option<Duration>) {
        *lock(&self.pace) = pace;
    }

    pub fn pace(&self) -> Option<Duration> {
        *lock(&self.pace)
    }

    /// `n` more model bytes served to a peer.
    pub fn count_served(&self, n: u64) {
        self.served.fetch_add(n, Ordering::Relaxed);
    }

    /// Model bytes served to peers since the node started.
    pub fn served_bytes(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// A connection with peer `peer` (a Hearth node or not), whose messages go out through `out`.
    pub fn connect(
        self: &Arc<Self>,
        peer: String,
        hearth: bool,
        out: mpsc::Sender<Message>,
    ) -> Registered {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.conns).insert(key, Conn { peer, hearth, out });
        Registered {
            sharing: self.clone(),
            key,
        }
    }

    /// Ask every connected Hearth peer for `model`: the ones that have it, once all answered or
    /// `wait` is over.
    pub async fn query(&self, model: &str, wait: Duration) -> Vec<Offer> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let targets: Vec<(u64, mpsc::Sender<Message>)> = lock(&self.conns)
            .iter()
            .filter(|(_, c)| c.hearth)
            .map(|(k, c)| (*k, c.out.clone()))
            .collect();
        let mut waiting = std::collections::HashSet::new();
        for (conn, out) in &targets {
            let q = Message::ModelQuery(ModelQuery {
                model_id: model.to_owned(),
            });
            if out.try_send(q).is_ok() {
                waiting.insert(*conn);
            }
        }
        let asked = waiting.len();
        lock(&self.queries).push(Query {
            model: model.to_owned(),
            waiting,
            answers: tx.clone(),
        });
        drop(tx);
        let mut offers = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        let mut answered = 0;
        while answered < asked {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((_, offer))) => {
                    answered += 1;
                    offers.extend(offer);
                }
                _ => break,
            }
        }
        drop(rx);
        lock(&self.queries).retain(|q| !q.answers.is_closed());
        offers
    }

    /// A peer's answer to a query.
    pub fn answered(&self, conn: u64, r: ModelQueryResponse) {
        let Some(peer) = lock(&self.conns).get(&conn).map(|c| c.peer.clone()) else {
            return;
        };
        let offer = (r.available && r.total_size_bytes.is_some()).then(|| Offer {
            conn,
            peer,
            size: r.total_size_bytes.unwrap_or(0),
            sha256: r.sha256.map(|s| s.to_ascii_lowercase()),
            files: r
                .files
                .into_iter()
                .map(|f| ModelFileOffer {
                    sha256: f.sha256.to_ascii_lowercase(),
                    ..f
                })
                .collect(),
            projector: r.projector.map(|f| ModelFileOffer {
                sha256: f.sha256.to_ascii_lowercase(),
                ..f
            }),
        });
        for q in lock(&self.queries)
            .iter_mut()
            .filter(|q| q.model == r.model_id)
        {
            // Only a connection asked, and only its first answer: a peer cannot vote twice.
            if q.waiting.remove(&conn) {
                let _ = q.answers.send((conn, offer.clone()));
            }
        }
    }

    /// Ask the peer on `conn` for `length` bytes of `model` (of its file `file`, for a split
    /// model) from `offset`: its pieces, in order, until `Complete` (or the end of the channel:
    /// the peer is gone).
    pub fn request(
        &self,
        conn: u64,
        model: &str,
        file: Option<&str>,
        offset: u64,
        length: u64,
    ) -> Result<mpsc::Receiver<Piece>, String> {
        let out = lock(&self.conns)
            .get(&conn)
            .map(|c| c.out.clone())
            .ok_or_else(|| "the peer is no longer connected".to_owned())?;
        let id = PeerUuid::from_bytes(*uuid::Uuid::new_v4().as_bytes());
        let (tx, rx) = mpsc::channel(PIECES_WAITING);
        let asked = Asked {
            conn,
            model: model.to_owned(),
            tx,
        };
        lock(&self.transfers).insert(id.clone(), asked);
        let req = Message::ModelTransferRequest(ModelTransferRequest {
            transfer_id: id.clone(),
            model_id: model.to_owned(),
            file_name: file.map(str::to_owned),
            offset: Some(offset),
            length: Some(length),
            binary_chunks: BINARY_CHUNK_VERSION,
        });
        if out.try_send(req).is_err() {
            lock(&self.transfers).remove(&id);
            return Err("the peer's connection is busy".into());
        }
        Ok(rx)
    }

    /// A chunk for one of this node's transfers, from connection `conn`: handed to its writer,
    /// waiting while the writer is behind (which holds the connection back) for at most
    /// [`WRITER_WAIT`]: past that the transfer is dropped and its range goes on later, so the
    /// connection's pings never stop for long.
    pub async fn deliver(&self, conn: u64, chunk: ModelTransferChunk) {
        let Some(tx) = self.sender(conn, &chunk.transfer_id) else {
            return;
        };
        let piece = match chunk.bytes() {
            Some(data) => piece(chunk.file_name, chunk.offset, Bytes::from(data)),
            None => Piece::Bad("a chunk that is not base64".into()),
        };
        self.hand_over(conn, tx, &chunk.transfer_id, piece).await;
    }

    /// A binary chunk (from a Hearth peer) for one of this node's transfers: as [`Self::deliver`].
    pub async fn deliver_binary(&self, conn: u64, chunk: HearthChunk) {
        let Some(tx) = self.sender(conn, &chunk.transfer_id) else {
            return;
        };
        let id = chunk.transfer_id.clone();
        let (file_name, offset) = (chunk.file_name.clone(), chunk.offset);
        let (wire, at) = chunk.into_wire();
        let data = Bytes::from(wire).slice(at..);
        self.hand_over(conn, tx, &id, piece(file_name, offset, data))
            .await;
    }

    /// A piece to its writer; a writer gone, or behind for [`WRITER_WAIT`], ends the transfer
    /// and the peer is asked to stop sending it.
    async fn hand_over(&self, conn: u64, tx: mpsc::Sender<Piece>, id: &PeerUuid, piece: Piece) {
        if let Ok(Ok(())) = tokio::time::timeout(WRITER_WAIT, tx.send(piece)).await {
            return;
        }
        let Some(asked) = lock(&self.transfers).remove(id) else {
            return;
        };
        // Hearth's use of the message from the receiving side: stop serving this transfer
        // (only Hearth peers are asked for transfers).
        let stop = Message::ModelTransferComplete(ModelTransferComplete {
            transfer_id: id.clone(),
            model_id: asked.model,
        });
        let out = lock(&self.conns).get(&conn).map(|c| c.out.clone());
        if let Some(out) = out {
            // Waiting for room in the outbox if need be (this transfer's chunks are dropped
            // from here on, so this is its only word).
            tokio::spawn(async move {
                let _ = tokio::time::timeout(WRITER_WAIT * 5, out.send(stop)).await;
            });
        }
    }

    /// Whether `id` is one of this node's transfers on `conn` (a `modelTransferComplete` for
    /// any other is the peer asking this node to stop serving it).
    pub fn is_ours(&self, conn: u64, id: &PeerUuid) -> bool {
        self.sender(conn, id).is_some()
    }

    /// The end of one of this node's transfers, from connection `conn`.
    pub async fn complete(&self, conn: u64, c: ModelTransferComplete) {
        if self.sender(conn, &c.transfer_id).is_none() {
            return;
        }
        let tx = lock(&self.transfers).remove(&c.transfer_id).map(|a| a.tx);
        if let Some(tx) = tx {
            let _ = tokio::time::timeout(WRITER_WAIT, tx.send(Piece::Complete)).await;
        }
    }

    /// The writer of transfer `id`, when it was asked of the peer on `conn`.
    fn sender(&self, conn: u64, id: &PeerUuid) -> Option<mpsc::Sender<Piece>> {
        lock(&self.transfers)
            .get(id)
            .filter(|a| a.conn == conn)
            .map(|a| a.tx.clone())
    }
}

/// A chunk's piece: its bytes when there are 1 byte to 1 MiB of them.
fn piece(file_name: String, offset: u64, data: Bytes) -> Piece {
    if data.is_empty() || data.len() as u64 > CHUNK_BYTES {
        return Piece::Bad("a chunk of no bytes or over 1 MiB".into());
    }
    Piece::Chunk {
        file_name,
        offset,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection registered for sharing, a transfer asked on it (its pieces, the request)
    /// and what goes out to the peer after it.
    async fn asked(
        sharing: &Arc<Sharing>,
    ) -> (
        Registered,
        mpsc::Receiver<Piece>,
        ModelTransferRequest,
        mpsc::Receiver<Message>,
    ) {
        let (out, mut sent) = mpsc::channel(4);
        let conn = sharing.connect("peer".into(), true, out);
        let rx = sharing.request(conn.key, "m", None, 0, 10).unwrap();
        let Some(Message::ModelTransferRequest(req)) = sent.recv().await else {
            panic!("a transfer request goes out")
        };
        (conn, rx, req, sent)
    }

    fn json_chunk(id: &PeerUuid, data: &str) -> ModelTransferChunk {
        ModelTransferChunk {
            transfer_id: id.clone(),
            file_name: "m.gguf".into(),
            offset: 0,
            data: data.into(),
            is_last_chunk: false,
        }
    }

    fn binary_chunk(id: &PeerUuid, data: &[u8]) -> HearthChunk {
        HearthChunk::build(id.clone(), "m.gguf".into(), 0, false, data.len(), |b| {
            b.extend_from_slice(data);
            Ok::<(), ()>(())
        })
        .unwrap()
    }

    async fn next(rx: &mut mpsc::Receiver<Piece>) -> Result<Vec<u8>, String> {
        match rx.recv().await {
            Some(Piece::Chunk { data, .. }) => Ok(data.to_vec()),
            Some(Piece::Bad(why)) => Err(why),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_request_asks_for_binary_chunks_and_either_kind_arrives_as_the_same_bytes() {
        let sharing = Arc::new(Sharing::default());
        let (conn, mut rx, req, mut sent) = asked(&sharing).await;
        assert_eq!(
            req.binary_chunks, BINARY_CHUNK_VERSION,
            "a Hearth node takes them"
        );
        let id = req.transfer_id;
        sharing
            .deliver(
                conn.key,
                json_chunk(&id, &ModelTransferChunk::encode(b"hearth")),
            )
            .await;
        assert_eq!(next(&mut rx).await.unwrap(), b"hearth");
        sharing
            .deliver_binary(conn.key, binary_chunk(&id, b"hearth"))
            .await;
        assert_eq!(next(&mut rx).await.unwrap(), b"hearth");
        // Bad data, empty or over a megabyte, of either kind: refused.
        sharing
            .deliver(conn.key, json_chunk(&id, "not base64"))
            .await;
        assert!(next(&mut rx).await.is_err());
        sharing.deliver(conn.key, json_chunk(&id, "")).await;
        assert!(next(&mut rx).await.is_err());
        sharing
            .deliver_binary(conn.key, binary_chunk(&id, b""))
            .await;
        assert!(next(&mut rx).await.is_err());
        let big = vec![7u8; CHUNK_BYTES as usize + 1];
        sharing
            .deliver_binary(conn.key, binary_chunk(&id, &big))
            .await;
        assert!(next(&mut rx).await.is_err());
        // From another connection, or for another transfer: not this transfer's.
        let (other, _rx2, _, _) = asked(&sharing).await;
        sharing
            .deliver_binary(other.key, binary_chunk(&id, b"x"))
            .await;
        let stranger = PeerUuid::from_bytes([3; 16]);
        sharing
            .deliver_binary(conn.key, binary_chunk(&stranger, b"x"))
            .await;
        assert!(rx.try_recv().is_err(), "nothing else arrived");
        assert!(sent.try_recv().is_err(), "nothing asked of the peer yet");
        // The writer gone: the next chunk ends the transfer and the peer is told to stop.
        drop(rx);
        sharing
            .deliver_binary(conn.key, binary_chunk(&id, b"late"))
            .await;
        let told = tokio::time::timeout(Duration::from_secs(5), sent.recv()).await;
        match told {
            Ok(Some(Message::ModelTransferComplete(c))) => {
                assert_eq!((c.transfer_id, c.model_id.as_str()), (id.clone(), "m"));
            }
            other => panic!("{other:?}"),
        }
        assert!(!sharing.is_ours(conn.key, &id));
        sharing
            .deliver_binary(conn.key, binary_chunk(&id, b"later"))
            .await;
        let again = tokio::time::timeout(Duration::from_millis(200), sent.recv()).await;
        assert!(again.is_err(), "told once: {again:?}");
    }
}
