#!/usr/bin/env bash
# The MCP servers the MCP client's tests run (crates/tools/tests/), pinned, from the npm registry,
# into a cache outside the clone ($HEARTH_MCP_DIR, default ~/.cache/hearth-mcp) so a fresh clone
# does not download them again. Idempotent. Our own Python test server (tests/mcp/py_server.py)
# runs in the repository's .venv, which scripts/setup.sh fills (the `mcp` package).
#   --dir   print the cache folder and exit.
set -euo pipefail

dir="${HEARTH_MCP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth-mcp}"
if [ "${1:-}" = "--dir" ]; then
  echo "$dir"
  exit 0
fi
everything_version=2026.8.31
filesystem_version=2026.8.31

say() { printf '[mcp-servers] %s\n' "$*"; }
mkdir -p "$dir"

# shellcheck source=npm-prefix.sh
. "$(dirname "$0")/npm-prefix.sh"

# The tests start each through the stable names below (a link to the versioned bin).
install "server-everything-$everything_version" "@modelcontextprotocol/server-everything@$everything_version"
ln -sfn "$dir/server-everything-$everything_version/node_modules/.bin/mcp-server-everything" "$dir/server-everything"

install "server-filesystem-$filesystem_version" "@modelcontextprotocol/server-filesystem@$filesystem_version"
ln -sfn "$dir/server-filesystem-$filesystem_version/node_modules/.bin/mcp-server-filesystem" "$dir/server-filesystem"
