//! [`crate::node::Node::start`]'s steps, in the order it takes them: which model files, the
//! open-files limit, the data dir (lock, database, identity), where the node listens and the
//! cluster settings stored in the UI, the listeners (and their port in the data dir's lock
//! file), the model host, the shared state the doors and the cluster read, the hub worker
//! (`--join`), the doors serving, and the cluster. Each step is one function here; `start`
//! itself only strings them together.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use hearth_base::connections::PerAddress;
use hearth_models::{EngineSettings, ModelHost};
use hearth_server::AppState;
use hearth_store::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{self, NodeConfig};
use crate::error::NodeError;
use crate::node_cluster::{bind_cluster_default, cluster_host, discover, ClusterRun};

/// The model to load at start (none on a new machine) and the draft model, as files.
pub(crate) struct ModelFiles {
    pub(crate) model: Option<PathBuf>,
    pub(crate) draft: Option<PathBuf>,
}

/// Resolve `--model` and `--draft-model`. A new machine has no model yet: the node starts
/// without one (every door answers "no model loaded" until the UI or the API loads one). A
/// model asked for by name must exist.
pub(crate) fn model_files(config: &NodeConfig) -> Result<ModelFiles, NodeError> {
    let model = match config::resolve_model(&config.models_dir, config.model.as_deref()) {
        Ok(path) => Some(path),
        Err(config::ModelPathError::NoModels(dir)) if config.model.is_none() => {
            tracing::warn!(
                models_dir = %dir.display(),
                "no model yet: starting without one; load one from the web UI (Models) or put a .gguf file in the models folder"
            );
            None
        }
        Err(e) => return Err(e.into()),
    };
    let draft = match config.draft_model.as_deref() {
        Some(name) => match config::resolve_model(&config.models_dir, Some(name)) {
            Ok(path) => Some(path),
            Err(config::ModelPathError::NotFound(name, looked)) => {
                return Err(NodeError::DraftModel(name, looked))
            }
            Err(e) => return Err(e.into()),
        },
        None if config.spec == hearth_protocol::Speculation::Draft => {
            return Err(NodeError::DraftSpecWithoutModel)
        }
        None => None,
    };
    if let Some(projector) = &config.projector {
        let Some(model) = &model else {
            let why = "names the projector of --model: give --model too".to_owned();
            return Err(NodeError::Projector(projector.clone(), why));
        };
        check_projector(projector)?;
        hearth_engine::name_projector(model, projector.clone());
    }
    Ok(ModelFiles { model, draft })
}

/// Whether `path` is a projector (a GGUF file of architecture `clip`), as `--projector` must
/// name.
fn check_projector(path: &std::path::Path) -> Result<(), NodeError> {
    let refuse = |why: String| NodeError::Projector(path.to_path_buf(), why);
    let info = hearth_engine::gguf::read(path).map_err(|e| refuse(e.to_string()))?;
    if info.architecture != "clip" {
        return Err(refuse(format!(
            "not a projector: its architecture is {}, a projector's is clip (an mmproj file)",
            info.architecture
        )));
    }
    Ok(())
}

/// Every connection is a file descriptor: take what the system allows, not the default soft
/// limit (1,024 on most Linux systems).
pub(crate) fn raise_open_files() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(open_files = n, "open-files limit"),
        Err(e) => tracing::debug!(error = %e, "the open-files limit could not be raised"),
    }
}

/// The data dir, held: its lock (before anything in it is touched, so that a second node never
/// opens its database), the database, and the node's identity.
pub(crate) struct DataDir {
    pub(crate) lock: hearth_base::data_dir::DataDirLock,
    pub(crate) store: Store,
    pub(crate) identity: hearth_auth::identity::Identity,
}

pub(crate) async fn open_data_dir(config: &NodeConfig) -> Result<DataDir, NodeError> {
    let lock = hearth_base::data_dir::DataDirLock::acquire(&config.data_dir)?;
    let store = Store::open(&config.data_dir)?;
    let (data_dir, key_storage) = (config.data_dir.clone(), config.key_storage);
    let identity = tokio::task::spawn_blocking(move || {
        hearth_auth::identity::Identity::load_or_create(&data_dir, key_storage)
    })
    .await
    .map_err(|e| NodeError::IdentityTask(e.to_string()))??;
    tracing::info!(device_id = %identity.device_id(), "node identity");
    let interrupted = store.interrupt_streaming().await?;
    if interrupted > 0 {
        tracing::info!(
            messages = interrupted,
            "answers cut off by the last shutdown are marked interrupted"
        );
    }
    Ok(DataDir {
        lock,
        store,
        identity,
    })
}

/// Where the node listens: shared on the LAN or on loopback only.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reach {
    /// Where the node listens when exposed to the LAN.
    pub(crate) lan_host: IpAddr,
    pub(crate) exposed: bool,
    /// Where it listens at start.
    pub(crate) bind_host: IpAddr,
}

/// Where the node listens, refused before anything listens when the cluster would speak plain
/// text on the LAN without a passcode (any machine there could use the model without a key).
pub(crate) fn reach(config: &NodeConfig) -> Result<Reach, NodeError> {
    let lan_host = if config.host.is_loopback() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        config.host
    };
    let exposed = config.lan || !config.host.is_loopback();
    if exposed
        && config
            .cluster
            .as_ref()
            .is_some_and(|c| c.tealenet_compat && c.passcode.is_none())
    {
        return Err(NodeError::ClusterWithoutPasscode);
    }
    let bind_host = if exposed { lan_host } else { config.host };
    Ok(Reach {
        lan_host,
        exposed,
        bind_host,
    })
}

/// The passcode and compatibility set in the UI, unless the command line sets them; a stored
/// compatibility that this start could not allow is left off (a setting must never keep the
/// node from starting).
pub(crate) async fn stored_cluster_settings(
    config: &mut NodeConfig,
    store: &Store,
    exposed: bool,
) -> Result<(), NodeError> {
    let Some(c) = &mut config.cluster else {
        return Ok(());
    };
    if c.passcode.is_none() {
        c.passcode = store.node_setting(hearth_cluster::SETTING_PASSCODE).await?;
    }
    let stored_compat = store
        .node_setting(hearth_cluster::SETTING_COMPAT)
        .await?
        .is_some_and(|v| v == "true");
    if stored_compat && exposed && c.passcode.is_none() {
        tracing::warn!(
            "TealeNet compatibility (set in the UI) stays off: on the LAN it needs a passcode"
        );
    } else {
        c.tealenet_compat |= stored_compat;
    }
    Ok(())
}

/// The node's listeners, bound: the doors' port, the Ollama port (`--ollama-port`) and the
/// cluster's.
pub(crate) struct Listeners {
    pub(crate) doors: TcpListener,
    pub(crate) addr: SocketAddr,
    pub(crate) ollama: Option<(TcpListener, SocketAddr)>,
    pub(crate) cluster: Option<(TcpListener, hearth_cluster::ClusterConfig)>,
}

async fn bind_at(at: SocketAddr) -> Result<(TcpListener, SocketAddr), NodeError> {
    let l = TcpListener::bind(at)
        .await
        .map_err(|source| NodeError::Bind { addr: at, source })?;
    let bound = l
        .local_addr()
        .map_err(|source| NodeError::Bind { addr: at, source })?;
    Ok((l, bound))
}

pub(crate) async fn bind(config: &NodeConfig, reach: Reach) -> Result<Listeners, NodeError> {
    let host = reach.bind_host;
    let (doors, addr) = bind_at(SocketAddr::new(host, config.port)).await?;
    let ollama = match config.ollama_port {
        Some(port) => Some(bind_at(SocketAddr::new(host, port)).await?),
        None => None,
    };
    // The cluster's listener, where the doors listen; on the LAN only with a passcode (without
    // one any machine there could use this node without an API key).
    let cluster = match &config.cluster {
        Some(c) => {
            let host = cluster_host(host, c.passcode.is_some());
            let l = match c.port {
                Some(port) => bind_at(SocketAddr::new(host, port)).await?.0,
                None => bind_cluster_default(host).await?,
            };
            Some((l, c.clone()))
        }
        None => None,
    };
    Ok(Listeners {
        doors,
        addr,
        ollama,
        cluster,
    })
}

/// The port the node listens on, written into the data dir's lock file beside this process;
/// a failure is only logged.
pub(crate) fn record_port(lock: &mut hearth_base::data_dir::DataDirLock, port: u16) {
    if let Err(e) = lock.record(Some(port)) {
        tracing::warn!(error = %e, "could not write the port into the data dir's lock file");
    }
}

/// The model host with the node's engine settings, the start model loading (a failure is the
/// host's state, which the UI shows, and in the log), and the throttle cap set on the Settings
/// page.
pub(crate) async fn model_host(
    config: &NodeConfig,
    files: ModelFiles,
    store: &Store,
) -> Result<Arc<ModelHost>, NodeError> {
    let host = ModelHost::new(EngineSettings {
        slots: config.parallel.max(1),
        threads: config.threads.max(1),
        context: config.ctx,
        kv_type: config.kv_type,
        cache_ram: config.cache_ram,
        cache_disk: config.cache_disk.clone(),
        cache_disk_max: config.cache_disk_max,
        shared_cache: config.shared_cache,
        spec: config.spec,
        draft_model: files.draft,
        queue_capacity: config.queue,
        min_load_time: config.min_load_time,
        script: config.script.clone(),
        remote: config.remote.clone(),
        offload: config.offload.clone(),
        keep_alive: config.keep_alive,
        memory_limit: config.memory_limit,
    });
    log_devices(&config.offload);
    if let Some(path) = files.model {
        let _ = host.load(path).await;
    }
    if let Some(cap) = store
        .node_setting(hearth_server::SETTING_THROTTLE_CAP)
        .await?
        .and_then(|v| v.parse::<u8>().ok())
    {
        host.set_throttle_cap(cap);
    }
    Ok(host)
}

/// The devices llama.cpp found, and the CPU variant it picked, in the log at start.
fn log_devices(offload: &hearth_engine::Offload) {
    let backends = hearth_engine::backends();
    for d in hearth_engine::devices::devices() {
        tracing::info!(
            device = %d.name,
            kind = ?d.kind,
            backend = %d.backend,
            description = %d.description,
            memory_total_mib = d.memory_total >> 20,
            memory_free_mib = d.memory_free >> 20,
            "compute device"
        );
    }
    tracing::info!(
        cpu_variant = backends.cpu_variant.as_deref().unwrap_or("built in"),
        gpu_layers = ?offload.layers,
        device = ?offload.device,
        "models go to the GPU as these say"
    );
}

/// The state every part shares: the node's core (with the keep-alive and telemetry tasks, the
/// route with its registry of remote providers, model sharing), the cluster's context around
/// it, and the doors' state; downloads a previous run left part way go on, and the split
/// serves the tunnels peers open.
pub(crate) fn shared_state(
    config: &NodeConfig,
    host: Arc<ModelHost>,
    data: (Store, hearth_auth::identity::Identity),
    exposed: bool,
    listeners: &Listeners,
    (mcp, secrets): (hearth_tools::McpServers, hearth_auth::secrets::Secrets),
) -> Result<Arc<AppState>, NodeError> {
    let image_urls = config
        .image_urls
        .then(hearth_server::ImageUrls::new)
        .transpose()
        .map_err(|e| NodeError::ImageUrls(e.to_string()))?;
    let (store, identity) = data;
    let shutdown = CancellationToken::new();
    host.spawn_keep_alive(shutdown.child_token());
    let telemetry = hearth_models::telemetry::spawn(
        host.clone(),
        shutdown.child_token(),
        config.thermal_zone.clone(),
    );
    let sharing = Arc::new(hearth_models::sharing::Sharing::default());
    sharing.set_pace(config.transfer_pace);
    // The registry of remote providers: a hub's workers, and the cluster's peers.
    let hub = config
        .hub
        .clone()
        .or_else(|| {
            config
                .cluster
                .as_ref()
                .map(|_| hearth_hub::HubConfig::peers_only())
        })
        .map(hearth_hub::Hub::new);
    let router = hearth_route::Router::new(
        host.clone(),
        hearth_models::Registry::new(&config.models_dir),
        hub,
        shutdown.clone(),
    );
    let downloads = hearth_models::Downloads::new(
        config.models_dir.clone(),
        config.hub_url.clone(),
        Some(sharing.clone()),
        shutdown.child_token(),
    );
    let core = hearth_cluster::Core {
        host,
        store,
        node_name: config.name.clone(),
        identity: Arc::new(identity),
        router,
        sharing,
        telemetry,
        limits: config.limits,
        shutdown,
    };
    let cluster_port = listeners
        .cluster
        .as_ref()
        .and_then(|(l, _)| l.local_addr().ok())
        .map(|a| a.port());
    let cluster = Arc::new(hearth_cluster::Context::new(core, cluster_port));
    let mut allowed_hosts = config.allowed_hosts.clone();
    allowed_hosts.push(config.name.clone());
    allowed_hosts.push(format!("{}.local", config.name));
    let splits = Arc::new(hearth_split::Splits::new(
        config.share_memory,
        listeners.addr,
        config.data_dir.clone(),
    ));
    let documents = match &config.document_reader {
        Some(program) => hearth_docs::Reader::new(program.clone()),
        None => hearth_docs::Reader::this_program().map_err(NodeError::DocumentReader)?,
    };
    let state = Arc::new(AppState::new(
        cluster,
        config.models_dir.clone(),
        config.import_roots.clone(),
        downloads,
        splits,
        image_urls,
        hearth_server::DoorSettings {
            exposed,
            allowed_hosts,
            batch_defaults: config.batch_defaults.clone(),
            auth_timeout: config.auth_timeout,
            mcp,
            secrets,
            documents,
        },
    ));
    state.downloads.resume_partials();
    hearth_split::attach(&state.cluster, &state.splits);
    Ok(state)
}

/// The doors, serving: the axum app on the doors' listener and the Ollama port's.
pub(crate) struct Doors {
    pub(crate) app: axum::Router,
    pub(crate) stop: CancellationToken,
    pub(crate) tasks: Vec<JoinHandle<()>>,
    pub(crate) connections: Arc<PerAddress>,
    pub(crate) ollama_addr: Option<SocketAddr>,
}

pub(crate) fn serve_doors(
    state: &Arc<AppState>,
    doors: TcpListener,
    ollama: Option<(TcpListener, SocketAddr)>,
) -> Doors {
    let limits = state.limits;
    let app = hearth_server::app(state.clone());
    let stop = state.shutdown.child_token();
    let connections = Arc::new(PerAddress::default());
    let serve =
        |l| hearth_server::listen::serve(l, app.clone(), stop.clone(), limits, connections.clone());
    let mut tasks = vec![serve(doors)];
    let ollama_addr = ollama.map(|(l, at)| {
        tasks.push(serve(l));
        tracing::info!(addr = %at, "listening on the Ollama port too");
        at
    });
    Doors {
        app,
        stop,
        tasks,
        connections,
        ollama_addr,
    }
}

/// The cluster, running: its listener (its own stop token: rebinding the doors alone must not
/// close it), the dialer with the peers given and those known before, and discovery.
pub(crate) async fn start_cluster(
    state: &Arc<AppState>,
    (listener, config): (TcpListener, hearth_cluster::ClusterConfig),
    doors: &mut Doors,
    bind_host: IpAddr,
) -> Result<
    (
        Option<ClusterRun>,
        Option<Arc<hearth_cluster::dial::Dialer>>,
    ),
    NodeError,
> {
    let at = listener.local_addr().map_err(|source| NodeError::Bind {
        addr: SocketAddr::new(bind_host, 0),
        source,
    })?;
    let (st, cc, table) = (
        state.cluster.clone(),
        config.clone(),
        doors.connections.clone(),
    );
    let me = tokio::task::spawn_blocking(move || hearth_cluster::Me::new(st, &cc, table))
        .await
        .map_err(|e| NodeError::IdentityTask(e.to_string()))?
        .map(Arc::new)
        .expect("a node with a cluster has a registry of remote providers");
    tracing::info!(addr = %at, compat = config.tealenet_compat, "cluster listening (Hearth peers encrypted; TealeNet peers in plain text only with --tealenet-compat)");
    let stop = state.shutdown.child_token();
    doors
        .tasks
        .push(hearth_cluster::listen(listener, me.clone(), stop.clone()));
    let dialer = hearth_cluster::dial::Dialer::new(me.clone(), state.shutdown.child_token());
    for p in &config.peers {
        dialer.add(p);
    }
    for k in state.store.known_peers().await? {
        dialer.add(&k.address);
    }
    let discovery = discover(&config, &me, &dialer, at);
    state.cluster.set_dialer(&dialer);
    let run = ClusterRun {
        config,
        me,
        stop,
        addr: at,
        _discovery: discovery,
    };
    Ok((Some(run), Some(dialer)))
}

/// Worker mode (`--join`): the connection to its hub, running.
pub(crate) fn join_hub(config: &NodeConfig, state: &Arc<AppState>) -> Option<JoinHandle<()>> {
    config.join.clone().map(|j| {
        let stop = state.shutdown.child_token();
        tokio::spawn(hearth_route::join::run(j, state.router.clone(), stop))
    })
}
