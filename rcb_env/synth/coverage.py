"""Which lines of a paper's annotated files its test executes while the reference runs.

The paper's folder is copied (its annotated files without markers, so the line numbers are
those of the synthesised pset), :mod:`rcb_env.guest.coverage_probe` is put beside the test, and
the test runs under the paper's interpreter on the paper's grading executor: the same sandbox
(bwrap, docker, ...) and interpreter a grading run uses, as one cold command, like the survivor
probe's (:mod:`rcb_env.validation.survivors`). The probe traces with :func:`sys.settrace`,
which every CPython the papers pin has (no ``coverage`` package needed in the paper's
environment), and only in frames of the annotated files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rcb_env import guest
from rcb_env.errors import SandboxError
from rcb_env.sandbox import scratch as scratch_dirs
from rcb_env.sandbox.base import Command, Executor
from rcb_env.task import annotations as ann
from rcb_env.task import environments as envs
from rcb_env.task.models import Paper

PROBE = guest.source("coverage_probe")
_OUT = "_rcb_coverage.json"


class Coverage(dict[str, set[int]]):
    """file -> executed lines (1-based, marker-free text)."""


def measure(paper: Paper, executor: Executor, *, scratch: Path, timeout_s: float) -> Coverage:
    """The lines of ``paper``'s annotated files its test executes.

    Raises:
        SandboxError: the probe did not run, or wrote nothing (the reason is in the message).
    """
    scratch.mkdir(parents=True, exist_ok=True)
    work = scratch_dirs.make("rcb-coverage-", scratch)
    work.chmod(0o755)
    files = [f.path for f in paper.annotated_files]
    try:
        copy = work / "paper"
        shutil.copytree(paper.root, copy, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        for f in paper.annotated_files:
            (copy / f.path).write_bytes(ann.strip_markers(f.text).encode())
        shutil.copy(PROBE, copy / "_rcb_coverage_probe.py")
        copy.chmod(0o777)
        for path in copy.rglob("*"):
            path.chmod(0o777 if path.is_dir() else 0o666)
        python = executor.interpreter or str(envs.python_for(paper))
        ran = executor.run(
            Command(
                (python, "_rcb_coverage_probe.py", paper.test_file, _OUT, *files),
                cwd=copy,
                env={"PYTHONPATH": ".", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"},
                timeout_s=timeout_s,
                writable=copy,
            )
        )
        out = copy / _OUT
        if not out.is_file():
            raise SandboxError(
                f"{paper.id}: the coverage probe wrote nothing (exit {ran.exit_code}): "
                f"{(ran.stderr or ran.stdout)[-500:]}"
            )
        data = json.loads(out.read_text())
    finally:
        scratch_dirs.discard(work)
    return Coverage({f: set(lines) for f, lines in data["lines"].items()})
