#!/usr/bin/env bash
# The coding agents the tests run against a node (crates/node/tests/suite/agents.rs), pinned, from the
# npm registry, into a cache outside the clone ($HEARTH_AGENTS_DIR, default
# ~/.cache/hearth-agents) so a fresh clone does not download them again. Idempotent.
#   --dir   print the cache folder and exit.
set -euo pipefail

dir="${HEARTH_AGENTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth-agents}"
if [ "${1:-}" = "--dir" ]; then
  echo "$dir"
  exit 0
fi
claude_version=2.1.332
codex_version=0.169.0
qwen_version=0.24.4

say() { printf '[agents] %s\n' "$*"; }
mkdir -p "$dir"

# shellcheck source=npm-prefix.sh
. "$(dirname "$0")/npm-prefix.sh"

# Claude Code: npm's install-script policy skips its postinstall, which puts the native binary
# (from @anthropic-ai/claude-code-linux-x64) in place as bin/claude.exe; run it by hand.
install "claude-code-$claude_version" "@anthropic-ai/claude-code@$claude_version"
cc="$dir/claude-code-$claude_version/node_modules/@anthropic-ai/claude-code"
if ! "$cc/bin/claude.exe" --version >/dev/null 2>&1; then
  (cd "$cc" && node install.cjs >/dev/null)
fi
ln -sfn "$dir/claude-code-$claude_version/node_modules/.bin/claude" "$dir/claude"

# Codex: its native binary comes with the optional dependency @openai/codex-linux-x64.
install "codex-$codex_version" "@openai/codex@$codex_version"
ln -sfn "$dir/codex-$codex_version/node_modules/.bin/codex" "$dir/codex"

# Qwen Code asks for Node 22 and runs on 20 (a warning only). Its bundled ripgrep comes
# without the execute bit.
install "qwen-code-$qwen_version" "@qwen-code/qwen-code@$qwen_version"
chmod +x "$dir/qwen-code-$qwen_version"/node_modules/@qwen-code/qwen-code/vendor/ripgrep/*/rg 2>/dev/null || true
ln -sfn "$dir/qwen-code-$qwen_version/node_modules/.bin/qwen" "$dir/qwen"
