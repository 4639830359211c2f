#!/usr/bin/env bash
# Here, before a run on a machine with a GPU: everything run.sh needs, in .gpu-bench/ (which
# the device tool carries; ignored by git). From the release build (`cargo build --release
# --workspace --bin hearth-node`): hearth-node, llama.cpp's libraries and backends as it loads
# them; llama.cpp's own llama-bench, llama-batched-bench and llama-quantize, their sources
# taken from the llama_cpp_python sdist on PyPI (the nearest published llama.cpp with its
# tools: the crate ships none) and built against those very libraries; the default model's
# tokenizer; the `gguf` wheel. Nothing of it is committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
release="${CARGO_TARGET_DIR:-$root/target}/release"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib/hearth/backends" .gpu-bench

strip -o "$stage/bin/hearth-node" "$release/hearth-node"
# GPU_BENCH_ALSO="NAME=PATH ...": other builds of hearth-node (an earlier commit's, a trial),
# each run beside this one with the same settings: only same-run figures compare.
for also in ${GPU_BENCH_ALSO:-}; do
  strip -o "$stage/bin/hearth-node-${also%%=*}" "${also#*=}"
done
libs=$(ldd "$release/hearth-node" | awk '/lib(llama|ggml|mtmd)/ {print $3}')
for lib in $libs; do cp -L "$lib" "$stage/lib/hearth/"; done
# The rest of what it loads but the C and C++ runtimes, which a machine with CUDA's compiler has:
# an image made for GPUs may lack the D-Bus, SQLite or OpenMP libraries.
ldd "$release/hearth-node" | awk '$3 ~ /^\// {print $3}' \
  | grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux-x86-64|libpthread|libdl|librt)\.so' \
  | while read -r lib; do cp -Ln "$lib" "$stage/lib/hearth/"; done
out_lib=$(dirname "$(echo "$libs" | grep libggml-base)")
cp -L "$out_lib"/../backends/*.so "$stage/lib/hearth/backends/"
out=$(dirname "$out_lib")

# llama.cpp's headers as this build has them (the crate's copy).
crate=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/llama-cpp-sys-2-0.1.161/llama.cpp)
sdist="${CARGO_TARGET_DIR:-$root/target}/gpu-bench-src"
if [ ! -d "$sdist/tools" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --no-binary :all: llama_cpp_python==0.3.36 -d "$tmp"
  tar -xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp"
  rm -rf "$sdist" && mkdir -p "$sdist"
  cp -r "$tmp"/llama_cpp_python-0.3.36/vendor/llama.cpp/tools "$sdist/"
  rm -rf "$tmp"
fi
cxx=(g++ -O2 -std=c++17 -I"$crate/include" -I"$crate/ggml/include" -I"$crate/common"
  -I"$out/build/common" -L"$out/lib" -Wl,--disable-new-dtags,-rpath,'$ORIGIN/../lib/hearth')
link=(-lllama-common -lllama -lggml -lggml-base -lpthread)
for tool in llama-bench:llama-bench batched-bench:llama-batched-bench quantize:llama-quantize; do
  dir="$sdist/tools/${tool%%:*}"
  "${cxx[@]}" -I"$dir" -o "$stage/bin/${tool##*:}" "$dir"/*.cpp "${link[@]}"
done

"$root/.venv/bin/python" tools/gpu-bench/tokenizer.py "$(./scripts/setup.sh --model-path)" .gpu-bench/tokenizer.json
gguf_version=$("$root/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("gguf"))')
rm -f .gpu-bench/*.whl
python3 -m pip download --quiet --no-deps --only-binary=:all: "gguf==$gguf_version" -d .gpu-bench
tar -cJf .gpu-bench/bundle.tar.xz -C "$stage" bin lib
du -sh .gpu-bench/bundle.tar.xz .gpu-bench/*.whl .gpu-bench/tokenizer.json
