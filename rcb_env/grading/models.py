"""Typed grading results. A failed test is a result; an unrunnable grader is an infra outcome.

The vocabulary (:class:`Outcome`, :class:`FailureKind`, :class:`TestStatus`,
:class:`TestOutcome`) lives in the leaf :mod:`rcb_env.verdicts`."""

from __future__ import annotations

from rcb_env.frozen import Frozen
from rcb_env.verdicts import FailureKind, Outcome, TestOutcome

__all__ = ["GradeResult"]


class GradeResult(Frozen):
    """The verdict on one candidate body for one snippet."""

    snippet_id: str
    """``<paper>/<snippet name>``."""
    outcome: Outcome
    """passed / failed / infra_error."""
    kind: FailureKind
    """Why it did not pass."""
    detail: str = ""
    """One human-readable sentence on the verdict."""
    official_pass: bool
    """The official harness's rule on the same run: exit 0 and no error words in the output."""
    tests: tuple[TestOutcome, ...] = ()
    """Per-test outcomes (defined-but-unreported tests appear as ``missing``)."""
    exit_code: int | None = None
    """Exit status of the test process."""
    timed_out: bool = False
    """Killed at the wall-clock limit."""
    duration_s: float = 0.0
    """Wall-clock time of the test run."""
    stdout: str = ""
    """Truncated standard output."""
    stderr: str = ""
    """Truncated standard error."""
    attempts: int = 1
    """Test runs this verdict took: a run killed from outside is retried."""
    discarded: tuple[str, ...] = ()
    """Why each earlier attempt was not used (e.g. killed by the host's OOM killer)."""
    grading_path: str = "cold"
    """``warm`` (forked from the paper's warm process), ``cold`` (a fresh interpreter), or
    ``cold: <why>`` when the warm path was meant but could not be used."""

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

    @property
    def is_infra_error(self) -> bool:
        return self.outcome is Outcome.INFRA_ERROR
