//! A server at a URL: rmcp's streamable HTTP client (sessions, SSE replies, the stateless mode)
//! on a reqwest client whose TLS is rustls with the ring provider and the platform's root
//! certificates (the OS store, so a company CA works). OAuth is not here yet: a server that
//! wants it fails with rmcp's auth error; a token can go in a header.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rustls_platform_verifier::BuilderVerifierExt as _;

use crate::stdio::MAX_MESSAGE_BYTES;

/// Builds the transport for `url` with `headers` sent on every request.
pub(crate) fn transport(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<StreamableHttpClientTransport<reqwest_mcp::Client>, String> {
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_platform_verifier()
    .map_err(|e| format!("TLS roots: {e}"))?
    .with_no_client_auth();
    let client = reqwest_mcp::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let mut custom = HashMap::with_capacity(headers.len());
    for (name, value) in headers {
        // Checked by McpServerSpec::validate; refused here too rather than dropped.
        let name = http::HeaderName::try_from(name.as_str())
            .map_err(|_| format!("header {name:?} is not a valid HTTP header name"))?;
        let value = http::HeaderValue::try_from(value.as_str())
            .map_err(|_| format!("header {name}'s value is not a valid HTTP header value"))?;
        custom.insert(name, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(custom)
        .max_json_response_size(MAX_MESSAGE_BYTES)
        .max_sse_event_size(MAX_MESSAGE_BYTES)
        .reinit_on_expired_session(true);
    Ok(StreamableHttpClientTransport::with_client(client, config))
}
