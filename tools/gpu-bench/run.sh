#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (the device tool's, no network): Hearth against llama.cpp's
# own llama-bench and llama-batched-bench, built from the same llama.cpp libraries with the
# same backend (Vulkan), on a 1B Llama with random weights made here (Q4_K_M). Reads what
# prepare.sh put in .gpu-bench/ (and the Vulkan loader's .debs in .gl/); writes every figure
# into $OUT. Run from the repository's root.
set -euo pipefail
out="${OUT:-/tmp/gpu-bench-out}"
logs="$out/logs"
mkdir -p "$out" "$logs"
work=/tmp/gpu-bench
rm -rf "$work" && mkdir -p "$work"
tar -xJf .gpu-bench/bundle.tar.xz -C "$work"
py="${GPU_BENCH_PYTHON:-python3}"
log() { printf '[gpu-bench %s] %s\n' "$(date +%T)" "$*"; }

# The Vulkan loader, and NVIDIA's Vulkan driver where the machine keeps it.
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES="$icd"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  nproc
  grep -m1 'model name' /proc/cpuinfo
} | tee "$logs/machine.txt"

log "making the model"
"$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-bench/*.whl
export PYTHONPATH=/tmp/site
# GPU_BENCH_LAYERS: fewer layers for a trial run of this script on a machine without a GPU.
"$py" tools/gpu-bench/make_model.py .gpu-bench/tokenizer.json "$work/model-f16.gguf" "${GPU_BENCH_LAYERS:-16}"
"$work/bin/llama-quantize" "$work/model-f16.gguf" "$work/model.gguf" Q4_K_M "$(nproc)" >"$logs/quantize.log" 2>&1
rm -f "$work/model-f16.gguf"
ls -la "$work/model.gguf" | tee -a "$logs/machine.txt"

# llama.cpp's tools find their backends in the folder they run in.
cd "$work/lib/hearth/backends"
log "llama-bench"
"$work/bin/llama-bench" -m "$work/model.gguf" -ngl 99 -p 512 -n 128 -r 3 -o json >"$out/llama-bench.json" 2>"$logs/llama-bench.log" || true
# Three times, as Hearth has three rounds of each size: its figures move by a tenth between
# runs of one process.
for k in 1 2 3; do
  log "llama-batched-bench ($k)"
  "$work/bin/llama-batched-bench" -m "$work/model.gguf" -ngl 99 -c 8192 -b 2048 -ub 512 -npp 16 -ntg 256 -npl 1,4,8 >>"$out/batched-bench.txt" 2>"$logs/batched-bench-$k.log" || true
done
cd - >/dev/null

# Hearth as it starts by default (a model wholly on the GPU gets --gpu-threads 2 of llama.cpp's
# CPU threads), then with every core's (16 here, what --threads gives) and with 1.
# Each Hearth process starts with an empty shader cache of NVIDIA's driver, as on a fresh
# install: none inherits the kernels an earlier one built.
hearth() {
  local name=$1 bin=$work/bin/hearth-node
  shift
  if [ -x "$bin-$name" ]; then bin=$bin-$name; fi
  log "Hearth ($name)"
  __GL_SHADER_DISK_CACHE_PATH="$work/shader-cache-$name" \
  "$bin" serve --port 18700 --data-dir "$work/data-$name" --model "$work/model.gguf" \
    --parallel 8 --ctx 2048 --key-storage file --no-discovery "$@" >"$logs/hearth-$name.log" 2>&1 &
  local node=$!
  for _ in $(seq 1 120); do
    curl -sf http://127.0.0.1:18700/api/status | grep -q '"state":"ready"' && break
    sleep 1
  done
  curl -s http://127.0.0.1:18700/api/status >"$logs/hearth-$name-status.json"
  "$py" tools/gpu-bench/stream_bench.py http://127.0.0.1:18700 --tokens 256 --rounds 3 >"$out/hearth-$name.json" || true
  kill "$node" 2>/dev/null || true
  wait "$node" 2>/dev/null || true
}
hearth default
# The other builds prepare.sh was given (GPU_BENCH_ALSO), same settings.
for bin in "$work"/bin/hearth-node-*; do
  if [ -x "$bin" ]; then hearth "${bin##*/hearth-node-}"; fi
done
# GPU_BENCH_QUICK=1: no thread variants (a run that must fit what is left of a lease).
if [ -z "${GPU_BENCH_QUICK:-}" ]; then
  hearth gpu-threads16 --gpu-threads 16
  hearth gpu-threads1 --gpu-threads 1
fi
# At most 8 files come back from the device tool: the logs travel as one.
cp "$logs/hearth-default-status.json" "$out/" 2>/dev/null || true
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
log "done"
cat "$out"/hearth-*.json "$out/batched-bench.txt" | tail -30
