//! The owner's side of one split model: a tunnel to each peer that shares its memory, each
//! carried to a loopback port that only the worker process may use; the worker process
//! (`hearth-node serve` with the model's last layers on those ports) that joins this node;
//! and, when a tunnel or the worker ends, the worker stopped, the lost peer named, and the
//! split set up again on the peers there are.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_protocol::ModelId;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{lock, Split, Splits};
use crate::error::SplitError;
use crate::layout::{place, weight_bytes, PeerShare, SplitLayout};
use hearth_cluster::tunnel::{Offer, Tunnel};
use hearth_cluster::Context;

/// How long a worker's ggml may take to connect to a tunnel's local end.
const WORKER_CONNECT_WAIT: Duration = Duration::from_secs(120);
/// The first pause before a lost split loads again, and the longest.
const RELOAD_FIRST: Duration = Duration::from_secs(1);
const RELOAD_MOST: Duration = Duration::from_secs(30);
/// A worker that served this long was healthy: the next reload starts the backoff over.
const HEALTHY_AFTER: Duration = Duration::from_secs(30);
/// How long a worker may take to stop as its node stops (saving its idle sequences) before it
/// is killed.
pub(crate) const WORKER_STOP_WAIT: Duration = Duration::from_secs(10);

impl Splits {
    /// A tunnel to each connected Hearth peer that shares its memory, each carried to a local
    /// port for the worker until `attempt` is cancelled (which a tunnel's end does too): the
    /// placement, and the ports as the worker's endpoints.
    pub(super) async fn launch(
        self: &Arc<Self>,
        state: &Arc<Context>,
        split: &Split,
        attempt: &CancellationToken,
    ) -> Result<(SplitLayout, Vec<String>), SplitError> {
        let launched = self.open_tunnels(state, split, attempt).await;
        if launched.is_err() {
            attempt.cancel();
        }
        launched
    }

    async fn open_tunnels(
        self: &Arc<Self>,
        state: &Arc<Context>,
        split: &Split,
        attempt: &CancellationToken,
    ) -> Result<(SplitLayout, Vec<String>), SplitError> {
        let dialer = state.dialer().ok_or(SplitError::NoCluster)?;
        let me = dialer.me().clone();
        // The Hearth peers connected now, once each, where their clusters listen.
        let peers: Vec<String> = state
            .peers
            .list()
            .into_iter()
            .filter(|p| p.kind == "hearth")
            .filter_map(|p| p.listens_at)
            .collect();
        let (mut opened, mut refused) = (Vec::new(), Vec::new());
        for addr in peers {
            let tunnel = match Tunnel::open(&me, &addr, hearth_protocol::cluster::RPC_TUNNEL).await
            {
                Ok(t) => t,
                Err(why) => {
                    refused.push(format!("{addr}: {why}"));
                    continue;
                }
            };
            // Carried (and kept alive) from now: opening the next one may take seconds.
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let endpoint = listener.local_addr()?;
            let offer = tunnel.offer.unwrap_or(Offer {
                memory: 0,
                device_memory: 0,
            });
            opened.push((addr, tunnel.peer_name.clone(), endpoint.to_string(), offer));
            tokio::spawn(
                self.clone()
                    .carry(split.id.clone(), listener, tunnel, attempt.clone()),
            );
        }
        if opened.is_empty() {
            let why = if refused.is_empty() {
                "this node has no peers".to_owned()
            } else {
                refused.join("; ")
            };
            return Err(SplitError::NoPeer(why));
        }
        // The peer offering most last, so it holds the output layer (the largest unit), and
        // the same placement whichever peer connected first.
        opened.sort_by(|a, b| a.3.memory.cmp(&b.3.memory).then_with(|| a.0.cmp(&b.0)));
        let size = std::fs::metadata(&split.path).map_or(0, |m| m.len());
        // What each machine offers now: this one the room its loaded models leave (this
        // model's own, if loaded whole, is given up), each peer what its tunnel's answer said.
        // The projector, if any, stays here whole with the worker; a draft model is not loaded.
        let need = state.host.split_estimate_of(&split.path);
        let here = hearth_models::memory::projector_need(&split.path);
        let local_offer = state.host.free_for_models(Some(&split.id));
        let offers: Vec<Offer> = opened.iter().map(|o| o.3).collect();
        let shares = place(split.layers, (need, here), local_offer, &offers).map_err(|why| {
            SplitError::NoRoom {
                model: split.id.0.clone(),
                why,
            }
        })?;
        let local_layers = shares.local;
        let mut endpoints = Vec::new();
        let mut peers = Vec::new();
        for (i, ((addr, name, endpoint, _), n)) in opened.into_iter().zip(shares.peers).enumerate()
        {
            endpoints.push(endpoint);
            peers.push(PeerShare {
                name,
                addr,
                layers: n,
                output: i == shares.output_on,
                bytes: weight_bytes(size, n, split.layers),
            });
        }
        let placement = SplitLayout {
            model: split.id.0.clone(),
            local_layers,
            local_bytes: weight_bytes(size, local_layers, split.layers),
            peers,
            state: "loading".into(),
            error: None,
        };
        Ok((placement, endpoints))
    }

    /// `hearth-node serve` for split model `id`, joining this node as a worker. It gets none
    /// of this node's `HEARTH_*` settings (it must not share the LAN, join the cluster or take
    /// a port), and ends when its standard input closes: when this node stops, or dies.
    fn worker(
        &self,
        id: &ModelId,
        path: &Path,
        endpoints: &[String],
        shares: &[u32],
        state: &Context,
    ) -> std::io::Result<tokio::process::Child> {
        let remote_layers: u32 = shares.iter().sum();
        let shares: Vec<String> = shares.iter().map(ToString::to_string).collect();
        let dir = self.data_dir.join("split").join(&id.0);
        std::fs::create_dir_all(&dir)?;
        let settings = state.host.settings();
        let hub = SocketAddr::new(self.own_ip(), self.node_addr.port());
        let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("HEARTH_") {
                cmd.env_remove(key);
            }
        }
        cmd.arg("serve")
            .args(["--host", "127.0.0.1", "--port", "0", "--cluster-port", "0"])
            .args(["--no-discovery", "--key-storage", "file"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--models-dir")
            .arg(dir.join("models"))
            .arg("--model")
            .arg(path)
            .args(["--parallel", &settings.slots.to_string()])
            .args(["--threads", &settings.threads.to_string()])
            .args(["--kv-type", settings.kv_type.name()])
            .args(["--split-remote", &endpoints.join(",")])
            .args(["--split-layers", &remote_layers.to_string()])
            .args(["--split-shares", &shares.join(",")])
            .args(["--join", &format!("ws://{hub}/node")])
            .args(["--name", &Self::worker_name(state)])
            .arg("--until-stdin-closes")
            .env("HEARTH_JOIN_TOKEN", &self.token)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        // The context the estimate that placed the layers counted.
        cmd.args(["--ctx", &state.host.context_for(path).to_string()]);
        // The projector this node found for the model (one named by --projector is not beside it).
        if let Some(projector) = hearth_engine::find_projector(path) {
            cmd.arg("--projector").arg(projector);
        }
        if settings.shared_cache {
            cmd.args(["--cache-scope", "node"]);
        }
        if let Some(bytes) = settings.cache_ram {
            cmd.args(["--cache-ram", &(bytes >> 20).to_string()]);
        }
        // The prompt cache on disk too: the split's layout has a folder of its own there.
        if let Some(dir) = &settings.cache_disk {
            cmd.arg("--cache-disk").arg(dir);
            cmd.args([
                "--cache-disk-max",
                &(settings.cache_disk_max >> 20).to_string(),
            ]);
        }
        cmd.spawn()
    }

    /// Run the split's worker until the split stops. When a tunnel ends (a peer lost, even
    /// while idle) or the worker does, the worker is stopped, the placement says why, and the
    /// split is set up again on the peers there are, with backoff.
    pub(super) async fn run(
        self: Arc<Self>,
        state: Arc<Context>,
        split: Split,
        first: (Vec<String>, CancellationToken),
        stop: CancellationToken,
    ) {
        let (mut endpoints, mut attempt) = first;
        let mut delays = hearth_base::backoff::jittered(RELOAD_FIRST, RELOAD_MOST);
        loop {
            // llama.cpp's offloaded units on each peer: its layers, and the output layer.
            let shares: Vec<u32> = lock(&self.running)
                .get(&split.id)
                .map(|r| {
                    r.placement
                        .peers
                        .iter()
                        .map(|p| p.layers + u32::from(p.output))
                        .collect()
                })
                .unwrap_or_default();
            let started = Instant::now();
            let why = match self.worker(&split.id, &split.path, &endpoints, &shares, &state) {
                Ok(mut worker) => {
                    if let Some(r) = lock(&self.running).get_mut(&split.id) {
                        r.worker_pid = worker.id();
                    }
                    // Held open while it runs (`wait` would close it): its end stops the worker.
                    let stdin = worker.stdin.take();
                    tokio::select! {
                        status = worker.wait() => match status {
                            Ok(s) => format!("its worker process ended ({s})"),
                            Err(e) => format!("its worker process was lost: {e}"),
                        },
                        () = attempt.cancelled() => {
                            let _ = worker.kill().await;
                            "a tunnel to a peer ended".to_owned()
                        }
                        () = self.closing.cancelled() => {
                            // The node stops: the worker stops as a node does, then is killed
                            // if it takes too long.
                            drop(stdin);
                            if tokio::time::timeout(WORKER_STOP_WAIT, worker.wait()).await.is_err() {
                                tracing::warn!(model = %split.id, "the split's worker did not stop in time; killed");
                                let _ = worker.kill().await;
                            }
                            return;
                        }
                        () = stop.cancelled() => {
                            let _ = worker.kill().await;
                            return;
                        }
                    }
                }
                Err(e) => format!("its worker process could not start: {e}"),
            };
            attempt.cancel();
            // Ended, or its node stopping: not started again.
            if stop.is_cancelled() || self.closing.is_cancelled() {
                return;
            }
            if started.elapsed() >= HEALTHY_AFTER {
                delays = hearth_base::backoff::jittered(RELOAD_FIRST, RELOAD_MOST);
            }
            // The tunnel whose end stopped it, when one did, has said so by now.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let lost = lock(&self.running)
                .get_mut(&split.id)
                .map(|r| std::mem::take(&mut r.lost))
                .unwrap_or_default();
            let why = if lost.is_empty() {
                why
            } else {
                format!("{why}: lost {}", lost.join("; "))
            };
            tracing::warn!(model = %split.id, %why, "a split model stopped; loading it again when peers share memory");
            self.set_state(&split.id, "failed", Some(why.clone()));
            // Requests for it are answered at once meanwhile: served whole here when it fits,
            // else refused for now with why (never left waiting for a worker that is gone).
            state.host.set_split_lost(&split.id, why.clone());
            loop {
                tokio::select! {
                    () = tokio::time::sleep(delays.next().unwrap_or(RELOAD_MOST)) => {}
                    () = stop.cancelled() => return,
                    () = self.closing.cancelled() => return,
                }
                attempt = stop.child_token();
                match self.launch(&state, &split, &attempt).await {
                    Ok((placement, e)) => {
                        endpoints = e;
                        // Under the lock `stop` takes: a split ended meanwhile stays ended.
                        {
                            let mut running = lock(&self.running);
                            match running.get_mut(&split.id) {
                                Some(r) if !stop.is_cancelled() => r.placement = placement,
                                _ => {
                                    attempt.cancel();
                                    return;
                                }
                            }
                            state.host.set_elsewhere(&split.id, Some(&split.path));
                        }
                        // Served whole here while the split was down: its worker takes over.
                        state.host.unload(Some(&split.id)).await;
                        tracing::info!(model = %split.id, "loading a split model again");
                        break;
                    }
                    Err(e) => self.set_state(&split.id, "failed", Some(format!("{why}; {e}"))),
                }
            }
        }
    }

    /// One tunnel's local end: kept alive until the worker's ggml connects (a connection from
    /// any other process is closed), then the bytes go both ways until either side ends; then
    /// the split's attempt ends, which stops the worker.
    async fn carry(
        self: Arc<Self>,
        model: ModelId,
        listener: TcpListener,
        mut tunnel: Tunnel,
        attempt: CancellationToken,
    ) {
        let peer = format!("{} ({})", tunnel.peer_name, tunnel.peer_addr);
        let accept = async {
            let deadline = tokio::time::Instant::now() + WORKER_CONNECT_WAIT;
            loop {
                let (conn, from) = match tokio::time::timeout_at(deadline, listener.accept()).await
                {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => return Err(format!("no local connection: {e}")),
                    Err(_) => return Err("the worker never connected".to_owned()),
                };
                let worker = lock(&self.running).get(&model).and_then(|r| r.worker_pid);
                let ours = listener.local_addr().is_ok_and(|at| {
                    worker.is_some_and(|pid| crate::socket_owner::connected_from(pid, from, at))
                });
                if ours {
                    return Ok(conn);
                }
                tracing::warn!(%from, "closed a connection to a split model's tunnel from another program");
            }
        };
        let accepted = tokio::select! {
            a = tunnel.idle_until(accept) => a,
            () = attempt.cancelled() => return,
        };
        drop(listener);
        let why = match accepted {
            Ok(Ok(conn)) => {
                let _ = conn.set_nodelay(true);
                let (from, to) = conn.into_split();
                tokio::select! {
                    why = tunnel.pump(from, to) => why,
                    () = attempt.cancelled() => return,
                }
            }
            Ok(Err(why)) | Err(why) => why,
        };
        tracing::warn!(model = %model, %peer, %why, "a split model's tunnel ended");
        if let Some(r) = lock(&self.running).get_mut(&model) {
            r.lost.push(format!("{peer}: {why}"));
        }
        attempt.cancel();
    }

    /// The address this node's doors answer on from this machine.
    pub(super) fn own_ip(&self) -> std::net::IpAddr {
        match self.node_addr.ip() {
            ip if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            ip => ip,
        }
    }
}
