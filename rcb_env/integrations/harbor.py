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
  the file the agent edited and writes ``reward.json`` (``reward``: the line weight on a pass,
  0 on a failure; ``weight``; ``passed``; none on an infrastructure verdict) and
  ``reward-details.json`` (the verdict with its per-test results) into ``/logs/verifier``;
- ``solution/solve.sh``: the oracle (Harbor's ``oracle`` agent) writes the solved file.

Beside the tasks: ``metric.py`` (:mod:`rcb_env.guest.rates`: the paper's scaled and plain
rates, infrastructure failures left out and counted) and ``registry.json``, which lists the
tasks as one dataset (Harbor's registry format) whose metric is that script, so that
``harbor run --registry-path registry.json -d NAME`` (run in the export's folder) prints the
rates ``rcb-env summary`` gives; ``job.json`` names the same dataset and metric by absolute
path, as a Harbor job configuration (``harbor run -c DIR/job.json`` from anywhere).
:func:`import_harbor_job` reads a Harbor job back as rcb-env runs, for ``rcb-env summary`` of
the same trials.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import shutil
import stat
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rcb_env import config, guest
from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.grading.grader import RUNNER_FILES, GradingConfig
from rcb_env.guest.harbor_verify import DETAILS
from rcb_env.guest.protocol import split_lines
from rcb_env.results.records import RECORDS, RUN_FILE, EpisodeRecord, write_json_atomic
from rcb_env.sandbox.base import Limits
from rcb_env.synth.manifest import export_metadata
from rcb_env.task.models import Paper, Pset, Snippet
from rcb_env.task.source import source_for

__all__ = [
    "HarborExport",
    "export_harbor",
    "harbor_python",
    "import_harbor_job",
    "task_name",
]

VERIFY_SOURCE = guest.source("harbor_verify")
#: The dataset's metric script beside the tasks (Harbor runs it with ``uv run``).
METRIC = "metric.py"
#: A Harbor job configuration naming the dataset (absolute paths) and its metric.
JOB_CONFIG = "job.json"
AgentNetwork = Literal["no-network", "public"]
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
    paper: Paper,
    snippet: Snippet,
    benchmark: str,
    grading: GradingConfig,
    limits: Limits,
    agent_network: AgentNetwork,
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
        **export_metadata(paper, snippet.id),
    }
    lines = ['schema_version = "1.4"', 'source = "rcb-env"', "", "[metadata]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in meta.items()]
    lines += [
        "",
        "[agent]",
        f"timeout_sec = {AGENT_TIMEOUT_S}",
        # the agent phase only: setup (installing an agent) and verification keep the
        # environment's network; Harbor adds a model-calling agent's inference host
        f"network_mode = {_toml_value(agent_network)}",
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
    agent_network: AgentNetwork = "no-network",
) -> None:
    """Write ``snippet``'s Harbor task into the new folder ``dest`` (``limits``: the test
    process's memory and file size, as a sandbox's; ``agent_network``: Harbor's network mode
    for the agent phase).

    Raises:
        ConfigError: the snippet's task source does not insert a body as a marked region does.
    """
    grading = grading or GradingConfig()
    limits = limits or Limits()
    source = source_for(paper)
    dest.mkdir(parents=True)
    (dest / "task.toml").write_text(
        _task_toml(paper, snippet, benchmark, grading, limits, agent_network)
    )
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
    agent_network: AgentNetwork = "no-network",
) -> HarborExport:
    """One Harbor task per available snippet of ``pset`` into ``dest`` (new or empty), the
    dataset's ``metric.py`` and a ``registry.json`` listing the tasks as the dataset ``name``
    with that metric. ``image_for`` gives a paper's image; ``agent_network`` is Harbor's network
    mode for the agent phase (``no-network``, or ``public`` for environments that cannot
    switch the network off between phases).

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
                agent_network=agent_network,
            )
            names.append(folder)
    registry = [
        {
            "name": name,
            "version": version,
            "description": f"{name} exported by rcb-env: one task per snippet, graded by "
            "rcb-env's runner (reward: the snippet's line weight on a pass); metric.py gives "
            "the paper's scaled and plain pass rates",
            "tasks": [{"name": n, "path": n} for n in names],
            # relative paths, as the tasks': Harbor resolves both from the folder it runs in
            "metrics": [{"type": "uv-script", "kwargs": {"script_path": METRIC}}],
        }
    ]
    shutil.copyfile(guest.source("rates"), dest / METRIC)
    # the same dataset and metric as a job configuration, for `harbor run -c job.json` from
    # anywhere (and `-p DIR -c DIR/job.json`: Harbor 0.26 applies no metric.py to a -p folder)
    where = dest.resolve()
    job = {
        "datasets": [{"path": str(where)}],
        "metrics": [{"type": "uv-script", "kwargs": {"script_path": str(where / METRIC)}}],
    }
    (dest / JOB_CONFIG).write_text(json.dumps(job, indent=1) + "\n")
    (dest / "registry.json").write_text(json.dumps(registry, indent=1) + "\n")
    return HarborExport(dest=dest, tasks=tuple(names), skipped=tuple(skipped), images=images)


class HarborRun(Frozen):
    """One agent's trials of a Harbor job, imported as an rcb-env run folder."""

    run_dir: Path
    agent: str
    """Harbor's evaluation key: agent, model and dataset."""
    trials: int
    infra_errors: int
    """Trials without a valid reward (no verdict, or Harbor's own failure before one)."""


def _trial_record(
    trial: dict[str, Any], verifier_dir: Path, run_id: str, sample: int, tasks: Path | None
) -> dict[str, Any]:
    """The fields of one trial's :class:`~rcb_env.results.records.EpisodeRecord`."""
    details_path = verifier_dir / DETAILS
    details: dict[str, Any] = {}
    if details_path.is_file():
        details = json.loads(details_path.read_text())
    rewards = (trial.get("verifier_result") or {}).get("rewards") or {}
    meta = _task_metadata(trial, tasks)
    snippet_id = str(details.get("snippet_id") or meta.get("snippet_id") or trial["task_name"])
    weight = int(rewards.get("weight", details.get("weight", meta.get("weight", 0))))
    scored = bool(trial.get("reward_valid")) and {"weight", "passed"} <= set(rewards)
    exc = trial.get("exception_info") or {}
    started = _unix(trial.get("started_at"))
    record: dict[str, Any] = {
        "run_id": run_id,
        "episode_id": str(trial.get("trial_name") or trial["task_name"]),
        "snippet_id": snippet_id,
        "paper_id": str(meta.get("paper") or snippet_id.split("/", 1)[0]),
        "sample": sample,
        "weight": weight,
        "task_hash": str(trial.get("task_checksum") or ""),
        "agent": {"harbor": True, **(trial.get("agent_info") or {})},
        "config": {},
        "status": "completed" if scored else "infra_error",
        "reason": "imported" if scored else "infra_error",
        "reward": float(rewards.get("reward", 0.0)) if scored else 0.0,
        "passed": bool(rewards["passed"]) if scored else None,
        "initial_observation": "",
        "steps": [],
        "body": details.get("body"),
        "started_at": started,
        "duration_s": max(0.0, _unix(trial.get("finished_at")) - started),
    }
    if not scored:
        why = details.get("detail") or exc.get("exception_message") or "no reward"
        kind = details.get("kind") if details.get("outcome") == "infra_error" else None
        record["infra_error"] = {
            "stage": "grading" if kind else "harbor",
            "type": str(kind or exc.get("exception_type") or "no_reward"),
            "message": str(why)[:2000],
        }
    return record


def _task_metadata(trial: dict[str, Any], tasks: Path | None) -> dict[str, Any]:
    """The exported task's ``[metadata]`` (paper, snippet id, weight), when its folder is
    found (Harbor records the path it was given, relative to where it ran: ``tasks``)."""
    path = ((trial.get("config") or {}).get("task") or {}).get("path")
    toml = (tasks or Path()) / str(path) / "task.toml" if path else None
    if toml is None or not toml.is_file():
        return {}
    meta: dict[str, Any] = tomllib.loads(toml.read_text()).get("metadata", {})
    return meta


def _unix(stamp: object) -> float:
    if not isinstance(stamp, str):
        return 0.0
    return dt.datetime.fromisoformat(stamp).timestamp()


def import_harbor_job(
    job_dir: Path, runs_root: Path, *, tasks: Path | None = None
) -> list[HarborRun]:
    """Each agent's trials of the Harbor job in ``job_dir`` (on an rcb-env export) as one run
    folder under ``runs_root`` (``harbor-<job>-<agent>``, replacing an earlier import), so
    that ``rcb-env summary`` rates the same trials Harbor's metric did: a trial with a valid
    reward is scored by its verdict; one without (an infrastructure verdict, or Harbor failed
    before one) is recorded as an infrastructure failure, excluded and counted. ``tasks``: the
    export's folder (where ``harbor run`` ran), to name a trial whose verifier never ran.

    Raises:
        ConfigError: ``job_dir`` holds no trial results.
    """
    trials = []
    for path in sorted(job_dir.glob("*/result.json")):
        data = json.loads(path.read_text())
        if "task_name" in data:
            trials.append((path.parent, data))
    if not trials:
        raise ConfigError(f"{job_dir} is not a Harbor job folder (no <trial>/result.json)")
    groups: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for trial_dir, data in trials:
        info = data.get("agent_info") or {}
        model = (info.get("model_info") or {}).get("name")
        key = "-".join(str(x) for x in (info.get("name") or "agent", model) if x)
        groups.setdefault(key, []).append((trial_dir, data))
    runs = []
    for key, members in sorted(groups.items()):
        run_dir = runs_root / re.sub(r"[^A-Za-z0-9_.-]+", "_", f"harbor-{job_dir.name}-{key}")
        run_dir.mkdir(parents=True, exist_ok=True)
        seen: dict[str, int] = {}
        records = []
        for trial_dir, data in sorted(members, key=lambda m: str(m[1].get("started_at"))):
            task = str(data["task_name"])
            sample = seen[task] = seen.get(task, -1) + 1
            fields = _trial_record(data, trial_dir / "verifier", run_dir.name, sample, tasks)
            records.append(EpisodeRecord.model_validate(fields))
        (run_dir / RECORDS).write_text(
            "".join(r.model_dump_json() + "\n" for r in records), encoding="utf-8"
        )
        snippets = sorted({r.snippet_id for r in records})
        write_json_atomic(
            run_dir / RUN_FILE,
            {
                "schema_version": "rcb-env/run/1",
                "run_id": run_dir.name,
                "harbor": {"job": str(job_dir), "agent": key},
                "config": {"agent": f"harbor:{key}", "samples": max(seen.values()) + 1},
                "tasks": snippets,
            },
        )
        infra = sum(1 for r in records if r.status == "infra_error")
        runs.append(HarborRun(run_dir=run_dir, agent=key, trials=len(records), infra_errors=infra))
    return runs
