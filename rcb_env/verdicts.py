"""The grading vocabulary every stage shares: a run's outcome, why it did not pass, each test's
outcome, and the verdict (task sources refine a verdict: :meth:`TaskSource.judge`). Values only;
:mod:`rcb_env.grading` decides them."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from rcb_env.frozen import Frozen

__all__ = ["FailureKind", "Outcome", "TestOutcome", "TestStatus", "Verdict"]


class Outcome(StrEnum):
    """What a grading run says about the candidate."""

    PASSED = "passed"
    """Every test the file defines passed, and the program finished normally."""
    FAILED = "failed"
    """The code is wrong: an assertion, an exception, a syntax error, a timeout, an early exit."""
    INFRA_ERROR = "infra_error"
    """The environment is broken (missing dependency, runner crash); never scored as 0."""


class FailureKind(StrEnum):
    """Why a run did not pass (``none`` when it did)."""

    NONE = "none"
    TEST_FAILURE = "test_failure"
    """At least one test failed or raised."""
    LOAD_ERROR = "load_error"
    """The test program raised before its tests ran (syntax error, exception at import)."""
    TIMEOUT = "timeout"
    """Wall-clock limit exceeded; the whole process group was killed."""
    EARLY_EXIT = "early_exit"
    """The process ended before the test program finished (``os._exit``, ``sys.exit``)."""
    MISSING_TESTS = "missing_tests"
    """Fewer tests passed than the file defines (skipped, never run, or not reported)."""
    POLICY = "policy"
    """The body reaches for the interpreter's machinery instead of computing (reflection, the
    test framework's control flow, a value that decides its own comparisons, a shared library
    rebound): refused before it runs (:mod:`rcb_env.guest.policy`)."""
    TAMPERING = "tampering"
    """The report channel was written by someone else, or a callable the verdict depends on
    (unittest, builtins, the tests, comparison functions) was replaced."""
    LOG_FAILURE = "log_failure"
    """Everything else passed, but the test's own log (LMR-Bench's per-check "Test Passed" /
    "Test Failed" lines) reports a failed check, or no passed one."""
    NONZERO_EXIT = "nonzero_exit"
    """All tests passed but the process exited with a non-zero status."""
    MEMORY_LIMIT = "memory_limit"
    """The sandbox's own memory limit was reached and the kernel killed the test process."""
    MISSING_DEPENDENCY = "missing_dependency"
    """Infra: an import outside the candidate's code failed."""
    RUNNER_CRASH = "runner_crash"
    """Infra: the interpreter or runner did not start, or died by a signal nobody sent."""
    SANDBOX = "sandbox"
    """Infra: the sandbox failed to set up or to run the command."""
    KILLED = "killed"
    """Infra: the test process was killed by a signal that neither rcb-env nor the sandbox's
    limits sent (an operator, a dying sandbox, the host), on every attempt, and the pristine
    paper is killed too. Retried first; see :attr:`GradingConfig.kill_retries`."""
    REFERENCE_FAILS = "reference_fails"
    """Infra: the candidate failed, and so does the paper's own reference in this environment
    (e.g. it downloads weights at test time with no network): not scored."""
    HOST_OOM = "host_oom"
    """Infra: the kernel's OOM killer killed the test process although the sandbox's own memory
    limit was not reached, i.e. memory ran out outside the sandbox. Retried first."""


class TestStatus(StrEnum):
    __test__ = False  # not a pytest test class

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    EXPECTED_FAILURE = "expected_failure"
    UNEXPECTED_SUCCESS = "unexpected_success"
    MISSING = "missing"
    """Defined in the test file but never reported."""


class TestOutcome(Frozen):
    """One test's outcome, as reported by rcb-env's runner."""

    __test__ = False  # not a pytest test class

    name: str
    """``Class.method``."""
    status: TestStatus
    """What happened."""
    message: str = ""
    """Truncated traceback or skip reason."""


class Verdict(NamedTuple):
    """What a grading run says: outcome, why, a sentence, and each test's outcome."""

    outcome: Outcome
    kind: FailureKind
    detail: str
    tests: tuple[TestOutcome, ...]
