#!/usr/bin/env bash
# Install rcb-env and everything it needs. Idempotent; quick when nothing changed.
#
#   system packages (Debian/Ubuntu, as root): bubblewrap, python3-venv, docker.io, mmdebstrap,
#   chromium and chromium-driver (the report's browser tests);
#   the user rcb-sandbox
#   .venv/                      rcb-env itself (editable) with its dev tools
#   .venv/harbor/, .venv/inspect/   Harbor (Python >= 3.12) and inspect_ai with openai >= 3.4
#   $RCB_ENV_HOME/task-venv/    the interpreter that runs task tests (numpy, torch==2.13.0),
#                               outside any home folder so a sandbox user can read it
#   $RCB_ENV_HOME/agents/       the agent CLIs (Claude Code, Codex from npm; mini-swe-agent from PyPI), pinned
#
# Settings: PYTHON (interpreter for .venv, default python3), RCB_ENV_HOME (default /opt/rcb-env),
# TASK_PYTHON_BASE (interpreter the task venv is made from, default /usr/bin/python3).
#
# `install.sh core` stops after step 3 (rcb-env, its task interpreter, the system packages): what
# every command and test needs. `make test` runs it first, then `install.sh tests` beside the
# static checks and the tests that look at the whole host, which leave the machine's cores
# mostly idle (steps 1-3 are then quick no-ops): everything but the agent CLIs from PyPI, which
# only `make test-agent-clis` runs (mini-swe-agent: a venv of 750 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
case $part in all | core | tests) ;; *) echo "usage: $0 [core | tests]" >&2; exit 2 ;; esac

PYTHON=${PYTHON:-python3}
RCB_ENV_HOME=${RCB_ENV_HOME:-/opt/rcb-env}
TASK_PYTHON_BASE=${TASK_PYTHON_BASE:-/usr/bin/python3}
[ -x "$TASK_PYTHON_BASE" ] || TASK_PYTHON_BASE=$(command -v "$PYTHON")

say() { printf '[install] %s\n' "$*"; }
# pip, minus the noise some machines' pip configuration adds (index folders that do not exist).
pip_in() { local py=$1; shift; "$py" -m pip "$@" 2> >(grep -v 'is ignored: it is neither' >&2); }

# 1. System packages.
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# A Docker engine for the docker backend (an existing one, e.g. docker-ce, is kept) and
# mmdebstrap for base images built from Debian packages where no image registry is reachable.
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
# Headless Chromium and its driver: the report's browser tests (rcb-env report / view).
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
"$TASK_PYTHON_BASE" -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "WARNING: please install: ${missing[*]} (needs root and apt-get)"
  fi
fi

# The unprivileged user sandboxed processes run as (bwrap drops to it when rcb-env runs as root).
if [ "$(id -u)" = 0 ] && ! id rcb-sandbox >/dev/null 2>&1; then
  say "creating the sandbox user rcb-sandbox"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin rcb-sandbox
fi

# 2. rcb-env in .venv (re-installed only when pyproject.toml changes).
stamp_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }
[ -x .venv/bin/python ] || { say "creating .venv"; "$PYTHON" -m venv .venv; }
want=$(stamp_of pyproject.toml)
if [ "$(cat .venv/.rcb-stamp 2>/dev/null)" != "$want" ]; then
  say "installing rcb-env into .venv"
  pip_in .venv/bin/python install -q --upgrade pip uv
  # uv installs from pip's own sources (scripts/pip_sources.py: mirrors, wheel folders such as
  # the CPU torch wheel's, constraints) in seconds where pip takes minutes; pip if uv fails.
  mapfile -t sources < <(.venv/bin/python scripts/pip_sources.py)
  extras='.[agents,rl,ray,mcp,serve,hub,verifiers,mini-swe-agent,openai-agents,smolagents,inspect,dev]'
  .venv/bin/uv pip install -q --python .venv/bin/python "${sources[@]}" \
      --index-strategy unsafe-best-match --prerelease disallow --compile-bytecode -e "$extras" \
    || pip_in .venv/bin/python install -q -e "$extras"
  echo "$want" > .venv/.rcb-stamp
fi

# verifiers' in-house harnesses run their chat program as a uv script: its requirements as
# wheels here, so that a rollout prepares it without an index (rcb_env.integrations.verifiers).
wh="$RCB_ENV_HOME/wheels/verifiers-harness"
want=$(.venv/bin/python -c 'from rcb_env.integrations.verifiers import harness_requirements as r; print(" ".join(r()))')
if [ "$(cat "$wh/.rcb-stamp" 2>/dev/null)" != "$want" ]; then
  say "downloading the verifiers harness program's requirements into $wh"
  mkdir -p "$wh"
  # shellcheck disable=SC2086
  pip_in .venv/bin/python download -q -d "$wh" $want
  echo "$want" > "$wh/.rcb-stamp"
fi

# 3. The task interpreter.
tv="$RCB_ENV_HOME/task-venv"
[ -x "$tv/bin/python" ] || { say "creating $tv"; mkdir -p "$RCB_ENV_HOME"; "$TASK_PYTHON_BASE" -m venv "$tv"; }
want=$(stamp_of tasks/requirements.txt)
if [ "$(cat "$tv/.rcb-stamp" 2>/dev/null)" != "$want" ]; then
  say "installing the bundled tasks' requirements into $tv"
  pip_in "$tv/bin/python" install -q -r tasks/requirements.txt
  echo "$want" > "$tv/.rcb-stamp"
fi
finish() {
  # rcb-env's own modules compiled once (where PYTHONDONTWRITEBYTECODE is set, every process
  # would compile them again; Python still reads what is there).
  .venv/bin/python -m compileall -q -j 0 rcb_env agents rcb_verifiers >/dev/null || true
  chmod -R a+rX "$RCB_ENV_HOME"
  say "done ($part): .venv/bin/rcb-env; task interpreter $tv/bin/python"
}
if [ "$part" = core ]; then
  finish
  exit 0
fi

# Steps 4 and 5 install with uv (from the verifiers extra in .venv): neither venv holds torch, and
# uv takes seconds where pip takes minutes.
# 4. Harbor (`rcb-env export harbor` tasks, ATIF trajectories checked with its models) needs
# Python >= 3.12: its own venv, .venv/harbor, from the first such interpreter found (or
# $HARBOR_PYTHON_BASE).
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }
hb_base=${HARBOR_PYTHON_BASE:-}
if [ -z "$hb_base" ]; then
  # on PATH, or a version pyenv manages (where pyenv is installed)
  pyenv_pythons=()
  if command -v pyenv >/dev/null 2>&1; then
    pyenv_pythons=("$(pyenv root)"/versions/3.1[2-9]*/bin/python3)
  fi
  for cand in python3.13 python3.12 "${pyenv_pythons[@]}" python3; do
    if command -v "$cand" >/dev/null 2>&1 && new_enough "$cand"; then hb_base=$cand; break; fi
  done
fi
want="harbor>=0.26,<0.27"
if [ -z "$hb_base" ]; then
  say "WARNING: no Python >= 3.12 found (HARBOR_PYTHON_BASE): Harbor not installed"
elif [ "$(cat .venv/harbor/.rcb-stamp 2>/dev/null)" != "$want" ]; then
  say "installing Harbor into .venv/harbor (from $hb_base)"
  [ -x .venv/harbor/bin/python ] || "$hb_base" -m venv .venv/harbor
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/harbor/bin/python "$want"
  echo "$want" > .venv/harbor/.rcb-stamp
fi

# 5. inspect_ai's OpenAI-compatible providers need openai >= 3.4, the verifiers extra pins
# openai < 3: rcb-env with inspect in a venv of its own, .venv/inspect (`inspect eval`).
want=$(stamp_of pyproject.toml)
if [ "$(cat .venv/inspect/.rcb-stamp 2>/dev/null)" != "$want" ]; then
  say "installing rcb-env with inspect_ai into .venv/inspect"
  [ -x .venv/inspect/bin/python ] || "$PYTHON" -m venv .venv/inspect
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/inspect/bin/python -e '.[inspect]' \
    'openai>=3.4'
  echo "$want" > .venv/inspect/.rcb-stamp
fi

# 6. The agent CLIs rcb-env runs inside an episode's sandbox (pinned in rcb_agents/clis.py:
# Claude Code and Codex from npm, mini-swe-agent from PyPI), each in a folder of its own,
# $RCB_ENV_HOME/agents/<name>-<version>/ (bound read-only into the sandbox; outside any home
# folder so the sandbox user can read it); offline afterwards. The same code as
# `rcb-env agents install NAME`.
agents=()
[ "$part" = tests ] && agents=(claude-code codex)
RCB_ENV_HOME="$RCB_ENV_HOME" TASK_PYTHON_BASE="$TASK_PYTHON_BASE" \
  .venv/bin/python -m rcb_agents.clis install "${agents[@]}" | sed 's/^\[install\] //' | while read -r line; do say "$line"; done

# 7. OpenEnv's client (openenv-core, pinned), in a venv of its own, .venv/openenv: the tests and
# the acceptance run of `rcb-env serve` drive the server with it, unchanged. Kept out of .venv:
# it would upgrade mcp and downgrade pillow there.
want="openenv-core==0.3.0"
if [ "$(cat .venv/openenv/.rcb-stamp 2>/dev/null)" != "$want" ]; then
  say "installing $want into .venv/openenv"
  [ -x .venv/openenv/bin/python ] || "$PYTHON" -m venv --without-pip .venv/openenv
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/openenv/bin/python "$want"
  echo "$want" > .venv/openenv/.rcb-stamp
fi

finish
