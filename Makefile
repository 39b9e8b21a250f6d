# `make test` is what CI runs (.ci/run): install (idempotent), static checks, then the tests.
VENV := .venv
BIN := $(VENV)/bin
# mypy's cache outside the checkout, in rcb-env's home (as the other caches are): a fresh clone
# of a tree checked before is checked in seconds, not minutes (mypy revalidates each entry by
# the source's hash, so a cache of other sources is never trusted).
RCB_ENV_HOME ?= /opt/rcb-env
MYPY_CACHE ?= $(RCB_ENV_HOME)/cache/mypy

.PHONY: install install-core install-tests check static test pytest tests tests-exclusive test-fast test-agent-clis acceptance-agent-clis bench-agent-cli docs fmt bench published bench-published bench-rollouts bench-ray bench-report equivalence harbor-published grpo-example bench-rl-scale first-observation strength bench-mutants published-docker bench-serve serve-acceptance clean

install:
	bash scripts/install.sh

# What every command and test needs (scripts/install.sh core); `make test` installs the rest
# (Harbor, inspect, the agent CLIs) beside the static checks and the exclusive tests.
install-core:
	bash scripts/install.sh core

# What `make test` uses beyond that: everything but the agent CLIs from PyPI (scripts/install.sh).
install-tests:
	bash scripts/install.sh tests

check: install
	$(MAKE) --no-print-directory static

static:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --cache-dir "$(MYPY_CACHE)"
	$(BIN)/lint-imports
	@site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && \
		NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$$site"

# The static checks and the rest of the install (Harbor, inspect, the agent CLIs: none of the
# exclusive tests uses them) at the same time as the tests marked `exclusive` (they look at the
# whole host, so no other test may run meanwhile; mypy, mkdocs, uv and npm touch nothing they
# look at, and those tests mostly wait: on a time limit, on Docker), then the other tests on
# three workers. All must pass. One Docker engine serves both pytest runs.
test: install-core
	bash scripts/with-dockerd.sh $(MAKE) --no-print-directory -j3 static tests

# Every test. The docker tests need an engine: scripts/with-dockerd.sh uses a running one or
# starts a private one for the duration of the run (and stops it by its pid).
pytest:
	bash scripts/with-dockerd.sh $(MAKE) --no-print-directory tests

# The tests in two runs: first those marked `exclusive`, one after another in a temporary
# folder of their own (tests/conftest.py); then the rest on three workers on two cores (most
# tests wait on subprocesses): the Docker tests on one worker, the Ray tests on one worker. The
# 25 slowest tests are listed at the end.
tests: tests-exclusive install-tests
	$(BIN)/pytest -n 3 --dist loadgroup -m "not exclusive and not agent_clis" --durations=25

tests-exclusive:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		TMPDIR=$$tmp $(BIN)/pytest -m exclusive --durations=5

# The fast tier: pure logic and the in-package fake sandbox, no bubblewrap, Docker or long runs
# (under a minute; runs on a machine without bwrap).
test-fast: install
	$(BIN)/pytest -n 2 -m "not slow and not bwrap and not docker"

# The documentation site (docs/, mkdocs.yml), built into a fresh temporary folder: never into the
# checkout.
docs: install
	@out=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$$out" && \
		echo "docs: $$out/index.html"

# The agent CLIs' longer tests (mini-swe-agent's run, docker), left out of `make test`.
test-agent-clis: install
	bash scripts/with-dockerd.sh $(BIN)/pytest -m agent_clis tests/agents -v --durations=10

# The agent CLIs' acceptance (not in `make test`; after `make published`): `rcb-env eval` of
# claude-code and codex over the published runnable set against a scripted model of ours that
# plays each CLI's own tools, with the reference body and with a wrong one.
acceptance-agent-clis: install
	$(BIN)/python -m benchmarks.accept_agent_clis --pset researchcodebench --jobs 2

bench-agent-cli: install
	$(BIN)/python -m benchmarks.bench_agent_cli

fmt:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	$(BIN)/python -m benchmarks.bench_grading

# ResearchCodeBench on this machine, end to end (not part of `make test`): get the published set
# (RCB_FROM=<folder|git URL|archive> for a mirror or a local copy), build its task environments,
# validate every ready paper 3 times, run the oracle and the null agent, audit it.
published: install
	$(BIN)/rcb-env get researchcodebench $(if $(RCB_FROM),--from $(RCB_FROM))
	$(BIN)/rcb-env setup researchcodebench --jobs 2 --offline
	$(BIN)/rcb-env validate --pset researchcodebench --jobs 2 --repeat 3
	$(BIN)/rcb-env eval --pset researchcodebench --agent oracle --jobs 2 --runs-dir runs/published-oracle
	$(BIN)/rcb-env eval --pset researchcodebench --agent null --jobs 2 --runs-dir runs/published-null
	$(BIN)/rcb-env audit --pset researchcodebench

# The same in containers (after `make published`; not part of `make test`): one image per
# runnable paper (RCB_DOCKER_BASE, RCB_WHEELS for an offline build; both remembered), then the
# oracle, the null agent and the hidden-attack suite on docker, and the timing beside bwrap.
published-docker: install
	bash scripts/with-dockerd.sh $(BIN)/rcb-env images build --pset researchcodebench $(if $(RCB_DOCKER_BASE),--base $(RCB_DOCKER_BASE)) $(if $(RCB_WHEELS),--wheels $(RCB_WHEELS))
	bash scripts/with-dockerd.sh $(BIN)/rcb-env eval --pset researchcodebench --agent oracle --sandbox docker --jobs 2 --runs-dir runs/published-docker-oracle
	bash scripts/with-dockerd.sh $(BIN)/rcb-env eval --pset researchcodebench --agent null --sandbox docker --jobs 2 --runs-dir runs/published-docker-null
	bash scripts/with-dockerd.sh $(BIN)/rcb-env images build
	bash scripts/with-dockerd.sh $(BIN)/rcb-env hacks --sandbox docker
	bash scripts/with-dockerd.sh $(BIN)/python -m benchmarks.bench_images

bench-ray: install
	$(BIN)/python -m benchmarks.bench_ray

bench-report: install
	$(BIN)/python -m benchmarks.bench_report

bench-rollouts: install
	$(BIN)/python -m benchmarks.bench_rollouts

# Warm vs cold grading on the published runnable set (run `make published` first): every
# snippet's oracle, null and `pass` bodies graded both ways must get the same verdicts.
equivalence: install
	$(BIN)/python -m rcb_env validate --equivalence --pset researchcodebench --sandbox bwrap --jobs 2

# How strong each test of the published runnable sets is (mutants of each reference, graded like
# submissions; resumable in runs/strength): the scores, the weakest snippets and the verified subset.
strength: install
	$(BIN)/rcb-env validate --pset researchcodebench --mutants --cap 8 --jobs 2 --repeat 2 --out runs/strength/researchcodebench --json runs/strength/researchcodebench.json --subset-out runs/strength/verified-researchcodebench.json
	$(BIN)/rcb-env validate --pset lmr-bench --mutants --cap 8 --jobs 2 --repeat 2 --out runs/strength/lmr-bench --json runs/strength/lmr-bench.json --subset-out runs/strength/verified-lmr-bench.json

bench-mutants: install
	$(BIN)/python -m benchmarks.bench_mutants

bench-published: install
	$(BIN)/python -m benchmarks.bench_published

# Harbor's oracle on the published set, exported as Harbor tasks (not part of `make test`; build
# the papers' images first: `rcb-env images build --pset researchcodebench --paper LEN ...`).
# HARBOR_TASKS: the task-name globs to run (default: every snippet of LEN and llm-sci-use).
# Harbor runs in the export's folder, through its registry.json, so that it prints the dataset's
# metric (metric.py, run with the uv of .venv/bin); `rcb-env summary` of the same trials follows.
HARBOR_TASKS ?= len__* llm-sci-use__*
harbor-published: install
	rm -rf runs/harbor-published
	$(BIN)/rcb-env export harbor --pset researchcodebench -o runs/harbor-published/tasks
	cd runs/harbor-published/tasks && PATH="$(CURDIR)/$(BIN):$$PATH" PYTHONPATH=$(CURDIR)/tests \
		LITELLM_LOCAL_MODEL_COST_MAP=True bash $(CURDIR)/scripts/with-dockerd.sh \
		$(CURDIR)/$(VENV)/harbor/bin/harbor run --registry-path registry.json -d researchcodebench \
		$(foreach t,$(HARBOR_TASKS),-i '$(t)') -a oracle -e harbor_plain_docker:PlainDocker \
		-n 2 -o ../jobs -y
	$(BIN)/rcb-env import-results runs/harbor-published/jobs/* --tasks runs/harbor-published/tasks \
		--runs-dir runs/harbor-published/runs
	$(BIN)/rcb-env summary runs/harbor-published/runs/*

# A real GRPO run (TRL) of a tiny model built offline on the bundled tasks, on CPU (< 5 min).
grpo-example: install
	$(BIN)/python examples/grpo_tiny.py --steps 3

# 64 concurrent scripted rollouts (memory per episode) and a batch's gradings concurrent vs serial.
bench-rl-scale: install
	$(BIN)/python -m benchmarks.bench_rl_scale

# The first observation's size per benchmark and paper_in_prompt setting (docs/rl.md).
first-observation: install
	$(BIN)/python -m benchmarks.first_observation

# rcb-env serve: reset + step over /ws vs in process, and 256 sessions held at once (docs/serve.md).
bench-serve: install
	$(BIN)/python -m benchmarks.bench_serve

# rcb-env serve's acceptance (after `make published`): the oracle through OpenEnv's own client on
# every runnable published snippet scores its line weight, a wrong body 0, 0 infrastructure errors.
serve-acceptance: install
	$(BIN)/python -m benchmarks.serve_acceptance

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
