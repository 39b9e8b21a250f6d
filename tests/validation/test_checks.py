"""The model-free checks as library calls (``run_validation``, ``run_audit``,
``run_hack_suite``) that take a dispatcher chosen once from ``--ray``; the commands only parse,
call and render (no Ray branch, no import of the dispatch layer)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rcb_env.cli import cli
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.grading.models import GradeResult
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task import load
from rcb_env.task.models import Paper, Pset
from rcb_env.validation import checks
from rcb_env.validation.audit import Finding
from rcb_env.validation.checks import ValidationPlan, run_audit, run_validation
from rcb_env.validation.dispatcher import Local, OnRay, dispatcher_for
from rcb_env.validation.hacks import HackResult
from rcb_env.validation.progress import Meter
from rcb_env.validation.strength import Case, GradeAll
from rcb_env.verdicts import FailureKind, Outcome
from tests.conftest import math_files, write_paper, write_pset

CLI = Path(__file__).resolve().parents[2] / "rcb_env" / "cli"


@pytest.mark.parametrize("name", ["validate.py", "audit.py", "hacks.py"])
def test_the_commands_do_not_branch_on_ray_or_import_the_dispatch_layer(name: str) -> None:
    tree = ast.parse((CLI / name).read_text())
    imported = [
        alias.name if isinstance(node, ast.Import) else f"{node.module}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [m for m in imported if m.startswith("rcb_env.dispatch")], imported
    assert "rcb_env.validation.jobs" not in imported
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    assert "ray_address" not in names
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp):
            assert "ray" not in ast.unparse(node.test), ast.unparse(node.test)


def test_ray_is_chosen_once_from_the_flag() -> None:
    assert isinstance(dispatcher_for(None), Local)
    on_ray = dispatcher_for("local")
    assert isinstance(on_ray, OnRay)
    assert on_ray.address == "local"


class _Recorder:
    """A dispatcher of our own: says what it was asked and grades every mutant as killed."""

    here = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @contextmanager
    def session(self, slots: int | None = None) -> Iterator[None]:
        self.calls.append(("session", slots))
        yield
        self.calls.append(("closed", slots))

    def grade_mutants(
        self, pset: Pset, factory: SandboxFactory, grading: GradingConfig, jobs: int
    ) -> GradeAll:
        self.calls.append(("mutants", jobs))

        def grade_all(cases: Sequence[Case], done: Callable[[Case, GradeResult], None]) -> None:
            for c in cases:
                result = GradeResult(
                    snippet_id=c.snippet.id,
                    outcome=Outcome.FAILED,
                    kind=FailureKind.TEST_FAILURE,
                    official_pass=False,
                )
                done(c, result)

        return grade_all

    def grade_attacks(
        self,
        pset: Pset,
        attacks: dict[str, str],
        grader_for: Callable[[Paper], Grader],
        sandbox: SandboxConfig,
        jobs: int = 1,
    ) -> list[HackResult]:
        raise AssertionError("not asked for here")

    def audit(
        self, pset: Pset, factory: SandboxFactory, control: bool, meter: Meter
    ) -> tuple[list[Finding], list[Finding] | None]:
        self.calls.append(("audit", control))
        leak = Finding(snippet_id="maths/mean", path="./x.py", line="return 1", kind="sibling")
        return [leak], None if not control else []


def test_run_audit_asks_the_dispatcher_it_is_given(math_pset: Path) -> None:
    recorder = _Recorder()
    report = run_audit(load(math_pset), SandboxConfig(backend="local"), recorder, control=True)
    assert recorder.calls == [("session", None), ("audit", True), ("closed", None)]
    assert [f.path for f in report.leaks] == ["./x.py"]
    assert report.control_missed  # the control ran and found nothing
    assert not run_audit(
        load(math_pset), SandboxConfig(backend="local"), recorder, False
    ).control_missed


def test_run_validation_grades_mutants_through_the_dispatcher(
    math_pset: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RCB_TASK_PYTHON", sys.executable)
    recorder = _Recorder()
    plan = ValidationPlan(
        sandbox=SandboxConfig(backend="local"), jobs=2, mutants=True, cap=2, threshold=0.5
    )
    run = run_validation(load(math_pset), plan, recorder)
    assert run.ok
    assert recorder.calls == [("mutants", 2), ("session", 2), ("closed", 2)]
    assert run.strength is not None
    assert run.strength.total.killed > 0
    assert run.subset is not None
    assert {e.id for e in run.subset.snippets} == {s.id for s in load(math_pset).snippets}
    assert '"snippets"' in run.document()  # with mutants: the scores
    without = run_validation(load(math_pset), plan.model_copy(update={"mutants": False}), Local())
    assert without.strength is None
    assert without.document() == without.report.model_dump_json(indent=2)


def test_mutants_on_ray_across_benchmarks_are_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    a = write_pset(tmp_path / "a", [write_paper(tmp_path / "a", "one", math_files())])
    b = write_pset(tmp_path / "b", [write_paper(tmp_path / "b", "two", math_files())])
    result = CliRunner().invoke(
        cli,
        ["validate", "--pset", str(a), "--pset", str(b), "--sandbox", "local", "--mutants",
         "--ray", "local"],
        env={"RCB_TASK_PYTHON": sys.executable},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--mutants --ray: one benchmark at a time" in result.output
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_the_audit_command_passes_the_dispatcher_of_its_flag(
    math_pset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    def fake(pset: Pset, sandbox: SandboxConfig, dispatcher: Any, *rest: Any) -> Any:
        seen.append(dispatcher)
        return checks.AuditReport([], len(pset.snippets), None)

    monkeypatch.setattr(checks, "run_audit", fake)
    for how, kind in (([], Local), (["--ray", "some:6379"], OnRay)):
        result = CliRunner().invoke(cli, ["audit", "--pset", str(math_pset), "--no-control", *how])
        assert result.exit_code == 0, result.output
        assert "0 findings over 3 snippets" in result.output
        assert isinstance(seen[-1], kind)


def test_the_hack_suite_grades_its_attacks_at_once_and_reports_them_in_order(
    tmp_path: Path,
) -> None:
    """``--jobs``: an attack that waits for the time limit holds one slot, not the suite."""
    import time

    from rcb_env import config
    from rcb_env.task import bundled_root
    from rcb_env.validation.hacks import ATTACKS, run_hacks
    from tests.conftest import local_grader

    pset = load(bundled_root())
    timeout_s = 2.0
    grader = local_grader(
        GradingConfig(python=config.task_python(), timeout_s=timeout_s, candidate_policy=False),
        scratch=tmp_path,
    )
    sleep = ATTACKS["sleep past the timeout"]
    attacks = {f"sleep {i}": sleep for i in range(3)}
    start = time.monotonic()
    rows = run_hacks(pset, lambda _paper: grader, attacks, jobs=3)
    took = time.monotonic() - start
    assert [r.attack for r in rows] == list(attacks)
    assert all(not r.passed and not r.excluded and r.kind == FailureKind.TIMEOUT for r in rows)
    assert took < 2 * timeout_s + 1.5, took  # one after another: at least 3 x the limit
