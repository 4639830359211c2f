//! Images named by an http(s) URL, fetched for the doors when the node allows it
//! (`--image-urls`, off by default): before a door parses a body, each image URL in it
//! (OpenAI's `image_url.url`, Responses' `input_image.image_url`, Anthropic's `url` source) is
//! fetched and replaced by the image as a data URI, so every door's own checks still apply.
//!
//! Only public addresses are fetched: never loopback, private, link-local, shared (CGNAT) or
//! reserved ranges, nor this machine's own addresses or the networks of its interfaces (a
//! public address of its own, a LAN with global IPv6 addresses), checked on every address a
//! name resolves to (the connection goes to a checked address, so a name cannot resolve
//! twice) and on every redirect; with a time limit, a size limit counted as bytes arrive (each
//! image's, and all of a request's within its body limit once written back in base64), no
//! proxy and no cookies. Nothing is fetched for a model sure not to see images, and the node
//! fetches at most [`MAX_FETCHES`] at once, whatever the number of requests.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hearth_protocol::limits::MAX_HTTP_BODY_BYTES;
use hearth_protocol::media::{check_count, Image, ImageError, MAX_IMAGES, MAX_IMAGE_BYTES};
use hearth_protocol::openai::RequestError;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// How long one image may take, from connecting to its last byte.
const FETCH_TIME: Duration = Duration::from_secs(10);
const CONNECT_TIME: Duration = Duration::from_secs(5);
const MAX_REDIRECTS: usize = 3;
/// Images the node fetches at once, all requests together (one request's most): at most this
/// many times [`MAX_IMAGE_BYTES`] in flight and as many connections out.
pub const MAX_FETCHES: usize = MAX_IMAGES;
/// How long an image waits for one of those fetches to end before its request is refused.
const FETCH_WAIT: Duration = Duration::from_secs(5);

/// The client that fetches images by URL: present only when `--image-urls` allows it.
#[derive(Debug, Clone)]
pub struct ImageUrls {
    client: reqwest::Client,
    /// One permit a fetch under way, [`MAX_FETCHES`] in all.
    fetching: Arc<Semaphore>,
}

/// Why a URL was not fetched: the refusal this module made (an address, a scheme, too many
/// redirects), found again in the HTTP client's error chain.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{0}")]
    Refused(String),
    #[error("its server answered HTTP {0}")]
    Status(u16),
    #[error("it is over the limit of {} MiB", MAX_IMAGE_BYTES >> 20)]
    TooLarge,
    #[error("with the request's other images fetched by URL, written back in base64, the request would pass its limit of {} MiB", MAX_HTTP_BODY_BYTES >> 20)]
    OverBody,
    #[error("no answer within the time limit ({} s to connect, {} s in all)", CONNECT_TIME.as_secs(), FETCH_TIME.as_secs())]
    Timeout,
    #[error("it could not be fetched: {0}")]
    Net(String),
    #[error("this node is fetching {MAX_FETCHES} images by URL already, its limit, and none ended within {} s; try again shortly", FETCH_WAIT.as_secs())]
    Busy,
    #[error(transparent)]
    Image(#[from] ImageError),
}

impl ImageUrls {
    /// The fetching client (fails only when the TLS backend cannot start).
    pub fn new() -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .dns_resolver(std::sync::Arc::new(PublicOnly))
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                // `previous` holds the first URL too: this is redirect number `len`.
                if attempt.previous().len() > MAX_REDIRECTS {
                    let error = Refused(format!("more than {MAX_REDIRECTS} redirects"));
                    return attempt.error(error);
                }
                match check_url(attempt.url()) {
                    Ok(()) => attempt.follow(),
                    Err(e) => attempt.error(e),
                }
            }))
            .no_proxy()
            .connect_timeout(CONNECT_TIME)
            .timeout(FETCH_TIME)
            .user_agent(concat!("hearth/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            client,
            fetching: Arc::new(Semaphore::new(MAX_FETCHES)),
        })
    }

    /// `body` with each image URL replaced by the fetched image (a data URI); unchanged when
    /// it names none (or is not JSON: the door's parser says why). Before anything is
    /// fetched, `gate` is given the body's `model` and may refuse (a model that cannot see).
    pub(crate) async fn inline(
        &self,
        body: Bytes,
        gate: impl AsyncFnOnce(Option<String>) -> Result<(), ApiError>,
    ) -> Result<Bytes, ApiError> {
        if !body.windows(4).any(|w| w.eq_ignore_ascii_case(b"http")) {
            return Ok(body);
        }
        let Ok(mut json) = serde_json::from_slice::<Value>(&body) else {
            return Ok(body);
        };
        let mut found = Vec::new();
        find(&json, &mut String::new(), &mut found);
        if found.is_empty() {
            return Ok(body);
        }
        check_count(found.len()).map_err(|e| {
            let list = param(&found[0].0);
            let list = list
                .split(['[', '.'])
                .next()
                .unwrap_or("messages")
                .to_owned();
            ApiError::bad_request(RequestError::new(&list, e.to_string()))
        })?;
        let model = json
            .get("model")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned);
        gate(model).await?;
        // What the fetched files may take together: the body's room left, less base64's third.
        let budget = AtomicUsize::new(MAX_HTTP_BODY_BYTES.saturating_sub(body.len()) / 4 * 3);
        // The first refusal ends the others' fetches (and gives their places back).
        let fetched = futures_util::future::try_join_all(found.iter().map(|(pointer, url)| {
            let budget = &budget;
            async move {
                let image = self.fetch(url, budget).await;
                let uri = image
                    .and_then(|i| Ok(i.data_uri()?))
                    .map_err(|e| refusal(&param(pointer), url, e))?;
                Ok::<_, ApiError>((pointer, uri))
            }
        }))
        .await?;
        for (pointer, uri) in fetched {
            if let Some(slot) = json.pointer_mut(pointer) {
                *slot = Value::String(uri);
            }
        }
        serde_json::to_vec(&json)
            .map(Bytes::from)
            .map_err(|e| ApiError::bad_request(RequestError::new("body", e.to_string())))
    }

    /// One image, its bytes counted against `budget` (the request's) as they arrive.
    async fn fetch(&self, url: &str, budget: &AtomicUsize) -> Result<Image, FetchError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| FetchError::Net(e.to_string()))?;
        check_url(&parsed).map_err(|r| FetchError::Refused(r.0))?;
        let _fetching = tokio::time::timeout(FETCH_WAIT, self.fetching.acquire())
            .await
            .map_err(|_| FetchError::Busy)?
            .map_err(|_| FetchError::Busy)?;
        let mut response = self.client.get(parsed).send().await.map_err(client_error)?;
        if !response.status().is_success() {
            return Err(FetchError::Status(response.status().as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_IMAGE_BYTES as u64)
        {
            return Err(FetchError::TooLarge);
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(client_error)? {
            if bytes.len() + chunk.len() > MAX_IMAGE_BYTES {
                return Err(FetchError::TooLarge);
            }
            let taken = budget.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(chunk.len())
            });
            if taken.is_err() {
                return Err(FetchError::OverBody);
            }
            bytes.extend_from_slice(&chunk);
        }
        tracing::debug!(%url, bytes = bytes.len(), "image fetched");
        Ok(Image::from_file(bytes)?)
    }
}

/// The door's answer to image `at`'s fetch from `url` failing with `e`: a 503 to retry when the
/// node fetches all it may, else a 400 naming the image.
fn refusal(at: &str, url: &str, e: FetchError) -> ApiError {
    let message = format!("{at}: the image at {url}: {e}");
    match e {
        FetchError::Busy => ApiError {
            retry_after: Some(FETCH_WAIT.as_secs()),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                Some("image_fetches_busy"),
                Some(at.to_owned()),
                message,
            )
        },
        _ => ApiError::bad_request(RequestError::new(at, message)),
    }
}

/// The client's error as the user should read it: this module's refusal where it is one.
fn client_error(e: reqwest::Error) -> FetchError {
    if e.is_timeout() {
        return FetchError::Timeout;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<Refused>() {
            return FetchError::Refused(r.0.clone());
        }
        source = s.source();
    }
    FetchError::Net(e.without_url().to_string())
}

/// An http(s) URL whose host, when it is an address, is a public one (a name is checked as it
/// resolves).
fn check_url(url: &reqwest::Url) -> Result<(), Refused> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Refused(format!(
            "only http and https URLs are fetched, not {}",
            url.scheme()
        )));
    }
    let host = url.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) if !is_public(ip) || is_local(ip) => Err(not_public(host)),
        _ => Ok(()),
    }
}

/// Whether `ip` is one of this machine's addresses or on the network of one of its interfaces
/// (read each time: interfaces come and go). Unreadable interfaces count as none.
fn is_local(ip: IpAddr) -> bool {
    let Ok(interfaces) = if_addrs::get_if_addrs() else {
        return false;
    };
    interfaces.iter().any(|i| match &i.addr {
        if_addrs::IfAddr::V4(a) => match ip {
            IpAddr::V4(v4) => {
                let mask = u32::from(a.netmask);
                u32::from(v4) & mask == u32::from(a.ip) & mask
            }
            IpAddr::V6(_) => false,
        },
        if_addrs::IfAddr::V6(a) => match ip {
            IpAddr::V6(v6) => {
                let mask = u128::from(a.netmask);
                u128::from(v6) & mask == u128::from(a.ip) & mask
            }
            IpAddr::V4(_) => false,
        },
    })
}

fn not_public(host: &str) -> Refused {
    Refused(format!(
        "{host} is not a public address: images are never fetched from this machine or its networks"
    ))
}

/// Resolves names to their public addresses only; a name with none is refused.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = all
                .into_iter()
                .filter(|a| is_public(a.ip()) && !is_local(a.ip()))
                .collect();
            if public.is_empty() {
                return Err(Box::new(not_public(&host)) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Whether `ip` is a public address. Refused: unspecified, loopback, private, link-local,
/// shared (100.64/10), broadcast, multicast, "this network", the IETF's 192.0.0/24,
/// benchmarking (198.18/15) and reserved (240/4); in IPv6 unique-local, link- and site-local,
/// and any that embeds a refused IPv4 address (mapped, compatible, NAT64, 6to4). The
/// documentation ranges are not refused: they are never routed on the internet (the tests
/// serve images from one, routed to a network namespace of their own). This machine's own
/// addresses and networks are refused apart ([`is_local`]).
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (b & 0xc0) == 64)
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (b & 0xfe) == 18)
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if v6.is_unspecified() || v6.is_loopback() || v6.is_multicast() {
                return false;
            }
            let s = v6.segments();
            let embedded = |hi: u16, lo: u16| {
                is_public(IpAddr::V4(std::net::Ipv4Addr::from(
                    (u32::from(hi) << 16) | u32::from(lo),
                )))
            };
            if let Some(v4) = v6.to_ipv4() {
                return is_public(IpAddr::V4(v4));
            }
            if s[0] == 0x64 && s[1] == 0xff9b {
                return embedded(s[6], s[7]);
            }
            if s[0] == 0x2002 {
                return embedded(s[1], s[2]);
            }
            !((s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xffc0) == 0xfec0)
        }
    }
}

/// The image URLs in a body: each one's JSON pointer and URL. An object of type `image_url`
/// (OpenAI: `image_url.url`), `input_image` (Responses: `image_url`) or `image` with a `url`
/// source (Anthropic: `source.url`), wherever it stands (tool results hold images too).
fn find(v: &Value, pointer: &mut String, out: &mut Vec<(String, String)>) {
    fn web(s: &Value) -> Option<&str> {
        s.as_str().filter(|u| {
            let lower = u.get(..8).unwrap_or(u).to_ascii_lowercase();
            lower.starts_with("http://") || lower.starts_with("https://")
        })
    }
    match v {
        Value::Object(map) => {
            let at = match map.get("type").and_then(Value::as_str) {
                Some("image_url") => Some(("/image_url/url", &v["image_url"]["url"])),
                Some("input_image") => Some(("/image_url", &v["image_url"])),
                Some("image") if v["source"]["type"] == "url" => {
                    Some(("/source/url", &v["source"]["url"]))
                }
                _ => None,
            };
            if let Some((tail, url)) = at.and_then(|(t, u)| web(u).map(|u| (t, u))) {
                out.push((format!("{pointer}{tail}"), url.to_owned()));
                return;
            }
            for (key, child) in map {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                find(child, pointer, out);
                pointer.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                find(child, pointer, out);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// A JSON pointer as the doors name a parameter: `/messages/0/content/1` reads
/// `messages[0].content[1]`.
fn param(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.split('/').skip(1) {
        let part = part.replace("~1", "/").replace("~0", "~");
        if part.parse::<usize>().is_ok() {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_public_addresses_are_fetched() {
        for refused in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "240.0.0.1",
            "192.0.0.8",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:c0a8:101::1",
        ] {
            assert!(!is_public(refused.parse().unwrap()), "{refused}");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "198.51.100.2",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        // This machine's own addresses and networks, whatever their range.
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(is_local("127.9.9.9".parse().unwrap()));
        assert!(!is_local("198.51.100.77".parse().unwrap()));
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert!(check_url(&url("http://127.0.0.1:8420/a.png")).is_err());
        assert!(check_url(&url("http://[::1]/a.png")).is_err());
        assert!(check_url(&url("http://0x7f000001/a.png")).is_err());
        assert!(check_url(&url("ftp://8.8.8.8/a.png")).is_err());
        assert!(check_url(&url("https://example.com/a.png")).is_ok());
    }

    #[test]
    fn every_door_shape_of_image_url_is_found_and_named() {
        let body = json!({
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "http://not-an-image"},
                    {"type": "image_url", "image_url": {"url": "https://a.example/1.png"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                ]},
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "url", "url": "HTTP://b.example/2.jpg"}},
                    {"type": "tool_result", "tool_use_id": "t", "content": [
                        {"type": "image", "source": {"type": "url", "url": "http://c.example/3"}}
                    ]}
                ]}
            ],
            "input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": "https://d.example/4.webp"}
            ]}]
        });
        let mut found = Vec::new();
        find(&body, &mut String::new(), &mut found);
        let params: Vec<(String, &str)> =
            found.iter().map(|(p, u)| (param(p), u.as_str())).collect();
        let want = [
            ("input[0].content[0].image_url", "https://d.example/4.webp"),
            (
                "messages[0].content[1].image_url.url",
                "https://a.example/1.png",
            ),
            (
                "messages[1].content[0].source.url",
                "HTTP://b.example/2.jpg",
            ),
            (
                "messages[1].content[1].content[0].source.url",
                "http://c.example/3",
            ),
        ];
        assert_eq!(
            params,
            want.iter()
                .map(|(p, u)| (p.to_string(), *u))
                .collect::<Vec<_>>()
        );
        for (pointer, url) in &found {
            assert_eq!(
                body.pointer(pointer).and_then(Value::as_str),
                Some(url.as_str())
            );
        }
    }
}
