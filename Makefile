# `make test` is what CI runs (.ci/run): install (idempotent), static checks, then the tests.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install check test test-fast fmt bench clean

install:
	bash scripts/install.sh

check: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The docker tests need an engine: scripts/with-dockerd.sh uses a running one or starts a private
# one for the duration of the run (and stops it by its pid).
test: check
	bash scripts/with-dockerd.sh $(BIN)/pytest

# The fast tier: pure logic and the in-package fake sandbox, no bubblewrap, Docker or long runs
# (under a minute; runs on a machine without bwrap).
test-fast: install
	$(BIN)/pytest -m "not slow and not bwrap and not docker"

fmt:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	$(BIN)/python -m benchmarks.bench_grading

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
