"""Which surviving mutants are a gap in the test, and which may be equivalent to the reference.

Where the snippet lies in a module-level function that its test calls, the function can be
called in isolation: the test is run once under the paper's interpreter, in the paper's sandbox,
with a spy that keeps the arguments of the function's first calls; perturbed copies of them
(:mod:`rcb_env.guest.survivor_probe`) go to the reference and to each survivor. A survivor
whose output differs on some input is a **test gap** (wrong code the test lets through); one
that agrees on every input is **possibly equivalent** (no test may be able to kill it). Other
survivors are left unclassified.
"""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from rcb_env import guest
from rcb_env._common import parse_python
from rcb_env.errors import SandboxError
from rcb_env.grading.grader import DEFAULT_TIMEOUT_S
from rcb_env.sandbox import scratch as scratch_dirs
from rcb_env.sandbox.base import Command, Executor
from rcb_env.task import environments as envs
from rcb_env.task.annotations import insert
from rcb_env.task.models import Paper, Snippet
from rcb_env.task.source import source_for
from rcb_env.validation.strength import Kind

PROBE = guest.source("survivor_probe")


def callable_function(paper: Paper, snippet: Snippet) -> str | None:
    """The module-level function whose body holds ``snippet``, if the snippet's test file names
    it (so that its calls can be captured); else None."""
    if not snippet.file.endswith(".py"):
        return None
    try:
        tree = parse_python(paper.file_text(snippet.file))
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            # the region's lines (between its markers) lie inside the function
            node.lineno < snippet.start_line and (node.end_lineno or 0) >= snippet.end_line - 1
        ):
            test = (paper.root / source_for(paper).test_file(paper, snippet)).read_text()
            return node.name if node.name in test else None
    return None


def classify(
    paper: Paper,
    snippet: Snippet,
    survivors: dict[str, str],
    executor: Executor,
    *,
    scratch: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    seed: int = 0,
) -> dict[str, Kind]:
    """``survivors`` (key -> mutated body) classified by running them beside the reference on
    perturbed inputs of the snippet's function; empty when the function cannot be called in
    isolation or the probe could not run (nothing is guessed).

    Raises:
        SandboxError: the sandbox could not start the probe.
    """
    function = callable_function(paper, snippet)
    if function is None or not survivors:
        return {}
    python = executor.interpreter or str(envs.python_for(paper))
    text = paper.file_text(snippet.file)
    test = source_for(paper).test_file(paper, snippet)
    cfg = {
        "module": snippet.file[: -len(".py")].replace("/", "."),
        "function": function,
        "test": test[: -len(".py")].replace("/", "."),
        "seed": seed,
        "mutants": {key: insert(text, snippet.span, body) for key, body in survivors.items()},
    }
    scratch.mkdir(parents=True, exist_ok=True)
    # A scratch folder (owned, swept if this process dies) and removed by scratch_dirs.discard,
    # which copes with whatever the probe, running the mutants' code, left in the copy.
    work = scratch_dirs.make("rcb-survivors-", scratch)
    work.chmod(0o755)  # the sandbox user must reach the copy
    try:
        copy = work / "paper"
        shutil.copytree(paper.root, copy)
        shutil.copy(PROBE, copy / "_rcb_probe.py")
        (copy / "_rcb_probe.json").write_text(json.dumps(cfg))
        copy.chmod(0o777)
        for path in copy.rglob("*"):
            path.chmod(0o777 if path.is_dir() else 0o666)
        ran = executor.run(
            Command(
                (python, "_rcb_probe.py", "_rcb_probe.json"),
                cwd=copy,
                env={"PYTHONPATH": ".", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"},
                timeout_s=timeout_s,
                writable=copy,
            )
        )
    finally:
        scratch_dirs.discard(work)
    lines = [ln for ln in ran.stdout.splitlines() if ln.startswith("{")]
    if ran.exit_code != 0 or not lines:
        return {}
    found = json.loads(lines[-1])
    if not found.get("inputs"):
        return {}
    return {
        key: ("test gap" if verdict == "differs" else "possibly equivalent")
        for key, verdict in found["verdicts"].items()
    }


def classify_all(
    items: list[tuple[Paper, Snippet, dict[str, str]]],
    executor_for: Callable[[Paper], Executor],
    *,
    scratch: Path,
) -> dict[tuple[str, str], Kind]:
    """:func:`classify` for each snippet's survivors; (snippet id, mutant key) -> kind."""
    out: dict[tuple[str, str], Kind] = {}
    for paper, snippet, survivors in items:
        try:
            kinds = classify(paper, snippet, survivors, executor_for(paper), scratch=scratch)
        except SandboxError:
            continue
        out.update({(snippet.id, key): kind for key, kind in kinds.items()})
    return out
