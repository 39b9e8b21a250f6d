"""Which lines of a paper's code its test executes while the reference runs.

The code is every Python file of the paper the solver may read (:func:`code_files`: the
annotated files and the rest of the repository; not the test, not the reference copies nor
any other hidden path). The paper's folder is copied (its annotated files without markers, so
the line numbers are those of the synthesised pset), :mod:`rcb_env.guest.coverage_probe` is
put beside the test, and the test runs under the paper's interpreter on the paper's grading
executor: the same sandbox (bwrap, docker, ...) and interpreter a grading run uses, as one cold
command, like the survivor probe's (:mod:`rcb_env.validation.survivors`). The probe traces with
:func:`sys.settrace`, which every CPython the papers pin has (no ``coverage`` package needed in
the paper's environment; the published environments are 3.11, without ``sys.monitoring``),
and only in frames of those files.
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
from rcb_env.task import loader
from rcb_env.task.models import Paper

PROBE = guest.source("coverage_probe")
_OUT = "_rcb_coverage.json"


#: Larger Python files are data, not code to learn from.
MAX_FILE_BYTES = 512_000


class Coverage(dict[str, set[int]]):
    """file -> executed lines (1-based, marker-free text)."""


def code_files(paper: Paper) -> dict[str, str]:
    """The paper's Python files a synthesised snippet may lie in, with their text (annotated
    files with their published markers): the annotated files, then every other ``.py`` file
    of the folder that is not hidden from the solver (the test, ``*_ref.py``, the overlay's
    hidden paths) and not a link."""
    out = {f.path: f.text for f in paper.annotated_files if f.path.endswith(".py")}
    for rel in loader.walk_files(paper.root):
        path = paper.root / rel
        if (
            rel in out
            or not rel.endswith(".py")
            or loader.is_hidden(rel, paper.hidden_patterns)
            or path.is_symlink()
            or path.stat().st_size > MAX_FILE_BYTES
        ):
            continue
        out[rel] = path.read_text(encoding="utf-8", errors="replace")
    return out


def measure(paper: Paper, executor: Executor, *, scratch: Path, timeout_s: float) -> Coverage:
    """The lines of ``paper``'s annotated files its test executes.

    Raises:
        SandboxError: the probe did not run, or wrote nothing (the reason is in the message).
    """
    scratch.mkdir(parents=True, exist_ok=True)
    work = scratch_dirs.make("rcb-coverage-", scratch)
    work.chmod(0o755)
    files = list(code_files(paper))
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
