"""The verdict: from the runner's verified events, the process's end and the static test list to
passed / failed / infrastructure, with the reason. A failed test is a result; a broken
environment is not."""

from __future__ import annotations

from typing import Any

from rcb_env.execution import ExecResult
from rcb_env.guest import protocol
from rcb_env.verdicts import FailureKind, Outcome, TestOutcome, TestStatus, Verdict

__all__ = ["Verdict", "classify"]


def classify(
    events: list[dict[str, Any]],
    run: ExecResult,
    expected: tuple[str, ...],
) -> Verdict:
    """Decide the verdict from the runner's events, the process's end and the static test list
    (the rules: :func:`rcb_env.guest.protocol.classify`)."""
    outcome, kind, detail, tests = protocol.classify(
        events,
        {
            "exit_code": run.exit_code,
            "signal": run.signal,
            "timed_out": run.timed_out,
            "stderr": run.stderr,
            "oom_killed": run.oom_killed,
            "host_oom": run.host_oom,
        },
        list(expected),
    )
    return Verdict(
        Outcome(outcome),
        FailureKind(kind),
        detail,
        tuple(TestOutcome(name=n, status=TestStatus(s), message=m) for n, s, m in tests),
    )
