"""Validation statuses (ok, weak, flaky, broken, environment) and the CLI's exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rcb_env.cli import cli
from rcb_env.grading import Grader
from rcb_env.task import load
from rcb_env.validation import Status, validate
from tests.conftest import MATH_CODE, MATH_TEST, math_files, write_paper, write_pset

UNTESTED = (
    MATH_CODE
    + """

def unused():
    # <paper2code name="untested">
    return 42
    # </paper2code name="untested">
"""
)


def _pset(root: Path) -> Path:
    counter = root / "flaky-counter"
    flaky_test = (
        "import pathlib\n"
        f"_c = pathlib.Path({str(counter)!r})\n"
        "_n = int(_c.read_text()) if _c.exists() else 0\n"
        "_c.write_text(str(_n + 1))\n"
        "assert _n % 2 == 0, 'odd run fails'\n" + MATH_TEST
    )
    entries = [
        write_paper(root, "good", math_files()),
        write_paper(root, "weak", math_files(code=UNTESTED)),
        write_paper(
            root, "broken", math_files(test=MATH_TEST.replace("mean_ref([1, 2, 3, 4])", "99"))
        ),
        write_paper(root, "env", math_files(test="import not_installed_xyz\n" + MATH_TEST)),
        write_paper(root, "flaky", math_files(test=flaky_test)),
        write_paper(root, "unloadable", {"paper2code_paper.tex": "x"}),
    ]
    return write_pset(root, entries)


@pytest.mark.slow
def test_statuses(tmp_path: Path, grader: Grader) -> None:
    pset = load(_pset(tmp_path / "pset"))
    report = validate(
        pset,
        grader.config,
        executor_for=lambda _: grader.executor,
        scratch=grader.scratch,
        jobs=1,
        repeat=2,
    )
    by_paper = {
        p.id: {s.id.split("/")[1]: s.status for s in p.snippet_reports} for p in report.papers
    }
    assert set(by_paper["good"].values()) == {Status.OK}
    assert by_paper["weak"]["untested"] is Status.WEAK
    assert by_paper["weak"]["mean"] is Status.OK
    assert set(by_paper["broken"].values()) == {Status.BROKEN}
    assert set(by_paper["env"].values()) == {Status.ENVIRONMENT}
    assert set(by_paper["flaky"].values()) == {Status.FLAKY}
    assert [f.paper for f in report.load_failures] == ["unloadable"]
    assert not report.ok
    counts = report.counts()
    assert counts[Status.OK] == 6  # the 3 of "good" and the 3 tested ones of "weak"
    assert counts[Status.WEAK] == 1


def test_report_is_ok_when_only_good_papers(math_pset: Path, grader: Grader) -> None:
    report = validate(
        load(math_pset),
        grader.config,
        executor_for=lambda _: grader.executor,
        scratch=grader.scratch,
        jobs=2,
    )
    assert report.ok
    assert all(len(p.reference) == 1 for p in report.papers)


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env={"RCB_TASK_PYTHON": sys.executable})
    return result.exit_code, result.output


def test_cli_validate_exit_codes_and_json(tmp_path: Path, math_pset: Path) -> None:
    out_json = tmp_path / "report.json"
    # The synthetic tasks run under this process's own interpreter, which the sandbox user
    # cannot reach: graded without a sandbox.
    code, output = _invoke(
        "validate", "--pset", str(math_pset), "--json", str(out_json), "--sandbox", "local"
    )
    assert code == 0, output
    data = json.loads(out_json.read_text())
    assert data["schema_version"] == "rcb-env/validate/1"
    assert {s["status"] for p in data["papers"] for s in p["snippet_reports"]} == {"ok"}

    code, output = _invoke(
        "validate",
        "--pset",
        str(_pset(tmp_path / "bad")),
        "--paper",
        "broken",
        "--paper",
        "good",
        "--sandbox",
        "local",
    )
    assert code == 1
    assert "broken reference failed" in output


def test_cli_tasks_counts_and_date_filter(tmp_path: Path) -> None:
    entries = [
        write_paper(tmp_path, "old", math_files(), meta={"first_commit_date": "2024-01-01"}),
        write_paper(
            tmp_path, "new", math_files(code=UNTESTED), meta={"first_commit_date": "2025-06-01"}
        ),
    ]
    write_pset(tmp_path, entries)
    code, output = _invoke("tasks", "--pset", str(tmp_path), "--json")
    assert code == 0
    data = json.loads(output)
    assert [len(p["snippets"]) for p in data["papers"]] == [3, 4]
    code, output = _invoke("tasks", "--pset", str(tmp_path), "--after", "2025-01-01", "--json")
    assert [p["meta"]["id"] for p in json.loads(output)["papers"]] == ["new"]
    code, output = _invoke("tasks", "--pset", str(tmp_path), "--tree")
    assert "untested" in output
    assert "2 papers" in output


def test_cli_tasks_reports_broken_paper_and_exits_nonzero(tmp_path: Path) -> None:
    bad = MATH_CODE.replace('    # </paper2code name="variance">\n', "")
    write_pset(
        tmp_path,
        [
            write_paper(tmp_path, "bad", math_files(code=bad)),
            write_paper(tmp_path, "ok", math_files()),
        ],
    )
    code, output = _invoke("tasks", "--pset", str(tmp_path))
    assert code == 1
    assert "stats.py:16" in output
    assert 'snippet "variance"' in output
    assert "never closed" in output


def test_warm_and_cold_verdicts_compare_tests_except_after_a_timeout() -> None:
    """The equivalence check: per-test results count, except those a run killed at the
    wall-clock limit happened to finish (how far it got depends on the machine's load)."""
    from rcb_env.grading.models import GradeResult
    from rcb_env.validation.equivalence import verdict
    from rcb_env.verdicts import FailureKind, Outcome, TestOutcome, TestStatus

    def result(kind: FailureKind, *passed: str) -> GradeResult:
        tests = tuple(TestOutcome(name=n, status=TestStatus.PASSED) for n in passed)
        return GradeResult(
            snippet_id="p/s", outcome=Outcome.FAILED, kind=kind, official_pass=False, tests=tests
        )

    timeout = FailureKind.TIMEOUT
    assert verdict(result(timeout, "t1")) == verdict(result(timeout))
    assert verdict(result(FailureKind.TEST_FAILURE, "t1")) != verdict(
        result(FailureKind.TEST_FAILURE)
    )
    assert verdict(result(timeout)) != verdict(result(FailureKind.TEST_FAILURE))


def test_a_difference_with_a_timeout_is_graded_again_with_more_time_before_it_counts() -> None:
    """A cold run killed at the limit while the warm one failed its tests (a slow candidate on a
    busy machine) is graded again on both paths; what the second grading says is the verdict.
    A difference without a timeout, or with one on both sides, is not graded again."""
    from rcb_env.grading.models import GradeResult
    from rcb_env.validation.equivalence import regrade_timeouts, verdict
    from rcb_env.verdicts import FailureKind, Outcome

    def result(kind: FailureKind) -> GradeResult:
        return GradeResult(
            snippet_id="p/s",
            outcome=Outcome.PASSED if kind is FailureKind.NONE else Outcome.FAILED,
            kind=kind,
            official_pass=kind is FailureKind.NONE,
            timed_out=kind is FailureKind.TIMEOUT,
        )

    timeout, failure, none = FailureKind.TIMEOUT, FailureKind.TEST_FAILURE, FailureKind.NONE
    cases: list[Any] = [("slow", i) for i in range(4)]
    results = {
        False: [result(timeout), result(failure), result(timeout), result(none)],
        True: [result(failure), result(none), result(timeout), result(timeout)],
    }
    again: list[tuple[bool, Any]] = []

    def grade(warm: bool, case: Any) -> GradeResult:
        again.append((warm, case))
        # with time to spare, case 0 fails its tests on both paths; case 3 passes only cold
        return result(none if case == ("slow", 3) and not warm else failure)

    assert regrade_timeouts(cases, results, grade) == [0, 3]
    assert sorted(again) == sorted((w, cases[i]) for w in (False, True) for i in (0, 3))
    assert verdict(results[False][0]) == verdict(results[True][0])  # load, not the path
    assert verdict(results[False][1]) != verdict(results[True][1])  # never timed out: kept
    assert verdict(results[False][2]) == verdict(results[True][2])  # both timed out: no retry
    assert verdict(results[False][3]) != verdict(results[True][3])  # the path's: still differs
