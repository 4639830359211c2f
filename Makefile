# Hearth's commands (DESIGN.md §8). Each one first runs the idempotent setup.
# CARGO_TARGET_DIR may point outside the clone to keep a build cache between runs.

SHELL := /bin/bash
CARGO ?= cargo
HEARTH_ARGS ?=
TARGET_DIR := $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR),$(CURDIR)/target)

.PHONY: setup run test lint bench package fuzz

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
test: setup lint
	$(CARGO) test --workspace --locked -- --test-threads=1
	@# `cargo test` builds a binary only for its own package's integration tests: the desktop
	@# test needs hearth-desktop built as a program.
	$(CARGO) build --workspace --locked --bins
	cd ui && npm test --silent
	HEARTH_NODE_BIN="$(TARGET_DIR)/debug/hearth-node" \
	HEARTH_TEST_MODEL="$$(./scripts/setup.sh --model-path)" \
	npm --prefix tests/browser test --silent
	HEARTH_DESKTOP_BIN="$(TARGET_DIR)/debug/hearth-desktop" \
	HEARTH_TEST_MODEL="$$(./scripts/setup.sh --model-path)" \
	tests/desktop/run.sh
	HEARTH_NODE_BIN="$(TARGET_DIR)/debug/hearth-node" tests/keyring/run.sh

## clippy runs with the test profile so that it shares the build of llama.cpp (and every other
## build script) with `cargo test`: under its own profile llama.cpp would be built twice.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked --profile test -- -D warnings

## Benchmarks (not part of `make test`): ratios against the llama.cpp floor, one table,
## bench/results.json and bench/throughput.svg; UPDATE_DOCS=1 rewrites docs/PERFORMANCE.md.
bench: setup
	$(CARGO) build --release --locked -p hearth-node -p hearth-bench
	"$(TARGET_DIR)/release/hearth-bench" --threads 2 $(if $(UPDATE_DOCS),--update-docs docs/PERFORMANCE.md,)

## Fuzz every decoder of untrusted input (fuzz/, cargo fuzz) for FUZZ_SECONDS each; new inputs
## land in fuzz/corpus, which `make test` replays on stable Rust. Not part of `make test`.
FUZZ_SECONDS ?= 600
fuzz: setup
	./scripts/fuzz.sh $(FUZZ_SECONDS)

## An installable .deb of the desktop app, built with Tauri's bundler (tools/package).
package: setup
	$(CARGO) build --release --locked --workspace --bins
	$(CARGO) build --release --locked --manifest-path tools/package/Cargo.toml
	@# Ship the binary without its line tables (the release profile keeps them for profiling).
	mkdir -p "$(TARGET_DIR)/package"
	strip --strip-debug -o "$(TARGET_DIR)/package/hearth-desktop" "$(TARGET_DIR)/release/hearth-desktop"
	"$(TARGET_DIR)/release/hearth-package" "$(CURDIR)" "$(TARGET_DIR)/package"
