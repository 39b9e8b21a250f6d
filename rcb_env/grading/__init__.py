"""Stage: grading. A candidate body in, a typed verdict out.

``report`` reads the runner's signed channel,
``verdict`` classifies a run, ``grader`` puts them together around a sandboxed executor.
"""

from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.grading.models import GradeResult
from rcb_env.grading.verdict import Verdict, classify
from rcb_env.task.discovery import expected_tests
from rcb_env.verdicts import FailureKind, Outcome, TestOutcome, TestStatus

__all__ = [
    "FailureKind",
    "GradeResult",
    "Grader",
    "GradingConfig",
    "Outcome",
    "TestOutcome",
    "TestStatus",
    "Verdict",
    "classify",
    "expected_tests",
]
