# Hearth's commands (DESIGN.md §8). Each one first runs the idempotent setup.
# CARGO_TARGET_DIR may point outside the clone to keep a build cache between runs.

SHELL := /bin/bash
CARGO ?= cargo
HEARTH_ARGS ?=
TARGET_DIR := $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR),$(CURDIR)/target)

.PHONY: setup run test lint bench

setup:
	@./scripts/setup.sh

## Start Hearth on the default model (the headless node until the desktop app lands).
run: setup
	$(CARGO) build --release --locked --workspace --bins
	exec "$(TARGET_DIR)/release/hearth-node" serve $(HEARTH_ARGS)

## Every test: formatting, lints, unit and integration tests with the real default model,
## the UI's unit tests, and the browser tests (Debian's Chromium against a real node).
test: setup lint
	$(CARGO) test --workspace --locked -- --test-threads=1
	cd ui && npm test --silent
	HEARTH_NODE_BIN="$(TARGET_DIR)/debug/hearth-node" \
	HEARTH_TEST_MODEL="$$(./scripts/setup.sh --model-path)" \
	npm --prefix tests/browser test --silent

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## Benchmarks (not part of `make test`): ratios against the llama.cpp floor, one table,
## bench/results.json and bench/throughput.svg; UPDATE_DOCS=1 rewrites docs/PERFORMANCE.md.
bench: setup
	$(CARGO) build --release --locked --workspace --bins
	"$(TARGET_DIR)/release/hearth-bench" --threads 2 $(if $(UPDATE_DOCS),--update-docs docs/PERFORMANCE.md,)
