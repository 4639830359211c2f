//! An MCP server's env and header values at rest: out of `hearth.db` and into the OS keyring (or
//! 0600 files) by `hearth_auth::secrets`, each under `mcp/<server>/env|header/<name>`; the spec
//! kept in the database holds an empty value in their place. Every value is a secret here (a
//! token hides in either). Blocking calls: async callers run them on tokio's blocking pool.

use hearth_auth::secrets::{SecretError, Secrets};
use hearth_tools::{McpServerSpec, McpTransport};

fn name(server: &str, kind: &str, key: &str) -> String {
    format!("mcp/{server}/{kind}/{key}")
}

/// The values of a spec's env or headers, with what kind they are.
fn values(
    spec: &mut McpServerSpec,
) -> (
    &'static str,
    &mut std::collections::BTreeMap<String, String>,
) {
    match &mut spec.transport {
        McpTransport::Stdio { env, .. } => ("env", env),
        McpTransport::Http { headers, .. } => ("header", headers),
    }
}

/// The spec without its values (what `hearth.db` keeps, and what a caller that may not read
/// them is shown).
pub fn without_values(spec: &McpServerSpec) -> McpServerSpec {
    let mut bare = spec.clone();
    values(&mut bare).1.values_mut().for_each(String::clear);
    bare
}

/// Whether a kept spec still holds values itself (kept before they were kept apart).
pub fn holds_values(spec: &McpServerSpec) -> bool {
    let mut spec = spec.clone();
    values(&mut spec).1.values().any(|v| !v.is_empty())
}

/// The spec as `hearth.db` keeps it: each value put in `secrets`, an empty one in its place.
/// An empty value is not a new one: the value kept before stays (a client sends back what it
/// was shown, which may be without values).
pub fn seal(spec: &McpServerSpec, secrets: &Secrets) -> Result<McpServerSpec, SecretError> {
    let mut sealed = spec.clone();
    let server = sealed.name.clone();
    let (kind, map) = values(&mut sealed);
    for (key, value) in map.iter_mut() {
        if !value.is_empty() {
            secrets.put(&name(&server, kind, key), value)?;
            value.clear();
        }
    }
    Ok(sealed)
}

/// A kept spec with its values back (an empty one has none kept: a spec from before secrets
/// were kept apart holds its values itself).
pub fn unseal(mut spec: McpServerSpec, secrets: &Secrets) -> McpServerSpec {
    let server = spec.name.clone();
    let (kind, map) = values(&mut spec);
    for (key, value) in map.iter_mut() {
        if value.is_empty() {
            match secrets.get(&name(&server, kind, key)) {
                Ok(Some(v)) => *value = v,
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%server, %key, error = %e, "an MCP server's secret cannot be read")
                }
            }
        }
    }
    spec
}

/// Forget the values of `old` that `new` no longer names (the others were sealed anew).
pub fn forget_removed(old: &McpServerSpec, new: &McpServerSpec, secrets: &Secrets) {
    let (mut old, mut new) = (old.clone(), new.clone());
    let server = old.name.clone();
    let (old_kind, old_map) = values(&mut old);
    let (new_kind, new_map) = values(&mut new);
    for key in old_map.keys() {
        if old_kind != new_kind || !new_map.contains_key(key) {
            secrets.delete(&name(&server, old_kind, key));
        }
    }
}

/// Forget a spec's values (its server removed).
pub fn forget(spec: &McpServerSpec, secrets: &Secrets) {
    let mut spec = spec.clone();
    let server = spec.name.clone();
    let (kind, map) = values(&mut spec);
    for key in map.keys() {
        secrets.delete(&name(&server, kind, key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_auth::identity::KeyStorage;

    #[test]
    fn values_go_to_the_secrets_and_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = Secrets::new(dir.path(), KeyStorage::File);
        let mut spec = McpServerSpec::stdio("gh", "npx", vec![]);
        if let McpTransport::Stdio { env, .. } = &mut spec.transport {
            env.insert("TOKEN".into(), "s3cret".into());
            env.insert("EMPTY".into(), String::new());
        }
        let sealed = seal(&spec, &secrets).unwrap();
        let text = serde_json::to_string(&sealed).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(unseal(sealed.clone(), &secrets), spec);
        forget(&spec, &secrets);
        assert_ne!(unseal(sealed, &secrets), spec, "forgotten");
        let mut web = McpServerSpec::http("web", "http://127.0.0.1:9/mcp");
        if let McpTransport::Http { headers, .. } = &mut web.transport {
            headers.insert("Authorization".into(), "Bearer x".into());
        }
        let sealed = seal(&web, &secrets).unwrap();
        assert!(!serde_json::to_string(&sealed).unwrap().contains("Bearer"));
        assert_eq!(sealed, without_values(&web));
        assert!(holds_values(&web) && !holds_values(&sealed));
        assert_eq!(unseal(sealed.clone(), &secrets), web);
        // Sent back without its value (as a caller was shown it): the kept value stays.
        seal(&without_values(&web), &secrets).unwrap();
        assert_eq!(unseal(sealed.clone(), &secrets), web);
        // A header no longer named goes; one still named stays.
        let mut fewer = web.clone();
        if let McpTransport::Http { headers, .. } = &mut fewer.transport {
            headers.clear();
            headers.insert("X-Other".into(), "o".into());
        }
        let sealed_fewer = seal(&fewer, &secrets).unwrap();
        forget_removed(&web, &fewer, &secrets);
        assert_eq!(unseal(sealed_fewer, &secrets), fewer);
        assert_ne!(
            unseal(sealed, &secrets),
            web,
            "the removed header's value is gone"
        );
    }
}
