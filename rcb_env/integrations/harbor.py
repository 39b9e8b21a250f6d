"""rcb-env's tasks as a Harbor dataset (``rcb-env export harbor``): one Harbor task per snippet.

A task folder holds (Harbor's task format: ``harbor.models.task``):

- ``task.toml``: the settings (timeouts, resources, the working folder) and rcb-env's metadata
  (benchmark, paper, snippet, line weight);
- ``instruction.md``: the task as rcb-env states it to an agent;
- ``environment/Dockerfile``: ``FROM`` the paper's image
  (:mod:`rcb_env.sandbox.backends.docker.images`: the interpreter and the paper's dependencies)
  plus the masked repository in ``/workspace``, the agent's working folder. Nothing else: no
  test file, no reference copy, no hidden path;
- ``tests/``: what Harbor copies into the container only at verification time (``/tests``): the
  pristine paper (the snippet's region left as a marker line the body replaces), rcb-env's runner
  and ``verify.py`` (:mod:`rcb_env.guest.harbor_verify`), and ``test.sh``, which runs it on
  the file the agent edited and writes the reward (the line weight on a pass, 0 on a failure;
  none on an infrastructure verdict) and ``details.json`` into ``/logs/verifier``;
- ``solution/solve.sh``: the oracle (Harbor's ``oracle`` agent) writes the solved file.

``registry.json`` beside the tasks lists them as one dataset (Harbor's registry format).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from rcb_env import config, guest
from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.grading.grader import RUNNER_FILES, GradingConfig
from rcb_env.guest.protocol import split_lines
from rcb_env.sandbox.base import Limits
from rcb_env.task.models import Paper, Pset, Snippet
from rcb_env.task.source import source_for

__all__ = ["HarborExport", "export_harbor", "harbor_python", "task_name"]

VERIFY_SOURCE = guest.source("harbor_verify")
#: The agent's working folder in the container (the per-paper images' WORKDIR).
WORKSPACE = "/workspace"
#: Stands where the snippet's body goes in the pristine copy under ``tests/paper``.
SENTINEL = "# >>> rcb-env: the candidate body goes here <<<\n"
AGENT_TIMEOUT_S = 3600.0

_TEST_SH = """#!/bin/bash
# rcb-env's verdict on the file the agent edited (written by `rcb-env export harbor`).
mkdir -p /logs/verifier
exec python3 /tests/rcb/verify.py /tests {workspace} /logs/verifier
"""

_SOLVE_SH = """#!/bin/bash
# The reference solution: the snippet's own code in the masked file (rcb-env export harbor).
set -euo pipefail
cp /solution/{solved} {target}
"""


class HarborExport(Frozen):
    """What an export wrote."""

    dest: Path
    tasks: tuple[str, ...]
    """Task folder names, in order."""
    skipped: tuple[str, ...] = ()
    """``<snippet id>: why`` for every snippet left out (unavailable here)."""
    images: dict[str, str] = Field(default_factory=dict)
    """The image each paper's tasks are built from."""


def task_name(snippet: Snippet) -> str:
    """The snippet's task folder (and Harbor task) name: lower case, ``[a-z0-9._-]``."""
    raw = f"{snippet.paper_id}__{snippet.slug}".lower()
    return re.sub(r"[^a-z0-9._-]+", "-", raw).strip("-")


def harbor_python() -> Path | None:
    """The interpreter of the Harbor installation (``$RCB_HARBOR_PYTHON``, else the venv
    ``scripts/install.sh`` makes inside rcb-env's own, ``<venv>/harbor``), or None."""
    given = config.settings().harbor_python
    candidates = [given] if given else [Path(sys.prefix) / "harbor" / "bin" / "python"]
    return next((c for c in candidates if c.is_file()), None)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string


def _task_toml(
    paper: Paper, snippet: Snippet, benchmark: str, grading: GradingConfig, limits: Limits
) -> str:
    timeout = paper.overlay.timeout_s or grading.timeout_s
    meta = {
        "benchmark": benchmark,
        "paper": paper.id,
        "snippet": snippet.name,
        "snippet_id": snippet.id,
        "file": snippet.file,
        "weight": snippet.weight,
        "depth": snippet.depth,
        "source": "rcb-env",
    }
    lines = ['schema_version = "1.4"', 'source = "rcb-env"', "", "[metadata]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in meta.items()]
    lines += [
        "",
        "[agent]",
        f"timeout_sec = {AGENT_TIMEOUT_S}",
        "",
        "[verifier]",
        # two runs at most (the candidate, then the pristine paper if it failed) and the copies
        f"timeout_sec = {float(2 * timeout + 120)}",
        "",
        "[environment]",
        f"workdir = {_toml_value(WORKSPACE)}",
        "cpus = 1",
        f"memory_mb = {limits.memory_mb + 2048}",
        "build_timeout_sec = 1800.0",
        "",
    ]
    return "\n".join(lines)


def _instruction(paper: Paper, snippet: Snippet) -> str:
    st = source_for(paper).statement(paper, snippet)
    context = ""
    if st.context_files:
        context = "\nFiles worth reading for context: " + ", ".join(st.context_files) + "\n"
    kind = "Markdown" if st.paper_is_markdown else "LaTeX"
    return (
        f'Task: {st.intro} "{st.title}".\n\n'
        f"The repository is in `{WORKSPACE}`. In `{st.file}`, {st.placeholder_intro}:\n\n"
        f"```\n{st.placeholder.rstrip(chr(10))}\n```\n\n"
        "Replace them with a working implementation at the same indentation, editing the file "
        "in place, using the paper and the rest of the repository. Only that block is graded, "
        "by the paper's tests (hidden from you) run against the file as you leave it; changes "
        "elsewhere are ignored.\n"
        f"{context}\n"
        f"The paper's text ({kind}) is `{st.paper_file}` in the repository.\n"
    )


def _placeholder_lines(snippet: Snippet) -> tuple[int, int]:
    """Where the placeholder stands in the masked file (0-based lines, end exclusive)."""
    masked = [ln.rstrip("\r\n") for ln in split_lines(snippet.masked_text)]
    want = [ln.rstrip("\r\n") for ln in split_lines(snippet.todo_body())]
    n = len(want)
    for i in range(len(masked) - n + 1):
        if masked[i : i + n] == want:
            return i, i + n
    raise ConfigError(f"{snippet.id}: the masked file has no placeholder block")


def _write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def write_task(
    paper: Paper,
    snippet: Snippet,
    dest: Path,
    *,
    image: str,
    benchmark: str,
    grading: GradingConfig | None = None,
    limits: Limits | None = None,
) -> None:
    """Write ``snippet``'s Harbor task into the new folder ``dest`` (``limits``: the test
    process's memory and file size, as a sandbox's).

    Raises:
        ConfigError: the snippet's task source does not insert a body as a marked region does.
    """
    grading = grading or GradingConfig()
    limits = limits or Limits()
    source = source_for(paper)
    dest.mkdir(parents=True)
    (dest / "task.toml").write_text(_task_toml(paper, snippet, benchmark, grading, limits))
    (dest / "instruction.md").write_text(_instruction(paper, snippet))

    env_dir = dest / "environment"
    source.write_workspace(paper, snippet, env_dir / "workspace")
    (env_dir / "Dockerfile").write_text(
        f"# The paper's image ({paper.id}) and this snippet's masked repository; nothing else.\n"
        f"FROM {image}\nCOPY workspace/ {WORKSPACE}/\nWORKDIR {WORKSPACE}\n"
    )

    tests = dest / "tests"
    source.write_grading_copy(paper, snippet, SENTINEL, tests / "paper")
    graded = (tests / "paper" / snippet.file).read_text(encoding="utf-8")
    if graded.count(SENTINEL) != 1:
        raise ConfigError(
            f"{snippet.id}: its task source ({paper.source}) does not insert a body between "
            "markers, which the Harbor export needs"
        )
    rcb = tests / "rcb"
    rcb.mkdir()
    shutil.copyfile(VERIFY_SOURCE, rcb / "verify.py")
    guest.ship(rcb, *RUNNER_FILES, "protocol")
    guard = source.guarded(paper, snippet)
    spec = {
        "snippet_id": snippet.id,
        "file": snippet.file,
        "weight": snippet.weight,
        "test_file": source.test_file(paper, snippet),
        "expected_tests": list(source.tests_for(paper, snippet)),
        "masked_text": snippet.masked_text,
        "placeholder_lines": list(_placeholder_lines(snippet)),
        "reference_body": snippet.reference_body,
        "sentinel": SENTINEL,
        "guard": {
            "removed": list(guard.removed),
            "kept": list(guard.kept),
            "options": list(guard.options),
        },
        "env": dict(paper.overlay.env),
        "timeout_s": paper.overlay.timeout_s or grading.timeout_s,
        "memory_mb": limits.memory_mb,
        "file_size_mb": limits.file_size_mb,
        "policy": grading.candidate_policy,
    }
    (rcb / "spec.json").write_text(json.dumps(spec, indent=1))
    _write_exec(tests / "test.sh", _TEST_SH.format(workspace=WORKSPACE))

    solution = dest / "solution"
    solution.mkdir()
    solved = source.solved_file(paper, snippet, snippet.reference_body)
    (solution / "solved_file").write_text(solved)
    target = shlex.quote(f"{WORKSPACE}/{snippet.file}")
    _write_exec(solution / "solve.sh", _SOLVE_SH.format(solved="solved_file", target=target))


def export_harbor(
    pset: Pset,
    dest: Path,
    *,
    image_for: Callable[[Paper], str],
    name: str,
    version: str = "1.0",
    grading: GradingConfig | None = None,
    limits: Limits | None = None,
) -> HarborExport:
    """One Harbor task per available snippet of ``pset`` into ``dest`` (new or empty), and a
    ``registry.json`` listing them as the dataset ``name``. ``image_for`` gives a paper's image.

    Raises:
        ConfigError: ``dest`` holds files already, or a snippet cannot be exported.
    """
    if dest.exists() and any(dest.iterdir()):
        raise ConfigError(f"{dest} is not empty: export into a new folder")
    dest.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    skipped: list[str] = []
    images: dict[str, str] = {}
    for paper in pset.papers:
        if paper.unavailable:
            skipped.extend(f"{s.id}: {paper.unavailable}" for s in paper.snippets)
            continue
        image = images[paper.id] = image_for(paper)
        for snippet in paper.snippets:
            if snippet.unavailable:
                skipped.append(f"{snippet.id}: {snippet.unavailable}")
                continue
            folder = task_name(snippet)
            if folder in names:
                raise ConfigError(f"two snippets map to the task name {folder}")
            write_task(
                paper,
                snippet,
                dest / folder,
                image=image,
                benchmark=name,
                grading=grading,
                limits=limits,
            )
            names.append(folder)
    registry = [
        {
            "name": name,
            "version": version,
            "description": f"{name} exported by rcb-env: one task per snippet, graded by "
            "rcb-env's runner (reward: the snippet's line weight on a pass)",
            "tasks": [{"name": n, "path": n} for n in names],
            "metrics": [],
        }
    ]
    (dest / "registry.json").write_text(json.dumps(registry, indent=1) + "\n")
    return HarborExport(dest=dest, tasks=tuple(names), skipped=tuple(skipped), images=images)
