"""The verdict: from the runner's verified events, the process's end and the static test list to
passed / failed / infrastructure, with the reason. A failed test is a result; a broken
environment is not."""

from __future__ import annotations

import signal
from typing import Any

from rcb_env.execution import ExecResult
from rcb_env.grading.report import (
    EV_DONE,
    EV_FORGED,
    EV_SCRIPT_ERROR,
    EV_START,
    EV_TAMPER,
    EV_TEST,
)
from rcb_env.verdicts import FailureKind, Outcome, TestOutcome, TestStatus, Verdict

__all__ = ["Verdict", "classify"]

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


_STATUS_RANK = {
    TestStatus.PASSED: 0,
    TestStatus.EXPECTED_FAILURE: 0,
    TestStatus.SKIPPED: 1,
    TestStatus.MISSING: 2,
    TestStatus.UNEXPECTED_SUCCESS: 3,
    TestStatus.FAILED: 4,
    TestStatus.ERROR: 5,
}


def classify(
    events: list[dict[str, Any]],
    run: ExecResult,
    expected: tuple[str, ...],
) -> Verdict:
    """Decide the verdict from the runner's events, the process's end and the static test list."""
    statuses: dict[str, tuple[TestStatus, str]] = {}
    import_failures: list[str] = []
    script_error: dict[str, Any] | None = None
    started = done = False
    tampering: list[str] = []
    for e in events:
        kind = e.get("event")
        if kind == EV_FORGED:
            tampering.append(str(e.get("why") or "a report line not written by the runner"))
        elif kind == EV_TAMPER:
            tampering.append(f"{', '.join(e.get('what', []))[:300]} changed ({e.get('where')})")
        elif kind == EV_START:
            started = True
        elif kind == EV_DONE:
            done = True
        elif kind == EV_TEST:
            try:
                status = TestStatus(str(e.get("status")))
            except ValueError:
                continue
            name = str(e.get("id"))
            previous = statuses.get(name)
            if previous is None or _STATUS_RANK[status] >= _STATUS_RANK[previous[0]]:
                statuses[name] = (status, str(e.get("message", ""))[-2000:])
            if e.get("exc_type") in _IMPORT_ERRORS:
                import_failures.append(str(e.get("import_name") or e.get("message", ""))[:200])
        elif kind == EV_SCRIPT_ERROR:
            script_error = e
            if e.get("exc_type") in _IMPORT_ERRORS:
                import_failures.append(str(e.get("import_name") or e.get("message", ""))[:200])
    for name in expected:
        statuses.setdefault(name, (TestStatus.MISSING, ""))
    tests = tuple(TestOutcome(name=n, status=s, message=m) for n, (s, m) in statuses.items())

    if tampering:
        return Verdict(Outcome.FAILED, FailureKind.TAMPERING, f"tampering: {tampering[0]}", tests)
    if run.timed_out:
        return Verdict(Outcome.FAILED, FailureKind.TIMEOUT, "killed at the wall-clock limit", tests)
    if not started:
        if run.host_oom:  # the host's OOM killer, before the runner could start: retried
            return Verdict(
                Outcome.INFRA_ERROR,
                FailureKind.HOST_OOM,
                "killed by the kernel's OOM killer before the runner started, although the "
                "sandbox's memory limit was not reached: memory ran out outside the sandbox",
                tests,
            )
        return Verdict(
            Outcome.INFRA_ERROR,
            FailureKind.RUNNER_CRASH,
            f"the runner did not start (exit {run.exit_code}, signal {run.signal}): "
            f"{run.stderr.strip()[-300:]}",
            tests,
        )
    if run.oom_killed:
        return Verdict(
            Outcome.FAILED,
            FailureKind.MEMORY_LIMIT,
            "the sandbox's memory limit was reached; the kernel killed the test process",
            tests,
        )
    if run.host_oom:
        return Verdict(
            Outcome.INFRA_ERROR,
            FailureKind.HOST_OOM,
            "killed by the kernel's OOM killer although the sandbox's memory limit was not "
            "reached: memory ran out outside the sandbox",
            tests,
        )
    # Sandboxes report a killed child as exit status 128 + signal (bwrap, docker).
    killed_by = run.signal
    if killed_by is None and not done and run.exit_code is not None and 128 < run.exit_code < 160:
        killed_by = run.exit_code - 128
    if killed_by is not None:
        if killed_by == signal.SIGXCPU:
            return Verdict(Outcome.FAILED, FailureKind.TIMEOUT, "CPU-time limit exceeded", tests)
        if killed_by == signal.SIGXFSZ:
            return Verdict(
                Outcome.FAILED, FailureKind.EARLY_EXIT, "file-size limit exceeded", tests
            )
        return Verdict(
            Outcome.INFRA_ERROR,
            FailureKind.KILLED,
            f"test process killed by {_signal_name(killed_by)}, which neither rcb-env nor the "
            "sandbox's limits sent",
            tests,
        )
    if import_failures:
        return Verdict(
            Outcome.INFRA_ERROR,
            FailureKind.MISSING_DEPENDENCY,
            f"import failed: {import_failures[0]}",
            tests,
        )
    if script_error is not None:
        msg = str(script_error.get("message", "")).strip().splitlines()
        return Verdict(
            Outcome.FAILED,
            FailureKind.LOAD_ERROR,
            f"{script_error.get('exc_type')} before the tests finished: {msg[-1] if msg else ''}",
            tests,
        )
    if not done:
        return Verdict(
            Outcome.FAILED,
            FailureKind.EARLY_EXIT,
            "process exited before the tests finished",
            tests,
        )
    bad = [
        t
        for t in tests
        if t.status in (TestStatus.FAILED, TestStatus.ERROR, TestStatus.UNEXPECTED_SUCCESS)
    ]
    if bad:
        return Verdict(
            Outcome.FAILED,
            FailureKind.TEST_FAILURE,
            f"{len(bad)} of {len(tests)} tests failed: " + ", ".join(t.name for t in bad[:5]),
            tests,
        )
    unpassed = [
        n
        for n in expected
        if statuses[n][0] not in (TestStatus.PASSED, TestStatus.EXPECTED_FAILURE)
    ]
    if unpassed:
        return Verdict(
            Outcome.FAILED,
            FailureKind.MISSING_TESTS,
            f"{len(unpassed)} defined tests did not pass: " + ", ".join(unpassed[:5]),
            tests,
        )
    if run.exit_code != 0:
        return Verdict(
            Outcome.FAILED, FailureKind.NONZERO_EXIT, f"exit status {run.exit_code}", tests
        )
    return Verdict(Outcome.PASSED, FailureKind.NONE, f"{len(tests)} tests passed", tests)


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return f"signal {number}"
