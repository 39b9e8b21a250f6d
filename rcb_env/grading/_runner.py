"""rcb-env's test runner. Runs INSIDE the task interpreter, so it imports only the standard library
and keeps to syntax older Pythons accept.

Usage: ``python _runner.py TEST_FILE REPORT_FILE KEY_FILE [MEMORY_BYTES FSIZE_BYTES CPU_SECONDS
[CANDIDATE_FILE [PROTECTED_LIST]]]`` (PROTECTED_LIST: a file naming, one per line, the paths the
task declares hidden, relative to the working folder; a line ``keep<TAB>path`` names a file the
tests read later, which stays on the disk but is never readable by the code under test)

It behaves like ``python TEST_FILE`` run in the working folder (same ``__main__``, argv,
``sys.path[0]`` = the test file's folder, and output, so the official output rule still reads
the same text), except that ``unittest.main`` is replaced by a
function that runs the discovered tests with a result class reporting each test's outcome to
REPORT_FILE as JSON lines. A ``done`` line is written only when the test program finishes; a file
that exits early leaves none.

The tested code runs in this process, so the channel is hardened rather than trusted: every line
is numbered and signed (HMAC-SHA256 with a key read from KEY_FILE, which is deleted before any
test code is imported), and the callables a verdict depends on (unittest's modules and classes,
builtins, the test classes' methods, numpy/torch/math comparison functions, this runner's own
functions) are snapshotted and checked after every test; a change is reported as tampering.

The answer is in this folder too (the reference copies the tests compare against), so an audit
hook guards it: while code of CANDIDATE_FILE is on the stack, or in any thread but the main one,
the test file, every ``*_ref.py`` and every declared hidden path cannot be opened (by any path:
``../``, ``/proc/self/cwd``, symlinks, hard links; matched by inode), linked, renamed or
removed, and no program can be started. Once the test module is loaded (``unittest.main`` or the
first test), those files leave the disk (their modules are held, and their sources kept in
memory, for the tests' own later imports, which get the same module objects back), the
reference modules leave ``sys.modules`` (the tests keep what they imported) and ``__main__`` is
a blank module; from then on tested code may start programs, which find nothing to read. Code
that specifically targets this runner's internals (walking frames or the garbage collector to
the tests' objects, forging code objects' file names, ctypes) is out of scope: see the threat
model (docs/threat-model.md).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import hmac
import importlib
import importlib.abc
import importlib.util
import json
import linecache
import os
import resource
import runpy
import sys
import threading
import traceback
import types
import unittest
from collections.abc import Callable
from typing import Any

_report_fd = -1
_main_calls = 0
_seq = [0]
#: (st_dev, st_ino) of the files tested code must not touch, and their paths
_protected_ids: set[tuple[int, int]] = set()
_protected_paths: set[str] = set()
#: the protected files themselves (one absolute path each), and the sources of the references
_protected_files: list[str] = []
_sources: dict[str, bytes] = {}
#: Modules loaded from protected files before the seal, by name: a test's later ``import`` of
#: one gets this very object back (tests set module globals that functions imported earlier
#: read), while tested code is refused.
_held: dict[str, Any] = {}
#: Names of the modules served from ``_sources`` after the seal (see _MemoryFinder)
_served: set[str] = set()
#: set once the test module is loaded and the protected files are off the disk
_sealed = [False]
_bypass = [False]
#: co_filename values of the candidate's file
_candidate_names: set[str] = set()
#: protected files left on the disk for the tests (fixtures): the candidate never starts a program
_kept: list[str] = []
#: ``option<TAB>watch-logging`` in the protected list: the tests report through their own log
#: (LMR-Bench), so the logging configuration is part of the verdict and must not change
#: while a test runs.
_options: set[str] = set()
_logging_state: list[Any] = []
_GUARDED_PATHS = {"open", "os.link", "os.symlink", "os.rename", "os.remove", "os.truncate"}
_SPAWN = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn"}


def _unsigned(_line: bytes) -> bytes:
    raise RuntimeError("the report key was not read")


_sign: Callable[[bytes], bytes] = _unsigned
_MISSING = object()
#: (label, object, only these names or None, snapshot: name -> (value, code object or None))
_watched: list[tuple[str, Any, tuple[str, ...] | None, dict[str, tuple[Any, Any]]]] = []
_WATCHED_LIBS = ("numpy", "numpy.testing", "torch", "torch.testing", "math", "cmath")
_LIB_NAMES = (
    "allclose",
    "isclose",
    "array_equal",
    "array_equiv",
    "equal",
    "assert_allclose",
    "assert_array_equal",
    "assert_array_almost_equal",
    "assert_almost_equal",
    "assert_equal",
    "assert_close",
    "isnan",
    "isinf",
    "isfinite",
    "all",
    "any",
    "abs",
    "testing",
)


# Event names of the signed report, shared with the host-side reader (rcb_env.grading.report).
EV_START = "start"
EV_TEST = "test"
EV_TAMPER = "tamper"
EV_MAIN_DONE = "main_done"
EV_SCRIPT_ERROR = "script_error"
EV_DONE = "done"


def _make_signer(key: bytes) -> Callable[[bytes], bytes]:
    def sign(line: bytes) -> bytes:
        return hmac.new(key, line, hashlib.sha256).hexdigest().encode()

    return sign


def _emit(event: dict[str, Any]) -> None:
    _seq[0] += 1
    line = json.dumps(dict(event, seq=_seq[0])).encode("utf-8", "replace")
    os.write(_report_fd, _sign(line) + b" " + line + b"\n")


def _is_protected(path: Any) -> bool:
    if isinstance(path, int) or path is None:
        return False
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return False
    return (st.st_dev, st.st_ino) in _protected_ids


def _holds_protected(path: Any) -> bool:
    """Is ``path`` a folder above a protected file?"""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False
    try:
        folder = os.path.realpath(os.fsdecode(path)).rstrip(os.sep) + os.sep
    except (TypeError, ValueError):
        return False
    return any(p.startswith(folder) for p in _protected_paths)


def _candidate_running() -> bool:
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename in _candidate_names:
            return True
        frame = frame.f_back
    return False


def _refused(what: Any) -> PermissionError:
    return PermissionError(f"rcb-env: {what} is off limits to the code under test")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _bypass[0]:
        return
    if event in _GUARDED_PATHS:
        if event != "open" and _holds_protected(args[0]):
            raise _refused(args[0])  # moving a folder would move the files under our check
        if not _is_protected(args[0]):
            return
        if event != "open" or threading.current_thread() is not threading.main_thread():
            raise _refused(args[0])
        if _candidate_running():
            raise _refused(args[0])
    elif event in _SPAWN and (not _sealed[0] or _kept) and _candidate_running():
        # While protected files are on the disk, another program could read them.
        raise PermissionError("rcb-env: the code under test may not start programs yet")


class _MemoryFinder(importlib.abc.MetaPathFinder):
    """Serves the tests' own imports of protected modules once their files are gone: the module
    object loaded before (held), else the source kept in memory; refuses tested code and other
    threads."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        held = _held.get(fullname)
        if held is not None:
            self._check(fullname)
            origin = getattr(held, "__file__", None)
            return importlib.util.spec_from_loader(fullname, _HeldLoader(held), origin=origin)
        last = fullname.rpartition(".")[2]
        for folder in path or sys.path:
            base = os.path.abspath(os.path.join(folder or ".", last))
            for candidate, package in (
                (base + ".py", False),
                (os.path.join(base, "__init__.py"), True),
            ):
                if candidate in _sources:
                    self._check(fullname)
                    _served.add(fullname)
                    return importlib.util.spec_from_loader(
                        fullname,
                        _MemoryLoader(candidate),
                        origin=candidate,
                        is_package=package,
                    )
        return None

    @staticmethod
    def _check(fullname: str) -> None:
        if threading.current_thread() is not threading.main_thread() or _candidate_running():
            raise _refused(fullname)


class _HeldLoader(importlib.abc.Loader):
    def __init__(self, module: Any) -> None:
        self.module = module

    def create_module(self, spec: Any) -> Any:
        return self.module

    def exec_module(self, module: Any) -> None:
        pass  # already executed, before the seal


class _MemoryLoader(importlib.abc.Loader):
    def __init__(self, path: str) -> None:
        self.path = path

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        module.__file__ = self.path
        if self.path.endswith("__init__.py"):
            module.__path__ = [os.path.dirname(self.path)]
        exec(compile(_sources[self.path], self.path, "exec"), module.__dict__)


def _guard(here: str, test_file: str, candidate: str, declared: list[str]) -> None:
    """Protect the answer (see the module docstring) from here on: the test file (unless it is
    the candidate's own file), every ``*_ref.py``, and every path the task declares hidden
    (``declared``, relative; ``keep<TAB>path``: left on the disk, guarded only)."""
    kept = {
        os.path.abspath(os.path.join(here, rel.split("\t", 1)[1]))
        for rel in declared
        if rel.startswith("keep\t")
    }
    hidden = {os.path.abspath(os.path.join(here, rel)) for rel in declared if "\t" not in rel}
    if os.path.normpath(test_file) != os.path.normpath(candidate or "\0"):
        hidden.add(os.path.abspath(os.path.join(here, test_file)))
    for dirpath, dirnames, filenames in os.walk(here):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            full = os.path.abspath(path)
            if name.endswith("_ref.py") or full in hidden or full in kept:
                with contextlib.suppress(OSError):
                    st = os.stat(path)
                    _protected_ids.add((st.st_dev, st.st_ino))
                    _protected_paths.update({full, os.path.realpath(path)})
                    (_kept if full in kept and full not in hidden else _protected_files).append(
                        full
                    )
    if candidate:
        full = os.path.join(here, candidate)
        _candidate_names.update({full, os.path.abspath(full), os.path.realpath(full)})
    if hasattr(sys, "addaudithook"):
        sys.addaudithook(_audit)
    builtins.__import__ = _import


_original_import = builtins.__import__


def _import(
    name: str,
    globals: Any = None,
    locals: Any = None,
    fromlist: Any = (),
    level: int = 0,
) -> Any:
    """``__import__``, except that once sealed, a reference module the tests import again
    does not stay in ``sys.modules`` (where tested code could pick it up without a file).
    Once the files are off the disk, only :class:`_MemoryFinder` can load one (a held module or
    a source in memory), so those names are the ones to drop: a constant cost per import (code
    that imports inside hot functions, as torch does, would otherwise pay for every module)."""
    module = _original_import(name, globals, locals, fromlist, level)
    if _sealed[0]:
        for key in (*_held, *_served):
            sys.modules.pop(key, None)
    return module


def _forget_protected() -> None:
    """Drop the protected files' lines from linecache (a traceback may have cached them), so
    that tested code cannot read them without opening the file."""
    for path in list(linecache.cache):
        if path in _protected_paths or os.path.abspath(path) in _protected_paths:
            linecache.cache.pop(path, None)


def _seal(test_module: Any = None) -> None:
    """Once the test module is loaded: take the protected files off the disk (keeping the
    references' sources in memory for the tests' own later imports), drop the reference modules
    from ``sys.modules`` and blank ``__main__``. From then on no program started by tested code
    can read them either."""
    if _sealed[0]:
        return
    _bypass[0] = True
    try:
        for path in _protected_files:
            with contextlib.suppress(OSError):
                if path.endswith(".py"):
                    with open(path, "rb") as f:
                        _sources[path] = f.read()
                os.unlink(path)
    finally:
        _bypass[0] = False
    sys.meta_path.insert(0, _MemoryFinder())
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if origin and os.path.abspath(origin) in _protected_paths and module is not test_module:
            _held[name] = module
            sys.modules.pop(name, None)
    if test_module is not None and sys.modules.get("__main__") is test_module:
        sys.modules["__main__"] = types.ModuleType("__main__")
    _forget_protected()
    _sealed[0] = True


def _snapshot(obj: Any, names: tuple[str, ...] | None) -> dict[str, tuple[Any, Any]]:
    try:
        members = dict(vars(obj))
    except TypeError:
        return {}
    if names is not None:
        members = {n: members[n] for n in names if n in members}
    # Callables only: tests may legitimately change data (class attributes, caches).
    return {
        n: (v, getattr(v, "__code__", None))
        for n, v in members.items()
        if callable(v) or isinstance(v, (staticmethod, classmethod, types.ModuleType))
    }


def _watch(label: str, obj: Any, names: tuple[str, ...] | None = None) -> None:
    snap = _snapshot(obj, names)
    _watched.append((label, obj, names, snap))
    for name, (value, _code) in snap.items():
        if isinstance(value, type) and value.__module__ == getattr(obj, "__name__", None):
            _watched.append((f"{label}.{name}", value, None, _snapshot(value, None)))


def _tampered() -> list[str]:
    moved = []
    for label, obj, _names, snap in _watched:
        try:
            now = dict(vars(obj))
        except TypeError:
            continue
        for name, (value, code) in snap.items():
            current = now.get(name, _MISSING)
            if current is not value or getattr(current, "__code__", None) is not code:
                moved.append(f"{label}.{name}")
    return moved


def _check(where: str) -> None:
    moved = _tampered()
    if moved:
        _emit({"event": EV_TAMPER, "where": where, "what": sorted(set(moved))[:20]})


def _describe(exc_info: tuple[Any, Any, Any]) -> dict[str, Any]:
    etype, value, tb = exc_info
    text = "".join(traceback.format_exception(etype, value, tb))
    info: dict[str, Any] = {
        "exc_type": getattr(etype, "__name__", str(etype)),
        "message": text[-4000:],
    }
    if isinstance(value, ImportError):
        info["import_name"] = value.name
    return info


def _test_id(test: Any) -> str:
    method = getattr(test, "_testMethodName", None)
    if method is None:  # e.g. a _ErrorHolder for a failing setUpClass
        return str(getattr(test, "description", test))
    name: str = type(test).__name__ + "." + str(method)
    return name


def _logging_snapshot() -> Any:
    """What decides which log records reach the log file: levels, filters, handlers and their
    streams (identities, so a swapped list or stream shows)."""
    import logging

    root = logging.getLogger()
    handlers = tuple(root.handlers)
    return (
        root.level,
        logging.root.manager.disable,
        tuple(root.filters),
        handlers,
        tuple(
            (h.level, tuple(h.filters), id(getattr(h, "stream", None)), id(h.formatter))
            for h in handlers
        ),
        root.disabled,
    )


class _ReportingResult(unittest.TextTestResult):
    def startTest(self, test: unittest.TestCase) -> None:
        _seal(sys.modules.get("__main__"))
        if "watch-logging" in _options:
            _logging_state[:] = [_logging_snapshot()]
        super().startTest(test)

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        _forget_protected()  # a failure's traceback may have cached a reference's lines
        if _logging_state and _logging_snapshot() != _logging_state[0]:
            _emit(
                {
                    "event": EV_TAMPER,
                    "where": _test_id(test),
                    "what": ["the logging configuration (levels, filters, handlers)"],
                }
            )
        _check(_test_id(test))

    def _report(self, test: unittest.TestCase, status: str, err: Any = None) -> None:
        event: dict[str, Any] = {"event": EV_TEST, "id": _test_id(test), "status": status}
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
        _emit({"event": EV_TEST, "id": _test_id(test), "status": "skipped", "message": reason})

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
    for value in list(vars(module).values()):
        if isinstance(value, type) and issubclass(value, unittest.TestCase):
            _watch(f"testclass.{value.__name__}", value)
    _check("test module import")
    _seal(module)
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
    _emit({"event": EV_MAIN_DONE, "tests_run": result.testsRun, "ok": result.wasSuccessful()})
    if exit:
        sys.exit(not result.wasSuccessful())
    return _Program(result)


def _close_keyrings() -> None:
    """Run :func:`keyrings.close_keyrings` from the copy of ``rcb_env/sandbox/_keyrings.py``
    that the grader puts beside this file (one source for the grading runs and the sandboxes'
    shells): an empty session keyring of the run's own, and no keyring system call."""
    here = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(here, "keyrings.py"))["close_keyrings"]()


def _limit(kind: int, value: int) -> None:
    if value <= 0:
        return
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(kind, (value, value))


def _imported_modules(path: str) -> list[str]:
    """Top-level modules a file imports (the comparison libraries to pre-import and watch)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module.split(".")[0])
    return names


def run() -> int:
    global _report_fd, _sign
    test_file, report_path, key_path = sys.argv[1], sys.argv[2], sys.argv[3]
    # The key leaves the disk before any code under test exists.
    with open(key_path, "rb") as f:
        _sign = _make_signer(f.read().strip())
    os.unlink(key_path)
    _close_keyrings()
    if len(sys.argv) >= 7:
        _limit(resource.RLIMIT_AS, int(sys.argv[4]))
        _limit(resource.RLIMIT_FSIZE, int(sys.argv[5]))
        _limit(resource.RLIMIT_CPU, int(sys.argv[6]))
        _limit(resource.RLIMIT_CORE, 0)
    _report_fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    _emit({"event": EV_START, "pid": os.getpid(), "python": sys.version.split()[0]})
    here = os.getcwd()
    declared: list[str] = []
    if len(sys.argv) >= 9 and sys.argv[8]:
        with open(sys.argv[8], encoding="utf-8") as f:
            declared = [line.rstrip("\n") for line in f if line.strip()]
        _options.update(d.split("\t", 1)[1] for d in declared if d.startswith("option\t"))
        declared = [d for d in declared if not d.startswith("option\t")]
    _guard(here, test_file, sys.argv[7] if len(sys.argv) >= 8 else "", declared)
    unittest.main = _main  # type: ignore[assignment]
    # Test files that build their own TextTestRunner still report through our result class.
    unittest.TextTestRunner.resultclass = _ReportingResult  # type: ignore[assignment]
    # Snapshot what verdicts depend on, after our own changes and before any tested code runs.
    for name in (
        "unittest.case",
        "unittest.result",
        "unittest.runner",
        "unittest.loader",
        "unittest.suite",
        "unittest.main",
        "unittest",
    ):
        _watch(name, importlib.import_module(name))
    _watch("builtins", builtins)
    _watch("runner", sys.modules[__name__])
    if "watch-logging" in _options:
        import logging

        _watch("logging", logging)  # its functions, and its classes' methods
    wanted = set(_imported_modules(test_file)) | {"math", "cmath"}  # stdlib: always cheap
    for name in _WATCHED_LIBS:
        if name.split(".")[0] in wanted:
            # A missing library is the test's problem, reported there.
            with contextlib.suppress(Exception):
                _watch(name, importlib.import_module(name), _LIB_NAMES)
    sys.argv = [test_file]
    sys.path[0] = os.path.dirname(os.path.abspath(os.path.join(here, test_file)))
    code = 0
    try:
        runpy.run_path(os.path.join(here, test_file), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        event = {"event": EV_SCRIPT_ERROR}
        event.update(_describe(sys.exc_info()))
        _emit(event)
        traceback.print_exc()
        code = 1
    _check("end")
    _emit({"event": EV_DONE, "code": code, "main_calls": _main_calls})
    return code


if __name__ == "__main__":
    sys.exit(run())
