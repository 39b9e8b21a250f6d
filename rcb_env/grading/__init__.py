"""Stage: grading. A candidate body in, a typed verdict out.

``discovery`` finds the tests a file defines, ``report`` reads the runner's signed channel,
``verdict`` classifies a run, ``grader`` puts them together around a sandboxed executor.
"""

from rcb_env.grading.discovery import expected_tests
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.grading.models import FailureKind, GradeResult, Outcome, TestOutcome, TestStatus
from rcb_env.grading.verdict import Verdict, classify

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
