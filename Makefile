# Hearth's commands (DESIGN.md §8). Each one first runs the idempotent setup.
# CARGO_TARGET_DIR may point outside the clone to keep a build cache between runs.

SHELL := /bin/bash
CARGO ?= cargo
HEARTH_ARGS ?=

.PHONY: setup run test lint bench

setup:
	@./scripts/setup.sh

## Start Hearth on the default model (the headless node until the desktop app lands).
run: setup
	$(CARGO) build --release --locked --workspace --bins
	@target=$${CARGO_TARGET_DIR:-target}; \
	exec "$$target/release/hearth-node" serve $(HEARTH_ARGS)

## Every test: formatting, lints, unit and integration tests with the real default model.
test: setup lint
	$(CARGO) test --workspace --locked -- --test-threads=1

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## Benchmarks (not part of `make test`): ratios against the llama.cpp floor, one table,
## bench/results.json and bench/throughput.svg; UPDATE_DOCS=1 rewrites docs/PERFORMANCE.md.
bench: setup
	$(CARGO) build --release --locked --workspace --bins
	@target=$${CARGO_TARGET_DIR:-target}; \
	"$$target/release/hearth-bench" --threads 2 $(if $(UPDATE_DOCS),--update-docs docs/PERFORMANCE.md,)
