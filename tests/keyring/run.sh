#!/usr/bin/env bash
# The node's identity in a real OS keyring, and the file fallback where none answers.
# 1. In a private D-Bus session with an unlocked gnome-keyring (Secret Service), `hearth-node
#    identity` stores the key in the keyring, says so, writes no key file, and gives the same
#    device id on the next run. 2. With no session bus at all, it falls back to a 0600
#    identity.pem and says so. Usage: tests/keyring/run.sh (HEARTH_NODE_BIN set).
set -euo pipefail
bin="${HEARTH_NODE_BIN:?set HEARTH_NODE_BIN to the hearth-node binary}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch"/{home,data,runtime}
chmod 700 "$scratch/runtime"
fail() { echo "FAIL: $*" >&2; exit 1; }

# --- 1. a real Secret Service keyring --------------------------------------------------------
export HOME="$scratch/home" XDG_DATA_HOME="$scratch/home/.local/share" XDG_RUNTIME_DIR="$scratch/runtime"
node_dir="$scratch/data/keyring-node"
out=$(timeout 120 dbus-run-session -- bash -c '
  printf "test-password" | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1
  "$0" identity --data-dir "$1" 2>&1
  echo "=== second run"
  "$0" identity --data-dir "$1" 2>&1
  echo "=== secret-tool"
  secret-tool search --all service hearth 2>/dev/null | grep -c "^label = " || true
' "$bin" "$node_dir" 2>/dev/null)
first=$(sed -n '1,/=== second run/p' <<<"$out")
second=$(sed -n '/=== second run/,/=== secret-tool/p' <<<"$out")
grep -q "created this node's identity in the OS keyring" <<<"$first" || fail "no keyring creation in: $first"
grep -q "stored in:  the OS keyring" <<<"$second" || fail "second run not from the keyring: $second"
id1=$(grep -m1 '^device id:' <<<"$first" | awk '{print $3}')
id2=$(grep -m1 '^device id:' <<<"$second" | awk '{print $3}')
[ -n "$id1" ] && [ "$id1" = "$id2" ] || fail "device id changed: '$id1' then '$id2'"
[ "$(tail -n 1 <<<"$out")" -ge 1 ] || fail "secret-tool does not see the key: $out"
[ ! -e "$node_dir/identity.pem" ] || fail "a key file was written although the keyring answered"
echo "ok - identity in the OS keyring, stable device id $id1"

# --- 2. no keyring: the 0600 file -------------------------------------------------------------
file_dir="$scratch/data/file-node"
out=$(env -u DBUS_SESSION_BUS_ADDRESS timeout 60 "$bin" identity --data-dir "$file_dir" 2>&1)
grep -q "identity.pem" <<<"$out" || fail "the fallback does not name the file: $out"
[ -f "$file_dir/identity.pem" ] || fail "no identity.pem written"
mode=$(stat -c %a "$file_dir/identity.pem")
[ "$mode" = 600 ] || fail "identity.pem has mode $mode, not 600"
again=$(env -u DBUS_SESSION_BUS_ADDRESS timeout 60 "$bin" identity --data-dir "$file_dir" 2>&1)
[ "$(grep -m1 '^device id:' <<<"$out")" = "$(grep -m1 '^device id:' <<<"$again")" ] || fail "file identity changed"
echo "ok - no keyring: identity in a 0600 file, stable"
