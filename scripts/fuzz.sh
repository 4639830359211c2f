#!/usr/bin/env bash
# `make fuzz`: run every cargo fuzz target in fuzz/ for FUZZ_SECONDS (default 600) each, then
# minimize each corpus. New inputs land in fuzz/corpus/<target>, which `make test` replays on
# stable Rust (crates/protocol/tests/fuzz_corpus.rs): commit them. A crash stops the run and
# names its input (fuzz/artifacts/<target>/crash-*); add that file to the corpus once fixed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds="${1:-${FUZZ_SECONDS:-600}}"
say() { printf '[fuzz] %s\n' "$*"; }

if ! cargo fuzz --version >/dev/null 2>&1; then
  say "installing cargo-fuzz from crates.io"
  cargo install cargo-fuzz --locked
fi
# cargo fuzz passes unstable flags to rustc: a nightly toolchain when one is installed, else
# the stable one with RUSTC_BOOTSTRAP=1 (no sanitizer then; the decoders have no unsafe code).
if rustup run nightly rustc --version >/dev/null 2>&1; then
  toolchain=nightly
  sanitizer=address
else
  toolchain=stable
  sanitizer=none
  export RUSTC_BOOTSTRAP=1
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}/fuzz"
cd "$root/fuzz"
targets=$(cargo +"$toolchain" fuzz list)
say "toolchain $toolchain, sanitizer $sanitizer, ${seconds}s per target: $(echo $targets)"
for t in $targets; do
  say "$t"
  cargo +"$toolchain" fuzz run -s "$sanitizer" -a "$t" -- \
    -max_total_time="$seconds" -max_len=65536 -print_final_stats=1
done
for t in $targets; do
  # Edges only (not hit counts): a few hundred inputs per target rather than thousands.
  cargo +"$toolchain" fuzz cmin -s "$sanitizer" -a "$t" -- -use_counters=0 >/dev/null 2>&1 || say "cmin $t failed (the corpus is kept as it is)"
done
say "done: $(find corpus -type f | wc -l) inputs in fuzz/corpus"
