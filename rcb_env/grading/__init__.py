"""Stage: grading. A candidate body in, a typed verdict out."""

from rcb_env.grading.grader import Grader, GradingConfig, classify, expected_tests
from rcb_env.grading.models import FailureKind, GradeResult, Outcome, TestOutcome, TestStatus

__all__ = [
    "FailureKind",
    "GradeResult",
    "Grader",
    "GradingConfig",
    "Outcome",
    "TestOutcome",
    "TestStatus",
    "classify",
    "expected_tests",
]
