"""rcb-env's test runner. Runs INSIDE the task interpreter, so it imports only the standard library
and keeps to syntax older Pythons accept.

Usage: ``python _runner.py TEST_FILE REPORT_FILE [MEMORY_BYTES FSIZE_BYTES CPU_SECONDS]``

It behaves like ``python TEST_FILE`` (same ``__main__``, argv, ``sys.path[0]`` and output, so the
official output rule still reads the same text), except that ``unittest.main`` is replaced by a
function that runs the discovered tests with a result class reporting each test's outcome to
REPORT_FILE as JSON lines. A ``done`` line is written only when the test program finishes; a file
that exits early leaves none.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import runpy
import sys
import traceback
import types
import unittest
from typing import Any

_report_fd = -1
_main_calls = 0


def _emit(event: dict[str, Any]) -> None:
    data = (json.dumps(event) + "\n").encode("utf-8", "replace")
    os.write(_report_fd, data)


def _frames(tb: types.TracebackType | None) -> list[tuple[str, int]]:
    return [(os.path.abspath(f.filename), f.lineno or 0) for f in traceback.extract_tb(tb)]


def _describe(exc_info: tuple[Any, Any, Any]) -> dict[str, Any]:
    etype, value, tb = exc_info
    text = "".join(traceback.format_exception(etype, value, tb))
    info: dict[str, Any] = {
        "exc_type": getattr(etype, "__name__", str(etype)),
        "message": text[-4000:],
        "frames": _frames(tb),
    }
    if isinstance(value, ImportError):
        info["import_name"] = value.name
    if isinstance(value, SyntaxError):
        info["frames"].append((os.path.abspath(value.filename or ""), value.lineno or 0))
    return info


class _ReportingResult(unittest.TextTestResult):
    def _report(self, test: unittest.TestCase, status: str, err: Any = None) -> None:
        event: dict[str, Any] = {"event": "test", "id": _test_id(test), "status": status}
        if err is not None:
            event.update(_describe(err))
        _emit(event)

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._report(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._report(test, "failed", err)

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._report(test, "error", err)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        _emit({"event": "test", "id": _test_id(test), "status": "skipped", "message": reason})

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._report(test, "expected_failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._report(test, "unexpected_success")

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            status = "failed" if issubclass(err[0], test.failureException) else "error"
            self._report(test, status, err)


def _test_id(test: Any) -> str:
    method = getattr(test, "_testMethodName", None)
    if method is None:  # e.g. a _ErrorHolder for a failing setUpClass
        return str(getattr(test, "description", test))
    name: str = type(test).__name__ + "." + str(method)
    return name


class _Program:
    def __init__(self, result: unittest.TestResult) -> None:
        self.result = result


def _main(
    module: Any = "__main__",
    defaultTest: Any = None,
    argv: Any = None,  # noqa: ARG001 - part of unittest.main's signature
    testRunner: Any = None,
    testLoader: Any = None,
    exit: bool = True,
    verbosity: int = 1,
    **_ignored: Any,
) -> _Program:
    """Stand-in for ``unittest.main``: same discovery and output, our result channel."""
    global _main_calls
    _main_calls += 1
    if isinstance(module, str):
        module = sys.modules[module]
    loader = testLoader or unittest.defaultTestLoader
    if defaultTest is None:
        suite = loader.loadTestsFromModule(module)
    else:
        names = [defaultTest] if isinstance(defaultTest, str) else list(defaultTest)
        suite = loader.loadTestsFromNames(names, module)
    runner = testRunner or unittest.TextTestRunner(stream=sys.stderr, verbosity=verbosity)
    if isinstance(runner, type):
        runner = runner(verbosity=verbosity)
    result = runner.run(suite)
    _emit({"event": "main_done", "tests_run": result.testsRun, "ok": result.wasSuccessful()})
    if exit:
        sys.exit(not result.wasSuccessful())
    return _Program(result)


def _limit(kind: int, value: int) -> None:
    if value <= 0:
        return
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(kind, (value, value))


def run() -> int:
    global _report_fd
    test_file, report_path = sys.argv[1], sys.argv[2]
    if len(sys.argv) >= 6:
        _limit(resource.RLIMIT_AS, int(sys.argv[3]))
        _limit(resource.RLIMIT_FSIZE, int(sys.argv[4]))
        _limit(resource.RLIMIT_CPU, int(sys.argv[5]))
        _limit(resource.RLIMIT_CORE, 0)
    _report_fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    _emit({"event": "start", "pid": os.getpid(), "python": sys.version.split()[0]})
    here = os.getcwd()
    sys.argv = [test_file]
    sys.path[0] = here
    unittest.main = _main  # type: ignore[assignment]
    # Test files that build their own TextTestRunner still report through our result class.
    unittest.TextTestRunner.resultclass = _ReportingResult  # type: ignore[assignment]
    code = 0
    try:
        runpy.run_path(os.path.join(here, test_file), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        event = {"event": "script_error"}
        event.update(_describe(sys.exc_info()))
        _emit(event)
        traceback.print_exc()
        code = 1
    _emit({"event": "done", "code": code, "main_calls": _main_calls})
    return code


if __name__ == "__main__":
    sys.exit(run())
