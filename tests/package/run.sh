#!/usr/bin/env bash
# The .deb of `make package`, installed in a scratch root (dpkg-deb -x) and run from there:
# it holds both programs, llama.cpp's libraries and backends in /usr/lib/hearth, and the
# node's systemd unit (disabled: no postinst enables it); `hearth-node` from it serves the
# default model (its status answers), and `hearth-desktop` from it passes the desktop test.
# Usage: tests/package/run.sh PACKAGE.deb (HEARTH_TEST_MODEL set).
set -euo pipefail
deb="${1:?usage: tests/package/run.sh PACKAGE.deb}"
model="${HEARTH_TEST_MODEL:?set HEARTH_TEST_MODEL to the default model}"
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
node_pid=""
cleanup() {
  [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

root="$scratch/root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/hearth-node usr/bin/hearth-desktop usr/lib/systemd/system/hearth-node.service; do
  [ -e "$root/$f" ] || fail "the package has no /$f"
done
ls "$root"/usr/lib/hearth/libllama*.so* >/dev/null 2>&1 || fail "no llama.cpp library in /usr/lib/hearth"
ls "$root"/usr/lib/hearth/backends/*.so >/dev/null 2>&1 || fail "no backends in /usr/lib/hearth/backends"
unit="$root/usr/lib/systemd/system/hearth-node.service"
grep -q '^ExecStart=/usr/bin/hearth-node serve ' "$unit" || fail "the unit does not start /usr/bin/hearth-node"
grep -q '^WantedBy=multi-user.target' "$unit" || fail "the unit cannot be enabled"
# Installed disabled: nothing in the package enables it.
dpkg-deb -e "$deb" "$scratch/control"
if grep -rqs 'systemctl\|deb-systemd' "$scratch/control"; then fail "the package enables the unit"; fi
echo "ok - the package holds both programs, the libraries and a disabled unit"

# The programs find their libraries in /usr/lib/hearth; here that is under the scratch root.
export LD_LIBRARY_PATH="$root/usr/lib/hearth"
"$root/usr/bin/hearth-node" --version | grep -q '^hearth-node ' || fail "hearth-node --version"
log="$scratch/node.log"
"$root/usr/bin/hearth-node" serve --port 0 --data-dir "$scratch/data" --key-storage file \
  --model "$model" --ctx 512 >"$log" 2>&1 &
node_pid=$!
url=""
for _ in $(seq 1 300); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1 || true)
  [ -n "$url" ] && break
  kill -0 "$node_pid" 2>/dev/null || { cat "$log" >&2; fail "hearth-node from the package exited"; }
  sleep 0.2
done
[ -n "$url" ] || fail "hearth-node from the package never listened"
ready=""
for _ in $(seq 1 300); do
  if curl -fsS "$url/api/status" | grep -q '"state":"ready"'; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { cat "$log" >&2; fail "the model never became ready"; }
kill "$node_pid"; wait "$node_pid" 2>/dev/null || true; node_pid=""
echo "ok - hearth-node from the package serves the model"

HEARTH_DESKTOP_BIN="$root/usr/bin/hearth-desktop" "$here/../desktop/run.sh"
echo "ok - hearth-desktop from the package passes the desktop tests"
