#!/usr/bin/env bash
# Run the desktop end-to-end test in a private X server and D-Bus session, with XDG dirs in a
# temp dir so that GTK's helpers (at-spi, dconf) die with the session and nothing of the
# user's desktop is touched. Usage: tests/desktop/run.sh [FILE.test.mjs...] (every test file when none;
# HEARTH_DESKTOP_BIN, HEARTH_TEST_MODEL set)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The MCP servers' cache (scripts/mcp-servers.sh) is found before XDG_CACHE_HOME moves.
HEARTH_MCP_DIR=$("$here/../../scripts/mcp-servers.sh" --dir)
export HEARTH_MCP_DIR
# Every test file, or those named (a bare name is one of this folder's).
files=()
for f in "$@"; do
  case "$f" in */*) files+=("$f") ;; *) files+=("$here/$f") ;; esac
done
[ ${#files[@]} -gt 0 ] || files=("$here"/*.test.mjs)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch"/{data,config,cache,runtime}
chmod 700 "$scratch/runtime"
export XDG_DATA_HOME="$scratch/data" XDG_CONFIG_HOME="$scratch/config" \
  XDG_CACHE_HOME="$scratch/cache" XDG_RUNTIME_DIR="$scratch/runtime" \
  HEARTH_DESKTOP_SCRATCH="$scratch"
exec xvfb-run -a -s "-screen 0 1280x800x24" dbus-run-session -- \
  node --test --test-concurrency=1 --test-reporter=spec "${files[@]}"
