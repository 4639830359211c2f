//! The names a model sees for MCP tools: `server__tool`, built and taken apart by pure
//! functions. Model APIs want function names of `[A-Za-z0-9_-]` and at most 64 characters
//! (OpenAI's rule, the strictest of the doors), so server names are kept to that alphabet
//! without `__`, and a tool's own name is cleaned and, when too long, shortened with a hash.

/// The longest server name: leaves a tool at least 30 characters of the 64.
pub const MAX_SERVER_NAME: usize = 32;

/// The longest name offered to a model (OpenAI's limit on a function's name).
pub const MAX_OFFERED_NAME: usize = 64;

/// Between the server's name and the tool's in an offered name.
pub const SEPARATOR: &str = "__";

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Whether `name` may name a server (see [`MAX_SERVER_NAME`]).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SERVER_NAME
        && name.chars().all(allowed)
        && !name.contains(SEPARATOR)
}

/// A valid server name made from any text (an imported config's key): other characters become
/// `-`, runs of `_` one `_`, cut to [`MAX_SERVER_NAME`]. `None` when no letter or digit is left.
pub fn sanitize_server_name(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    for c in raw.trim().chars() {
        let c = if allowed(c) { c } else { '-' };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    let out: String = out.chars().take(MAX_SERVER_NAME).collect();
    let out = out.trim_matches(|c| c == '-' || c == '_').to_owned();
    out.chars()
        .any(|c| c.is_ascii_alphanumeric())
        .then_some(out)
        .filter(|n| valid_server_name(n))
}

/// The name a model is offered for `tool` of `server` (`server` valid as above).
///
/// The tool's characters outside `[A-Za-z0-9_-]` become `_`; a result over
/// [`MAX_OFFERED_NAME`] keeps its head and ends in `_` and 8 hex digits of a hash of the tool's
/// full name, so two long names that share a head stay apart.
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    let room = MAX_OFFERED_NAME.saturating_sub(server.len() + SEPARATOR.len());
    let tool_part = if clean.len() <= room && !clean.is_empty() {
        clean
    } else {
        let hash = format!("{:08x}", fnv1a(tool.as_bytes()));
        let head = room.saturating_sub(hash.len() + 1);
        format!("{}_{hash}", &clean[..head.min(clean.len())])
    };
    format!("{}{tool_part}", mcp_tool_prefix(server))
}

/// How every name offered for `server`'s tools begins (`server__`): what forgetting a
/// server's consent matches.
pub fn mcp_tool_prefix(server: &str) -> String {
    format!("{server}{SEPARATOR}")
}

/// Splits an offered name into the server's name and the tool part, at the first `__` (a
/// server's name has none). The tool part is [`mcp_tool_name`]'s, not always the server's own
/// name for the tool: `McpServers` maps it back.
pub fn parse_mcp_tool_name(offered: &str) -> Option<(&str, &str)> {
    let (server, tool) = offered.split_once(SEPARATOR)?;
    (valid_server_name(server) && !tool.is_empty()).then_some((server, tool))
}

/// 32-bit FNV-1a: stable across builds and platforms, which `std`'s hasher is not promised to be.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_name_round_trips() {
        let offered = mcp_tool_name("everything", "get-tiny-image");
        assert_eq!(offered, "everything__get-tiny-image");
        assert_eq!(
            parse_mcp_tool_name(&offered),
            Some(("everything", "get-tiny-image"))
        );
    }

    #[test]
    fn other_characters_are_replaced_and_the_name_is_bounded() {
        assert_eq!(mcp_tool_name("fs", "read.file"), "fs__read_file");
        assert_eq!(mcp_tool_name("fs", "ünï"), "fs___n_");
        let long = "x".repeat(200);
        let a = mcp_tool_name("server", &long);
        let b = mcp_tool_name("server", &format!("{long}y"));
        assert_eq!(a.len(), MAX_OFFERED_NAME, "{a}");
        assert_ne!(a, b, "a hash keeps long names apart");
        assert!(a.chars().all(allowed));
        assert_eq!(parse_mcp_tool_name(&a).unwrap().0, "server");
        let longest_server = "s".repeat(MAX_SERVER_NAME);
        let c = mcp_tool_name(&longest_server, &long);
        assert!(c.len() <= MAX_OFFERED_NAME, "{c}");
        assert_eq!(mcp_tool_name("s", ""), "s___811c9dc5", "FNV-1a of nothing");
    }

    #[test]
    fn parse_refuses_what_no_server_could_have_made() {
        assert_eq!(parse_mcp_tool_name("no_separator"), None);
        assert_eq!(parse_mcp_tool_name("__tool"), None);
        assert_eq!(parse_mcp_tool_name("server__"), None);
        assert_eq!(parse_mcp_tool_name("a b__tool"), None);
        assert_eq!(parse_mcp_tool_name("a__b__c"), Some(("a", "b__c")));
    }

    #[test]
    fn server_names_are_cleaned_for_import() {
        assert_eq!(
            sanitize_server_name("Brave Search").as_deref(),
            Some("Brave-Search")
        );
        assert_eq!(
            sanitize_server_name("my__server").as_deref(),
            Some("my_server")
        );
        assert_eq!(
            sanitize_server_name("  @scope/pkg  ").as_deref(),
            Some("scope-pkg")
        );
        assert_eq!(sanitize_server_name("!!!"), None);
        assert_eq!(
            sanitize_server_name(&"a".repeat(50)).unwrap().len(),
            MAX_SERVER_NAME
        );
        assert!(valid_server_name("a-b_c"));
        assert!(!valid_server_name(""));
        assert!(!valid_server_name("a__b"));
    }
}
