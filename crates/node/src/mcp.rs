//! The chat's MCP servers at start: their specs read back from `hearth.db` into the running
//! `McpServers` (nothing starts until a chat or the API needs a server). A kept spec this
//! version cannot read is left out and logged, never a reason not to start.

use hearth_auth::secrets::Secrets;
use hearth_server::mcp_secrets;
use hearth_store::Store;
use hearth_tools::{McpServerSpec, McpServers, McpSettings};

use crate::error::NodeError;

/// The servers kept in `store`, their env and header values back from `secrets`, ready to
/// start on need.
pub(crate) async fn load(
    store: &Store,
    secrets: &Secrets,
    backoff_first: Option<std::time::Duration>,
) -> Result<McpServers, NodeError> {
    let mut kept = Vec::new();
    for row in store.mcp_servers().await? {
        match serde_json::from_str::<McpServerSpec>(&row.spec) {
            Ok(spec) if spec.name == row.name && spec.validate().is_ok() => kept.push(spec),
            Ok(_) => {
                tracing::warn!(server = %row.name, "a kept MCP server's settings do not hold: left out")
            }
            Err(e) => {
                tracing::warn!(server = %row.name, error = %e, "a kept MCP server's settings cannot be read: left out")
            }
        }
    }
    // A spec kept before values were kept apart has them moved out of hearth.db now.
    for spec in kept.iter().filter(|s| mcp_secrets::holds_values(s)) {
        let (name, spec, secrets) = (spec.name.clone(), spec.clone(), secrets.clone());
        let sealed = tokio::task::spawn_blocking(move || mcp_secrets::seal(&spec, &secrets))
            .await
            .map_err(|e| NodeError::Mcp(e.to_string()))?;
        match sealed.map(|s| serde_json::to_string(&s)) {
            Ok(Ok(text)) => {
                store.put_mcp_server(name, text).await?;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "an MCP server's settings could not be written")
            }
            Err(e) => {
                tracing::warn!(error = %e, "an MCP server's values stay in hearth.db: they could not be kept apart")
            }
        }
    }
    let secrets = secrets.clone();
    let specs = tokio::task::spawn_blocking(move || {
        kept.into_iter()
            .map(|s| mcp_secrets::unseal(s, &secrets))
            .collect()
    })
    .await
    .map_err(|e| NodeError::Mcp(e.to_string()))?;
    let mut settings = McpSettings::default();
    if let Some(first) = backoff_first {
        settings.backoff_first = first;
        settings.backoff_max = settings.backoff_max.max(first);
    }
    McpServers::new(specs, settings).map_err(|e| NodeError::Mcp(e.to_string()))
}
