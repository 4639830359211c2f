# Hearth's commands (DESIGN.md §8). Each one first runs the idempotent setup.
# CARGO_TARGET_DIR may point outside the clone to keep a build cache between runs.

SHELL := /bin/bash
CARGO ?= cargo
HEARTH_ARGS ?=
TARGET_DIR := $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR),$(CURDIR)/target)

.PHONY: setup run test lint bench package package-test fuzz build-cuda

setup:
	@./scripts/setup.sh

## Start Hearth on the default model: the desktop app when a display is available, else the
## headless node (it prints the URL to open).
run: setup
	$(CARGO) build --release --locked --workspace --bins
	@if [ -n "$${DISPLAY:-}$${WAYLAND_DISPLAY:-}" ]; then \
	  echo "A display is available: starting the Hearth desktop app."; \
	  exec "$(TARGET_DIR)/release/hearth-desktop"; \
	else \
	  echo "No display: starting the headless node (open the URL it prints in a browser)."; \
	  exec "$(TARGET_DIR)/release/hearth-node" serve $(HEARTH_ARGS); \
	fi

## Every test: formatting, lints, unit and integration tests with the real default model,
## the UI's unit tests, and the browser tests (Debian's Chromium against a real node).
## The Rust tests run under cargo-nextest (.config/nextest.toml says which run two at a time).
test:
	@./scripts/setup.sh --build
	$(CARGO) fmt --all -- --check
	@test -x "$(CLIPPY_DRIVER)" || { echo "clippy's driver is missing: rustup component add clippy"; exit 1; }
	@$(CARGO) nextest --version >/dev/null 2>&1 || { echo "installing cargo-nextest (once)"; \
	  $(CARGO) install cargo-nextest --locked --quiet --version 0.9.143; }
	@# One build of every target, clippy's lints riding on it (see LINTED); the desktop test
	@# needs hearth-desktop built as a program, which no test target builds. Beside it, the
	@# tests' own setup (models, Python clients, browser packages, the agents: downloads on a
	@# fresh machine), which the build does not need.
	./scripts/setup.sh --tests & setup=$$!; \
	$(LINTED) $(CARGO) build --workspace --locked --all-targets; built=$$?; \
	wait $$setup; prepared=$$?; \
	[ $$built = 0 ] && [ $$prepared = 0 ] || { echo "build: exit $$built, setup --tests: exit $$prepared"; exit 1; }
	$(LINTED) $(CARGO) nextest run --workspace --locked --cargo-quiet
	@# Doc tests, where a doc comment holds a code block: rustdoc takes about 20 s to find none
	@# in every crate.
	@if grep -rqE '^\s*//[/!].*```' crates/*/src; then \
	  $(LINTED) $(CARGO) test --workspace --locked --doc; \
	else echo "doc tests: no doc comment holds a code block"; fi
	@# The browser scenarios (about 75 s, two at a time, the cores three quarters busy), and beside
	@# them, one after another, the UI's unit tests, the desktop app's and the keyring's (about
	@# 35 s; each under its own X server and D-Bus session), whose output follows the scenarios'.
	@model="$$(./scripts/setup.sh --model-path)"; others_log=$$(mktemp); \
	( set -e; cd ui && npm test --silent; cd ..; \
	  HEARTH_DESKTOP_BIN="$(TARGET_DIR)/debug/hearth-desktop" HEARTH_TEST_MODEL="$$model" tests/desktop/run.sh; \
	  HEARTH_NODE_BIN="$(TARGET_DIR)/debug/hearth-node" tests/keyring/run.sh ) >"$$others_log" 2>&1 & others=$$!; \
	HEARTH_NODE_BIN="$(TARGET_DIR)/debug/hearth-node" HEARTH_TEST_MODEL="$$model" \
	npm --prefix tests/browser test --silent; browser=$$?; \
	wait $$others; rest=$$?; \
	echo "--- the UI's unit tests, the desktop app, the keyring:"; cat "$$others_log"; rm -f "$$others_log"; \
	[ $$browser = 0 ] && [ $$rest = 0 ] || { echo "browser scenarios: exit $$browser; UI, desktop, keyring: exit $$rest"; exit 1; }

## clippy runs with the test profile so that it shares the build of llama.cpp (and every other
## build script) with `cargo test`: under its own profile llama.cpp would be built twice.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked --profile test -- -D warnings

## `make test` lints while it builds: the workspace's own crates are compiled by clippy's
## driver (what `cargo clippy` runs, as RUSTC_WORKSPACE_WRAPPER, with its arguments in
## CLIPPY_ARGS), which compiles them as rustc does and denies every warning on the way. A
## separate `cargo clippy` would first check every dependency, minutes of a cold build. The
## wrapper is part of cargo's fingerprint: a cargo command without LINTED compiles the
## workspace's crates again (without the lints), as `cargo clippy` and `cargo build` do.
CLIPPY_DRIVER := $(shell rustc --print sysroot 2>/dev/null)/bin/clippy-driver
LINTED = RUSTC_WORKSPACE_WRAPPER="$(CLIPPY_DRIVER)" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

## llama.cpp's CUDA backend as one more library, for a machine with an NVIDIA card and NVIDIA's
## CUDA compiler (nvcc) on the PATH: release programs in their own target folder, beside the
## Vulkan build, never mixed with it. Not part of `make test`.
CUDA_TARGET_DIR ?= $(TARGET_DIR)/cuda
build-cuda: setup
	@command -v nvcc >/dev/null || { echo "nvcc (CUDA's compiler) is not on the PATH: install NVIDIA's CUDA toolkit first"; exit 1; }
	CARGO_TARGET_DIR="$(CUDA_TARGET_DIR)" $(CARGO) build --release --locked --workspace --bins --features hearth-engine/cuda
	@echo "Built with CUDA: $(CUDA_TARGET_DIR)/release/hearth-node serve (or hearth-desktop)"

## Benchmarks (not part of `make test`): ratios against the llama.cpp floor, one table,
## bench/results.json and bench/throughput.svg; UPDATE_DOCS=1 rewrites docs/PERFORMANCE.md.
bench: setup
	@# The workspace's features (not -p's): the same build of llama.cpp as `make run`'s.
	$(CARGO) build --release --locked --workspace --bin hearth-node --bin hearth-bench
	"$(TARGET_DIR)/release/hearth-bench" --threads 2 $(if $(UPDATE_DOCS),--update-docs docs/PERFORMANCE.md,)

## Fuzz every decoder of untrusted input (fuzz/, cargo fuzz) for FUZZ_SECONDS each; new inputs
## land in fuzz/corpus, which `make test` replays on stable Rust. Not part of `make test`.
FUZZ_SECONDS ?= 600
fuzz: setup
	./scripts/fuzz.sh $(FUZZ_SECONDS)

## An installable .deb of the desktop app, built with Tauri's bundler (tools/package).
package: setup
	$(CARGO) build --release --locked --workspace --bins
	$(CARGO) build --release --locked --manifest-path tools/package/Cargo.toml --target-dir "$(TARGET_DIR)"
	@# Ship the binaries without their line tables (the release profile keeps them for profiling).
	rm -rf "$(TARGET_DIR)/package/lib"
	mkdir -p "$(TARGET_DIR)/package/lib/backends"
	strip --strip-debug -o "$(TARGET_DIR)/package/hearth-desktop" "$(TARGET_DIR)/release/hearth-desktop"
	strip --strip-debug -o "$(TARGET_DIR)/package/hearth-node" "$(TARGET_DIR)/release/hearth-node"
	@# llama.cpp's libraries, as the programs load them (the package puts them in
	@# /usr/lib/hearth, which the programs' run-time path names), and its backends beside them.
	ldd "$(TARGET_DIR)/release/hearth-desktop" | awk '/lib(llama|ggml|mtmd)/ {print $$3}' | while read -r lib; do \
	  strip --strip-unneeded -o "$(TARGET_DIR)/package/lib/$$(basename "$$lib")" "$$lib"; \
	done
	base=$$(ldd "$(TARGET_DIR)/release/hearth-desktop" | awk '/libggml-base/ {print $$3}'); \
	for b in "$$(dirname "$$base")"/../backends/*.so; do \
	  strip --strip-unneeded -o "$(TARGET_DIR)/package/lib/backends/$$(basename "$$b")" "$$b"; \
	done
	"$(TARGET_DIR)/release/hearth-package" "$(CURDIR)" "$(TARGET_DIR)/package"

## The .deb, unpacked in a scratch root and its programs run from there (tests/package/run.sh).
package-test: package
	HEARTH_TEST_MODEL="$$(./scripts/setup.sh --model-path)" \
	tests/package/run.sh "$$(ls -t "$(TARGET_DIR)"/package/bundle/deb/*.deb | head -1)"
