//! The commands around the signed-challenge WebSocket (`protocols/auth-ws.md`), as clap
//! argument structs and one async function each (part of the binary, not the library):
//! - `hearth-node client keygen | show | register | chat`: a client of any Hearth node's `/`
//!   door. Its Ed25519 key is kept like the node's own identity (`hearth_auth::identity`): in the OS
//!   keyring (service `hearth-client`, user = the key's name) or, where no keyring answers, in a
//!   0600 file `<data-dir>/client-keys/<name>.pem`. Its `clientId` is derived from the public
//!   key, so nothing else needs storing.
//! - `hearth-node identity`: this node's device id, key id, public key and where the key is.
//! - `hearth-node clients list | revoke | remove`: the clients registered with this node.
//!
//! `chat` keeps the conversation and sends it whole with each turn (`messages`, Hearth's
//! extension of `generate`); `/reset` starts over. Ctrl-C stops the answer being written
//! (a `stop`); at the prompt it quits, as Ctrl-D does.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use base64::Engine as _;
use ed25519_dalek::SigningKey;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use hearth_auth::identity::{self, Identity, KeySlot, KeyStorage, StoredKey, CLIENT_SERVICE};
use hearth_node::config;
use hearth_store::Store;

/// How long `chat` waits for the node's challenge and for its `auth_result`.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[derive(Debug, clap::Args)]
pub(crate) struct ClientArgs {
    #[command(subcommand)]
    pub action: ClientAction,
    /// Where the key file lives when no keyring is used [default: the OS data dir + hearth].
    #[arg(long, env = "HEARTH_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Which of your client keys to use (letters, digits, '.', '_', '-').
    #[arg(
        long = "key",
        env = "HEARTH_CLIENT_KEY",
        default_value = "default",
        global = true
    )]
    pub key_name: String,
    /// Where keys are kept: the OS keyring when it answers, else a 0600 file (auto); or only
    /// the file (file).
    #[arg(long, env = "HEARTH_KEY_STORAGE", value_enum, default_value_t = KeyStorage::Auto, global = true)]
    pub key_storage: KeyStorage,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ClientAction {
    /// Make this client's Ed25519 key and print its public key (PEM) and clientId.
    Keygen {
        /// Replace an existing key of this name (its registrations stop working).
        #[arg(long)]
        force: bool,
    },
    /// Print this client's public key (PEM) and clientId.
    Show,
    /// Register this client's public key with a node (POST /api/auth/register).
    Register(RegisterArgs),
    /// Talk to a node over its signed-challenge WebSocket: answer one PROMPT, or chat line by
    /// line when no PROMPT is given.
    Chat(ChatArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServerArg {
    /// The node: http://HOST:PORT (ws://HOST:PORT and HOST:PORT work too).
    #[arg(long, env = "HEARTH_SERVER", default_value = "http://127.0.0.1:8420")]
    pub server: String,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RegisterArgs {
    #[command(flatten)]
    pub server: ServerArg,
    /// The name the node lists this client under [default: KEY@this machine's name].
    #[arg(long)]
    pub name: Option<String>,
    /// An API key of the node (`hearth-node keys create` there), needed when registering from
    /// another machine with a node shared on the LAN.
    #[arg(long, env = "HEARTH_API_KEY")]
    pub api_key: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ChatArgs {
    #[command(flatten)]
    pub server: ServerArg,
    /// The model to ask for [default: whichever the node serves].
    #[arg(long)]
    pub model: Option<String>,
    /// A system prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens per answer.
    #[arg(long)]
    pub max_tokens: Option<u32>,
    #[arg(long)]
    pub temperature: Option<f64>,
    #[arg(long)]
    pub top_p: Option<f64>,
    #[arg(long)]
    pub top_k: Option<u32>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Ask this and print the answer, instead of chatting.
    pub prompt: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct IdentityArgs {
    /// Where hearth.db and the identity file live [default: the OS data dir + hearth].
    #[arg(long, env = "HEARTH_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where the node's key is kept: the OS keyring when it answers (auto), or only a 0600 file.
    #[arg(long, env = "HEARTH_KEY_STORAGE", value_enum, default_value_t = KeyStorage::Auto)]
    pub key_storage: KeyStorage,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ClientsArgs {
    #[command(subcommand)]
    pub action: ClientsAction,
    /// Where hearth.db lives [default: the OS data dir + hearth].
    #[arg(long, env = "HEARTH_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ClientsAction {
    /// List registered clients (id, name, key type, registered, last seen, status).
    List,
    /// Revoke a client: its signatures are refused from now on, and its key cannot register again.
    Revoke { client_id: String },
    /// Delete a client (revoked or not); its key could register again.
    Remove { client_id: String },
}

/// Where a named client key lives.
fn client_slot(data_dir: &Path, name: &str) -> anyhow::Result<KeySlot> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        bail!("a key name is 1 to 64 letters, digits, '.', '_' or '-' (not starting with '.'), got {name:?}");
    }
    Ok(KeySlot {
        service: CLIENT_SERVICE.to_owned(),
        user: name.to_owned(),
        file: data_dir.join("client-keys").join(format!("{name}.pem")),
    })
}

/// `http://…` for requests and `ws://…/` for the socket, from what the user typed.
fn endpoints(server: &str) -> anyhow::Result<(String, String)> {
    let s = server.trim();
    let (scheme, rest) = match s.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        None => ("http".to_owned(), s),
    };
    let rest = rest.trim_end_matches('/');
    match scheme.as_str() {
        "http" | "ws" => {}
        "https" | "wss" => bail!("this client speaks plain http/ws only (Hearth nodes do not serve TLS); use http://{rest}"),
        other => bail!("unknown scheme {other}:// in {server}; use http://HOST:PORT"),
    }
    if rest.is_empty() {
        bail!("no host in {server}; use http://HOST:PORT");
    }
    Ok((format!("http://{rest}"), format!("ws://{rest}/")))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, identity::IdentityError> + Send + 'static,
) -> anyhow::Result<T> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .context("the key task failed")??)
}

async fn load_key(slot: KeySlot, storage: KeyStorage) -> anyhow::Result<StoredKey> {
    let name = slot.user.clone();
    blocking(move || slot.load(storage))
        .await?
        .ok_or_else(|| {
            anyhow!("there is no client key named {name}; make one with: hearth-node client keygen --key {name}")
        })
}

fn print_key(stored: &StoredKey) {
    let vk = stored.key.verifying_key();
    print!("{}", identity::public_key_pem(&vk));
    eprintln!(
        "clientId {}  (key kept in {})",
        identity::key_id(&vk),
        stored.location
    );
}

/// `hearth-node client …`
pub(crate) async fn client(args: ClientArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(hearth_base::data_dir::default_data_dir);
    let slot = client_slot(&data_dir, &args.key_name)?;
    let storage = args.key_storage;
    match args.action {
        ClientAction::Keygen { force } => {
            let stored = blocking(move || slot.create(storage, force)).await?;
            print_key(&stored);
            eprintln!(
                "Next: hearth-node client register --key {} --server http://NODE:8420",
                args.key_name
            );
        }
        ClientAction::Show => print_key(&load_key(slot, storage).await?),
        ClientAction::Register(r) => {
            let stored = load_key(slot, storage).await?;
            register(r, &stored.key, &args.key_name).await?;
        }
        ClientAction::Chat(c) => {
            let stored = load_key(slot, storage).await?;
            chat(c, &stored.key).await?;
        }
    }
    Ok(())
}

async fn register(args: RegisterArgs, key: &SigningKey, key_name: &str) -> anyhow::Result<()> {
    let (base, _) = endpoints(&args.server.server)?;
    let name = args
        .name
        .unwrap_or_else(|| format!("{key_name}@{}", config::default_name()));
    let vk = key.verifying_key();
    let body = json!({
        "name": name,
        "publicKey": identity::public_key_pem(&vk),
        "signatureAlgorithm": "Ed25519",
    });
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .context("starting the HTTP client")?;
    let mut req = http.post(format!("{base}/api/auth/register")).json(&body);
    if let Some(k) = &args.api_key {
        req = req.bearer_auth(k);
    }
    let resp = req
        .send()
        .await
        .with_context(|| format!("cannot reach {base}"))?;
    let status = resp.status();
    let reply: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() || reply["success"] != json!(true) {
        let why = reply["error"]
            .as_str()
            .or_else(|| reply["error"]["message"].as_str())
            .unwrap_or("no details");
        bail!("{base} refused the registration ({status}): {why}");
    }
    let id = reply["clientId"].as_str().unwrap_or_default();
    let expected = identity::key_id(&vk);
    if id != expected {
        bail!("{base} answered clientId {id}, but this key's id is {expected}");
    }
    println!("{id}");
    eprintln!(
        "{} with {base} as {name}. Chat with: hearth-node client chat --key {key_name} --server {base}",
        reply["message"].as_str().unwrap_or("Registered")
    );
    Ok(())
}

async fn send_json(ws: &mut Ws, v: Value) -> anyhow::Result<()> {
    ws.send(Message::text(v.to_string()))
        .await
        .context("sending to the node failed")
}

/// The node's next JSON message (`within` bounds the wait).
async fn recv_json(ws: &mut Ws, within: Option<Duration>) -> anyhow::Result<Value> {
    loop {
        let next = match within {
            Some(d) => tokio::time::timeout(d, ws.next())
                .await
                .map_err(|_| anyhow!("the node did not answer within {} s", d.as_secs()))?,
            None => ws.next().await,
        };
        match next {
            Some(Ok(Message::Text(t))) => {
                return serde_json::from_str(t.as_str())
                    .context("the node sent a message that is not JSON")
            }
            Some(Ok(Message::Close(frame))) => {
                let why = frame
                    .map(|f| format!(": {} ({})", f.reason.as_str(), u16::from(f.code)))
                    .unwrap_or_default();
                bail!("the node closed the connection{why}");
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e).context("the connection to the node failed"),
            None => bail!("the node closed the connection"),
        }
    }
}

/// Connect, answer the challenge, and wait for a successful `auth_result`.
async fn connect(ws_url: &str, key: &SigningKey) -> anyhow::Result<Ws> {
    let (mut ws, _) =
        tokio::time::timeout(HANDSHAKE_WAIT, tokio_tungstenite::connect_async(ws_url))
            .await
            .map_err(|_| anyhow!("connecting to {ws_url} timed out"))?
            .with_context(|| format!("cannot connect to {ws_url}"))?;
    let challenge = loop {
        let m = recv_json(&mut ws, Some(HANDSHAKE_WAIT)).await?;
        match m["type"].as_str() {
            Some("challenge") => {
                break m["challenge"]
                    .as_str()
                    .context("the challenge message has no challenge string")?
                    .to_owned()
            }
            Some("error") => bail!("the node refused the connection: {}", m["error"]),
            _ => {}
        }
    };
    let client_id = identity::key_id(&key.verifying_key());
    let signature: ed25519_dalek::Signature =
        ed25519_dalek::Signer::sign(key, challenge.as_bytes());
    send_json(
        &mut ws,
        json!({
            "type": "authenticate",
            "clientId": client_id,
            "signature": base64::engine::general_purpose::STANDARD.encode(signature.to_bytes()),
        }),
    )
    .await?;
    loop {
        let m = recv_json(&mut ws, Some(HANDSHAKE_WAIT)).await?;
        if m["type"] != "auth_result" {
            continue;
        }
        if m["success"] == json!(true) {
            return Ok(ws);
        }
        let why = m["error"].as_str().unwrap_or("no reason given");
        if let Some(secs) = m["retryAfter"].as_u64() {
            bail!("authentication refused: {why} (retry after {secs} s)");
        }
        bail!(
            "authentication failed: {why}\nIs this key registered with the node? hearth-node client register --server ... (clientId {client_id})"
        );
    }
}

/// One answer: the text, or the node's error for this request (the connection still works).
async fn turn(
    ws: &mut Ws,
    id: &str,
    args: &ChatArgs,
    messages: &[Value],
) -> anyhow::Result<Result<String, String>> {
    let mut options = serde_json::Map::new();
    if let Some(v) = args.max_tokens {
        options.insert("max_tokens".into(), json!(v));
    }
    if let Some(v) = args.temperature {
        options.insert("temperature".into(), json!(v));
    }
    if let Some(v) = args.top_p {
        options.insert("top_p".into(), json!(v));
    }
    if let Some(v) = args.top_k {
        options.insert("top_k".into(), json!(v));
    }
    if let Some(v) = args.seed {
        options.insert("seed".into(), json!(v));
    }
    let mut msg = json!({"type": "generate", "id": id, "messages": messages, "options": options});
    if let Some(m) = &args.model {
        msg["model"] = json!(m);
    }
    if let Some(s) = &args.system {
        msg["system"] = json!(s);
    }
    send_json(ws, msg).await?;
    let mut text = String::new();
    let mut stopping = false;
    let mut out = std::io::stdout();
    loop {
        let m = tokio::select! {
            m = recv_json(ws, None) => m?,
            r = tokio::signal::ctrl_c(), if !stopping => {
                r.context("listening for Ctrl-C")?;
                stopping = true;
                send_json(ws, json!({"type": "stop", "id": id, "requestId": id})).await?;
                continue;
            }
        };
        let mine = m["id"] == json!(id);
        match m["type"].as_str() {
            Some("stream_token") if mine => {
                let t = m["token"].as_str().unwrap_or_default();
                text.push_str(t);
                print!("{t}");
                let _ = out.flush();
            }
            Some("stream_end") if mine => {
                println!();
                let secs = m["elapsedTime"].as_f64().unwrap_or(0.0) / 1000.0;
                let stopped = if m["isCancelled"] == json!(true) {
                    ", stopped"
                } else {
                    ""
                };
                eprintln!("[{} tokens in {secs:.1} s{stopped}]", m["totalTokens"]);
                return Ok(Ok(text));
            }
            Some("error") if mine || m["id"].is_null() => {
                if !text.is_empty() {
                    println!();
                }
                let why = m["error"].as_str().unwrap_or("unknown error");
                let code = m["code"].as_str().unwrap_or("error");
                return Ok(Err(format!("{why} ({code})")));
            }
            _ => {}
        }
    }
}

/// Lines typed on stdin, read on a plain thread so that quitting never waits for it.
fn stdin_lines() -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let _ = std::thread::Builder::new()
        .name("hearth-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if tx.blocking_send(line).is_err() {
                    break;
                }
            }
        });
    rx
}

async fn chat(args: ChatArgs, key: &SigningKey) -> anyhow::Result<()> {
    let (_, ws_url) = endpoints(&args.server.server)?;
    let mut ws = connect(&ws_url, key).await?;
    if let Some(prompt) = args.prompt.clone() {
        let messages = [json!({"role": "user", "content": prompt})];
        let result = turn(&mut ws, "prompt-1", &args, &messages).await?;
        let _ = ws.close(None).await;
        return result.map(|_| ()).map_err(|e| anyhow!(e));
    }
    eprintln!(
        "Connected to {ws_url} as {}. Type a message and press Enter. /reset starts over; Ctrl-C stops an answer; Ctrl-D quits.",
        identity::key_id(&key.verifying_key())
    );
    let mut lines = stdin_lines();
    let mut history: Vec<Value> = Vec::new();
    let mut n = 0u64;
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        let line = tokio::select! {
            l = lines.recv() => l,
            r = tokio::signal::ctrl_c() => {
                r.context("listening for Ctrl-C")?;
                None
            }
        };
        let Some(line) = line else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/reset" {
            history.clear();
            eprintln!("(conversation cleared)");
            continue;
        }
        history.push(json!({"role": "user", "content": line}));
        n += 1;
        match turn(&mut ws, &format!("chat-{n}"), &args, &history).await? {
            Ok(answer) => history.push(json!({"role": "assistant", "content": answer})),
            Err(e) => {
                history.pop();
                eprintln!("error: {e}");
            }
        }
    }
    eprintln!();
    let _ = ws.close(None).await;
    Ok(())
}

/// `hearth-node identity`
pub(crate) async fn identity(args: IdentityArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(hearth_base::data_dir::default_data_dir);
    let storage = args.key_storage;
    let id = blocking(move || Identity::load_or_create(&data_dir, storage)).await?;
    println!("device id:  {}", id.device_id());
    println!("key id:     {}", id.key_id());
    println!("stored in:  {}", id.location());
    print!("{}", id.public_key_pem());
    Ok(())
}

/// `2024-05-01 12:34 UTC` from milliseconds since the Unix epoch.
fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// `hearth-node clients …`
pub(crate) async fn clients(args: ClientsArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(hearth_base::data_dir::default_data_dir);
    let store = Store::open(&data_dir)
        .with_context(|| format!("opening the database in {}", data_dir.display()))?;
    match args.action {
        ClientsAction::List => {
            let clients = store.list_clients().await?;
            if clients.is_empty() {
                println!("no clients (a client registers with: hearth-node client register --server http://THIS-NODE:8420)");
            }
            for c in clients {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    c.client_id,
                    c.name,
                    c.algorithm,
                    utc(c.created_at),
                    c.last_seen_at.map_or_else(|| "never".to_owned(), utc),
                    if c.revoked { "revoked" } else { "active" }
                );
            }
        }
        ClientsAction::Revoke { client_id } => {
            if store.revoke_client(client_id.clone()).await? {
                println!("revoked {client_id}");
            } else {
                bail!("no active client with id {client_id} (see: hearth-node clients list)");
            }
        }
        ClientsAction::Remove { client_id } => {
            if store.remove_client(client_id.clone()).await? {
                println!("removed {client_id}");
            } else {
                bail!("no client with id {client_id} (see: hearth-node clients list)");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_become_http_and_ws_urls() {
        for s in [
            "http://10.0.0.2:8420",
            "ws://10.0.0.2:8420/",
            "10.0.0.2:8420",
        ] {
            let (http, ws) = endpoints(s).unwrap();
            assert_eq!(http, "http://10.0.0.2:8420");
            assert_eq!(ws, "ws://10.0.0.2:8420/");
        }
        assert!(endpoints("https://x:1").is_err());
        assert!(endpoints("ftp://x:1").is_err());
        assert!(endpoints("http://").is_err());
    }

    #[test]
    fn key_names_are_plain() {
        let d = Path::new("/tmp/d");
        assert_eq!(
            client_slot(d, "laptop-1").unwrap().file,
            d.join("client-keys/laptop-1.pem")
        );
        let long = "x".repeat(65);
        for bad in ["", "../x", ".hidden", "a/b", "a b", long.as_str()] {
            assert!(client_slot(d, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00 UTC");
        assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13 UTC");
    }
}
