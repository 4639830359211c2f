#!/usr/bin/env bash
# Builds llama.cpp's own llama-server, from the llama.cpp copy inside the llama_cpp_python
# sdist on PyPI (the same era as the llama.cpp Hearth's engine links), for the benchmark's
# side-by-side rows. Idempotent: prints the binary's path, building it only once
# (~12 min on 2 cores). Needs cmake and a C++ compiler (scripts/setup.sh installs them).
# `scripts/llama-server.sh --built` prints the path only when it is built already.
set -euo pipefail

VERSION=0.3.36
ROOT="${HEARTH_LLAMA_SERVER_DIR:-$HOME/.cache/hearth-llama-server}"
BIN="$ROOT/$VERSION/bin/llama-server"

if [[ -x "$BIN" ]]; then
    echo "$BIN"
    exit 0
fi
# --built: only say where one built already is (none: exit 1).
if [[ "${1:-}" == "--built" ]]; then
    exit 1
fi

mkdir -p "$ROOT"
cd "$ROOT"
SDIST="llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama_cpp_python==$VERSION" -d . >&2
fi
rm -rf "$VERSION.tmp"
mkdir "$VERSION.tmp"
tar -xzf "$SDIST" -C "$VERSION.tmp" --strip-components=1
SRC="$VERSION.tmp/vendor/llama.cpp"
# The CPU code Hearth's engine picks here: this machine's own, except that in a virtual machine
# whose CPU has AMX, ggml's AMX kernels crash (the tile state is lost across thread switches
# under some hypervisors; crates/engine/src/backend.rs) and Hearth leaves them out for its
# zen4 variant's set: the same set here, so that both run the same kernels.
CPU=(-DGGML_NATIVE=ON)
if grep -qw hypervisor /proc/cpuinfo && grep -qw amx_tile /proc/cpuinfo; then
    CPU=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_F16C=ON -DGGML_FMA=ON -DGGML_AVX2=ON
        -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
        -DGGML_AVX512_BF16=ON)
fi
# Static: one binary that can move.
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF "${CPU[@]}" \
    -DLLAMA_BUILD_TESTS=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$SRC/build" -j"$(nproc)" --target llama-server >&2
rm -rf "$VERSION"
mkdir -p "$VERSION/bin"
mv "$SRC/build/bin/llama-server" "$VERSION/bin/"
rm -rf "$VERSION.tmp"
echo "$BIN"
