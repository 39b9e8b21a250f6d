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
import operator
import os
import resource
import runpy
import sys
import threading
import traceback
import types
import unittest
from typing import Any

_main_calls = 0
#: (st_dev, st_ino) of the files tested code must not touch, and their paths
_protected_ids: set[tuple[int, int]] = set()
_protected_paths: set[str] = set()
#: the protected files themselves (one absolute path each), and the sources of the references
_protected_files: list[str] = []
#: Paths of the references whose source the vault keeps (their contents only in the vault).
_source_paths: set[str] = set()
#: Modules loaded from protected files before the seal, by name: a test's later ``import`` of
#: one gets this very object back (tests set module globals that functions imported earlier
#: read), while tested code is refused.
_held: set[str] = set()
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


#: The candidate's lines in its file (1-based, inclusive; from the host's ``span`` line in the
#: protected list): a frame of the candidate's file executing one of these is the candidate's
#: code. None: the whole file counts.
_span: list[tuple[int, int]] = []
_MISSING = object()
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


#: Handed over by the warm process this run was forked from (rcb_env/guest/warm_child.py,
#: through the script's initial globals): its copies of every module's namespace, taken after
#: its imports, and a dict changed just before they were taken (``mark``). Moved into the vault
#: by :func:`_start`; nothing else keeps it (the box it came in is emptied).
_warm: list[Any] = [(globals().pop("_rcb_warm", None) or [None]).pop()]
#: From the same: the files beside this one, already compiled, by path (checked there against
#: the files as they are); used by :func:`_run_file`, then forgotten.
_compiled: dict[str, Any] = globals().pop("_rcb_compiled", None) or {}


def _run_file(path: str) -> dict[str, Any]:
    """``runpy.run_path(path)``, from its compiled code when the warm process handed it over."""
    code = _compiled.pop(path, None)
    if code is None:
        return runpy.run_path(path)
    namespace: dict[str, Any] = {"__name__": "<run_path>", "__file__": path}
    exec(code, namespace)
    return namespace


class _DictVersions:
    """Reads dicts' version tags (CPython's ``ma_version_tag``, PEP 509: at every change of a
    dict, a new value of one process-wide counter) from this process's own memory with
    ``process_vm_readv``: neither the dicts nor what they hold are touched. In a run forked from
    a warm process, touching an object copies its memory page: copying every module's namespace
    at the start of a torch run took about 30 ms; reading their tags takes under one. ``None``
    from :meth:`make` where that cannot be relied on (another interpreter, layout or platform,
    the call refused: checked on dicts of its own); the watch then copies and compares every
    namespace itself."""

    _IOV_MAX = 1024

    def __init__(self, call: Any, offset: int) -> None:
        self.call = call
        self.offset = offset

    @classmethod
    def make(cls) -> _DictVersions | None:
        if sys.implementation.name != "cpython" or not sys.platform.startswith("linux"):
            return None
        try:
            import ctypes

            call = ctypes.CDLL(None, use_errno=True).process_vm_readv
        except (ImportError, OSError, AttributeError):
            return None
        call.restype = ctypes.c_ssize_t
        call.argtypes = [
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_ulong,
            ctypes.c_void_p,
            ctypes.c_ulong,
            ctypes.c_ulong,
        ]
        # PyDictObject: the object header, ma_used, then ma_version_tag.
        import array

        reader = cls(call, object.__basicsize__ + 8)
        first, second = {"k": 0}, {"k": 0}
        both = array.array("Q", [id(first), id(second)])
        used = reader.read(both, delta=-8)
        before = reader.read(both)
        first["k"] = 1  # the same key again: neither its size nor its table changes
        middle = reader.read(both)
        second["k"] = 1
        after = reader.read(both)
        if (
            used is None
            or before is None
            or middle is None
            or after is None
            or list(used) != [1, 1]
            or middle[0] == before[0]
            or middle[1] != before[1]
            or not after[1] > middle[0] > before[1]
            or after[0] != middle[0]
        ):
            return None
        return reader

    def read(self, addresses: Any, delta: int = 0) -> Any:
        """The tags of the dicts at ``addresses`` (an ``array('Q')`` of their ``id``; the caller
        keeps them alive), or None if any could not be read."""
        import array

        n = len(addresses)
        out = array.array("Q", bytes(8 * n))
        if n == 0:
            return out
        remote = array.array("Q", [8]) * (2 * n)  # struct iovec: base, length
        remote[0::2] = array.array("Q", [a + self.offset + delta for a in addresses])
        base, far = out.buffer_info()[0], remote.buffer_info()[0]
        pid = os.getpid()
        for i in range(0, n, self._IOV_MAX):
            k = min(self._IOV_MAX, n - i)
            local = array.array("Q", [base + 8 * i, 8 * k])
            if self.call(pid, local.buffer_info()[0], 1, far + 16 * i, k, 0) != 8 * k:
                return None
        return out


# Event names of the signed report, shared with the host-side reader (rcb_env.grading.report).
EV_START = "start"
EV_TEST = "test"
EV_TAMPER = "tamper"
EV_MAIN_DONE = "main_done"
EV_SCRIPT_ERROR = "script_error"
EV_DONE = "done"


def _emit(event: dict[str, Any]) -> None:
    """Hand one event to the vault (:func:`_install_vault`), which numbers, signs and writes it
    if it came from here, from the runner's own code, at a moment it may be said."""
    sys.audit(_EMIT, json.dumps(event))


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


def _process_memory(path: Any) -> bool:
    """Is ``path`` a process's memory (``/proc/<pid>/mem`` and the like), by any spelling?"""
    if not isinstance(path, (str, bytes)):
        return False
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    parts = real.split("/")
    return len(parts) >= 4 and parts[1] == "proc" and parts[-1] in ("mem", "pagemap")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _bypass[0]:
        return
    if event == "open" and _process_memory(args[0]) and _candidate_running():
        raise _refused(args[0])  # writing its own memory would undo every check
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
        if fullname in _held:
            self._check(fullname)
        held = _fetch("module", fullname) if fullname in _held else None
        if held is not None:
            origin = getattr(held, "__file__", None)
            return importlib.util.spec_from_loader(fullname, _HeldLoader(held), origin=origin)
        last = fullname.rpartition(".")[2]
        for folder in path or sys.path:
            base = os.path.abspath(os.path.join(folder or ".", last))
            for candidate, package in (
                (base + ".py", False),
                (os.path.join(base, "__init__.py"), True),
            ):
                if candidate in _source_paths:
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
        exec(compile(_fetch("source", self.path), self.path, "exec"), module.__dict__)


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
    builtins.__build_class__ = _build_class  # type: ignore[assignment]


_original_import = builtins.__import__
_original_build_class = builtins.__build_class__


def _build_class(func: Any, name: str, *bases: Any, **kwargs: Any) -> Any:
    """``class`` statements: one of the candidate's code may not define how its values
    compare, convert or dispatch (a value that lies to the tests' comparisons)."""
    cls = _original_build_class(func, name, *bases, **kwargs)
    if isinstance(cls, type):
        own = type.__dict__["__dict__"].__get__(cls)
        told = sorted(n for n in _LYING if n in own)
        if told and _candidate_frame(sys._getframe(1)):
            raise TypeError(
                f"rcb-env: a class of the code under test may not define {', '.join(told)} "
                "(a value that decides its own comparisons)"
            )
    return cls


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
    if not _strides_bounded and name.startswith("numpy"):
        _bound_as_strided()
    if _sealed[0]:
        for key in (*_held, *_served):
            sys.modules.pop(key, None)
    return module


_strides_bounded: list[Any] = []
_STRIDE_MODULES = ("numpy.lib._stride_tricks_impl", "numpy.lib.stride_tricks")


def _extent(array: Any) -> tuple[int, int]:
    """The bytes an array's elements span: [first, last + item size) (or empty)."""
    start = int(array.__array_interface__["data"][0])
    if array.size == 0:
        return start, start
    low = high = start
    for n, stride in zip(array.shape, array.strides):  # noqa: B905 - older Pythons
        reach = (n - 1) * stride
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low, high + array.itemsize


def _bound_as_strided() -> None:
    """numpy's ``as_strided`` makes a view with any strides, in bounds or not: a way to read and
    write any of the process's memory (the verdict's included). Wherever numpy has it, it is
    replaced by one that refuses a view reaching outside the memory of the array it is made
    from (walked to the array that owns it). Views within it (sliding windows, broadcasting)
    are what they were."""
    for module_name in _STRIDE_MODULES:
        module = sys.modules.get(module_name)
        original = getattr(module, "as_strided", None) if module is not None else None
        if original is None or getattr(original, "_rcb_bounded", False):
            continue
        ndarray = sys.modules["numpy"].ndarray

        def as_strided(
            x: Any,
            shape: Any = None,
            strides: Any = None,
            subok: bool = False,
            writeable: bool = True,
            _original: Any = original,
            _ndarray: Any = ndarray,
        ) -> Any:
            if not isinstance(x, _ndarray):
                x = sys.modules["numpy"].array(x, copy=None, subok=subok)
            view = _original(x, shape, strides, subok, writeable)
            owner = x
            while isinstance(owner, _ndarray) and isinstance(owner.base, _ndarray):
                owner = owner.base
            if view.size:
                low, high = _extent(view)
                first, last = _extent(owner) if isinstance(owner, _ndarray) else (0, 0)
                if low < first or high > last:
                    raise ValueError(
                        "rcb-env: as_strided reaches outside the memory of the array it views"
                    )
            return view

        as_strided._rcb_bounded = True  # type: ignore[attr-defined]
        as_strided.__wrapped__ = original  # type: ignore[attr-defined]
        as_strided.__doc__ = original.__doc__
        module.as_strided = as_strided  # type: ignore[union-attr]
    if all(m in sys.modules for m in _STRIDE_MODULES[1:]):
        _strides_bounded.append(True)


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
                        sys.audit(_KEEP, "source", path, f.read())
                    _source_paths.add(path)
                st = os.stat(path)
                os.unlink(path)
                if st.st_nlink <= 1:
                    # Gone from the disk: a file made later may get its inode number, and is
                    # not the answer.
                    _protected_ids.discard((st.st_dev, st.st_ino))
    finally:
        _bypass[0] = False
    sys.meta_path.insert(0, _MemoryFinder())
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if origin and os.path.abspath(origin) in _protected_paths and module is not test_module:
            sys.audit(_KEEP, "module", name, module)
            _held.add(name)
            sys.modules.pop(name, None)
    if test_module is not None and sys.modules.get("__main__") is test_module:
        sys.modules["__main__"] = types.ModuleType("__main__")
    _forget_protected()
    _sealed[0] = True


# The vault --------------------------------------------------------------------------------
#
# Everything a verdict depends on (the report's key and descriptor, the sequence number, the
# snapshots of what must not change, the test being run and whether its method returned) lives
# in the closure of one audit hook, made by _install_vault before any tested code exists.
# Python code cannot reach an audit hook (no API lists them, and the hook never calls the
# tested code, so its frame is never below the tested code's), so it cannot reach the vault.
# The runner talks to the vault only by raising audit events (_EMIT, _WATCH, ...); the vault
# checks who raised each one (this file's code, by code object, with the candidate's code
# nowhere on the stack, in the main thread) and ignores, or reports as tampering, the rest.
# The same hook refuses the ways to a frame, the garbage collector's object lists, foreign
# functions, new code objects and tracing to the candidate's code (and to library code it
# calls directly): the ways to the vault's own frame, or to anything else's.

_EMIT = "rcb-env.emit"
_WATCH = "rcb-env.watch"
_WATCH_ALL = "rcb-env.watch-modules"
_CHECK = "rcb-env.check"
_RETURNED = "rcb-env.returned"
_STARTED = "rcb-env.started"
#: The references taken off the disk (modules and sources), kept in the vault and handed only
#: to the runner's own import machinery, never with the candidate's code on the stack.
_KEEP = "rcb-env.keep"
_FETCH = "rcb-env.fetch"
_RUNNER_EVENTS = frozenset({_EMIT, _WATCH, _WATCH_ALL, _CHECK, _RETURNED, _STARTED, _KEEP, _FETCH})
#: Events that hand out frames, every object, raw memory or new code: refused to the
#: candidate's code and to whatever it calls directly.
_INTROSPECTION = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "sys._current_exceptions",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "code.__new__",
        "function.__new__",
        "compile",
        "exec",
    }
)
#: Attributes whose reading or writing the interpreter reports (object.__getattr__ /
#: __setattr__), refused likewise: frames, code, and an object's class or a class's bases.
_INTROSPECTION_ATTRIBUTES = frozenset(
    {
        "tb_frame",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "f_code",
        "__code__",
        "__class__",
        "__bases__",
        "__defaults__",
        "__kwdefaults__",
    }
)
#: Methods by which a value decides its own comparisons, conversions or array/tensor
#: dispatch: a class of the candidate's code may not define them (a value that lies). One list
#: with the candidate policy's (``policy.py``, put beside this file by the grader), read by
#: :func:`run` before any tested code exists.
_LYING: frozenset[str] = frozenset()
#: Library functions (by file name) that read their caller's frame for its module name or
#: globals and never hand the frame out: called by the candidate directly, they are allowed.
_FRAME_USERS = {
    "__init__.py": ("namedtuple",),  # collections
    "enum.py": ("_create_", "_convert_"),
    "typing.py": ("_caller",),
}
_VALUE_TYPES: tuple[type, ...] = (
    int,
    float,
    complex,
    str,
    bytes,
    tuple,
    list,
    dict,
    set,
    frozenset,
)
_PLAIN_DATA = (int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set, frozenset)


def _candidate_frame(frame: Any) -> bool:
    """Is ``frame`` executing the candidate's code: its file, at one of its lines?"""
    code = frame.f_code
    if code.co_filename not in _candidate_names:
        return False
    if not _span:
        return True
    line = frame.f_lineno or code.co_firstlineno
    return any(lo <= line <= hi for lo, hi in _span)


def _snapshot(obj: Any, names: tuple[str, ...] | None) -> dict[str, tuple[Any, Any]]:
    try:
        members = dict(vars(obj))
    except TypeError:
        return {}
    if names is not None:
        members = {n: members[n] for n in names if n in members}
    # Callables only: tests may legitimately change data (class attributes, caches). Types are
    # compared, never the values' own methods (which the tested code may have written).
    out = {}
    for n, v in members.items():
        kind = type(v)
        if names is None and issubclass(kind, _PLAIN_DATA):
            continue
        if names is not None:
            out[n] = (v, v.__code__ if kind is types.FunctionType else None)
            continue
        if callable(v) or issubclass(kind, (staticmethod, classmethod, types.ModuleType)):
            out[n] = (v, v.__code__ if kind is types.FunctionType else None)
    return out


def _install_vault(
    key: bytes,
    report_fd: int,
    streams: dict[str, int],
    versions: _DictVersions | None,
    warm: dict[str, Any] | None,
) -> None:
    """Make the vault (see above): the one audit hook that signs the report. ``streams``: the
    descriptors whose identity must not change (the report's, the output's); ``versions``: the
    dicts' tag reader, if it works here; ``warm``: the warm process's copies of the modules'
    namespaces (see :data:`_warm`)."""
    import array

    mac = hmac.new(key, digestmod=hashlib.sha256)
    here = os.path.abspath(__file__)
    emit_code = _emit.__code__
    getframe = sys._getframe
    fstat = os.fstat
    write = os.write
    loads = json.loads
    dumps = json.dumps
    main_thread = threading.main_thread()
    current_thread = threading.current_thread
    identities = {}
    for label, fd in [*streams.items(), ("report", report_fd)]:
        st = fstat(fd)
        identities[label] = (fd, (st.st_dev, st.st_ino))
    state: dict[str, Any] = {"seq": 0, "broken": False, "test": None, "returned": None}
    kept: dict[tuple[str, str], Any] = {}
    lying_names = _LYING
    closed = [False]
    busy: set[int] = set()
    #: (label, object, names, snapshot)
    watched: list[tuple[str, Any, tuple[str, ...] | None, dict[str, tuple[Any, Any]]]] = []
    modules_seen: set[int] = set()
    #: (name, its namespace, a copy of it as first seen): compared in full checks only
    module_copies: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    #: the namespaces' addresses, and their version tags when copied (with ``versions``)
    module_addresses = array.array("Q")
    module_tags = array.array("Q")
    #: sys.modules's address and tag at the last look (unchanged: no module to watch is new)
    last_scan: list[Any] = [None]
    #: namespaces this run copied itself (the rest: the warm process's copies)
    copied = [0]
    inherited: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    mark = -1
    if versions is not None and warm is not None:
        inherited = warm["namespaces"]
        tags = versions.read(array.array("Q", [id(warm["mark"])]))
        if tags is not None:
            mark = tags[0]
    #: classes deriving from a value type before the tested code could make any
    known_classes: set[int] = set()
    baseline: list[bool] = []
    value_types: list[type] = list(_VALUE_TYPES)

    def sign_and_write(event: dict[str, Any]) -> None:
        fd, ident = identities["report"]
        if state["broken"]:
            return
        try:
            st = fstat(fd)
        except OSError:
            state["broken"] = True
            return
        if (st.st_dev, st.st_ino) != ident:
            state["broken"] = True  # someone put their own file in its place: say nothing
            return
        state["seq"] += 1
        line = dumps(dict(event, seq=state["seq"])).encode("utf-8", "replace")
        h = mac.copy()
        h.update(line)
        write(fd, h.hexdigest().encode() + b" " + line + b"\n")

    def tamper(where: str, what: list[str]) -> None:
        sign_and_write({"event": EV_TAMPER, "where": where, "what": what[:20]})

    def candidate_on_stack(frame: Any) -> bool:
        while frame is not None:
            if _candidate_frame(frame):
                return True
            frame = frame.f_back
        return False

    def subclasses(base: type) -> list[type]:
        out: list[type] = []
        todo = [base]
        while todo:
            cls = todo.pop()
            try:
                subs: list[type] = type.__subclasses__(cls)
            except TypeError:
                continue
            for sub in subs:
                if id(sub) not in seen_now:
                    seen_now.add(id(sub))
                    out.append(sub)
                    todo.append(sub)
        return out

    seen_now: set[int] = set()

    def value_classes() -> list[type]:
        seen_now.clear()
        out: list[type] = []
        for base in value_types:
            out += subclasses(base)
        return out

    def lying(cls: type) -> list[str]:
        """The lying methods ``cls`` defines itself, if the candidate's code made them (or
        they are no function at all: a builtin standing in for a method)."""
        found = []
        own = type.__dict__["__dict__"].__get__(cls)
        for name in lying_names:
            value = own.get(name, _MISSING)
            if value is _MISSING or value is None:
                continue
            kind = type(value)
            if kind in (staticmethod, classmethod):
                value = value.__func__
                kind = type(value)
            elif kind is property:
                value = value.fget
                kind = type(value)
            if kind is types.FunctionType:
                code = value.__code__
                if code.co_filename in _candidate_names and (
                    not _span or any(lo <= code.co_firstlineno <= hi for lo, hi in _span)
                ):
                    found.append(name)
            elif (
                kind is types.BuiltinFunctionType or kind.__name__ == "partial"
            ) and not library_class(cls, own):
                found.append(name)  # a builtin standing in for a method (``__eq__ = id``)
        return found

    def library_class(cls: type, own: Any) -> bool:
        """Is ``cls`` what a loaded module (not the candidate's) names at its qualified name?
        A class the tested code made with ``type()`` is no module's."""
        module_name = own.get("__module__")
        module = sys.modules.get(module_name) if type(module_name) is str else None
        origin = getattr(module, "__file__", None) if module is not None else None
        if type(origin) is not str or os.path.abspath(origin) in _candidate_names:
            return False
        found: Any = module
        for part in str(type.__dict__["__qualname__"].__get__(cls)).split("."):
            found = getattr(found, part, None)
        return found is cls

    def decorated(new: Any, old: Any) -> bool:
        """Is ``new`` a library's own wrapper of ``old`` (``functools.wraps``: torch, when
        its compiler is first imported, wraps ``torch.manual_seed`` and others in place)? Not
        if the tested code wrote the wrapper."""
        if type(new) is not types.FunctionType:
            return False
        own = function_dict(new)
        if own.get("__wrapped__", _MISSING) is not old:
            return False
        return new.__code__.co_filename not in _candidate_names

    function_dict = types.FunctionType.__dict__["__dict__"].__get__

    def library_function(new: Any) -> bool:
        """Is ``new`` a Python function of a library's own file (not the candidate's)? One
        library puts its functions in another's place (``typing_extensions`` replaces
        ``typing``'s helpers when it is imported; torch rebinds functorch's): that is no
        tampering. What the tested code could put there instead (a function or lambda of its
        own, a builtin, a ``partial``) still is; it cannot make a function of another file
        (new code and function objects are refused to it)."""
        return type(new) is types.FunctionType and new.__code__.co_filename not in _candidate_names

    def watch(label: str, obj: Any, names: tuple[str, ...] | None) -> None:
        snap = _snapshot(obj, names)
        watched.append((label, obj, names, snap))
        for name, (value, _code) in snap.items():
            if isinstance(value, type) and value.__module__ == getattr(obj, "__name__", None):
                watched.append((f"{label}.{name}", value, None, _snapshot(value, None)))

    def watch_modules() -> None:
        """Every module loaded so far (but the test program's own): what it binds to callables
        and modules. A shared library function the reference uses must not change under it."""
        modules = sys.modules
        if versions is not None and baseline:
            at = array.array("Q", [id(modules)])
            now = versions.read(at)
            if now is not None and (at[0], now[0]) == last_scan[0]:
                return  # no module added or replaced since the last look
            last_scan[0] = None if now is None else (at[0], now[0])
        new: list[tuple[str, dict[str, Any]]] = []
        for name, module in list(modules.items()):
            if id(module) in modules_seen or name == "__main__" or module is None:
                continue
            modules_seen.add(id(module))
            try:
                namespace = object.__getattribute__(module, "__dict__")
            except AttributeError:
                continue
            if type(namespace) is not dict or namespace.get("__file__") in _candidate_names:
                continue  # the candidate's own module is its own
            new.append((name, namespace))
        addresses = array.array("Q", [id(namespace) for _name, namespace in new])
        # Tags before the copies: a change after the tag is read is a change since the copy.
        tags = versions.read(addresses) if versions is not None else None
        for i, (name, namespace) in enumerate(new):
            first = inherited.get(addresses[i])
            if tags is not None and first is not None and first[0] is namespace and tags[i] <= mark:
                copy = first[1]  # unchanged since the warm process copied it
            else:
                copy = namespace.copy()
                copied[0] += 1
            module_copies.append((name, namespace, copy))
        module_addresses.extend(addresses)
        module_tags.extend(tags if tags is not None else array.array("Q", bytes(8 * len(new))))
        if versions is not None and not baseline:
            at = array.array("Q", [id(modules)])
            now = versions.read(at)
            last_scan[0] = None if now is None else (at[0], now[0])
        for library, attrs in (("numpy", ("ndarray", "generic")), ("torch", ("Tensor",))):
            loaded = sys.modules.get(library)
            for attr in attrs:
                base = getattr(loaded, attr, None) if loaded is not None else None
                if isinstance(base, type) and base not in value_types:
                    value_types.append(base)
                    seen_now.clear()
                    for cls in subclasses(base):
                        known_classes.add(id(cls))
        if not baseline:
            baseline.append(True)
            for cls in value_classes():
                known_classes.add(id(cls))

    is_ = operator.is_

    def modules_moved() -> list[str]:
        """What the modules now bind to another callable or module than when first seen (a
        library's own in-place wrapper aside)."""
        moved = []
        wrappers = (staticmethod, classmethod, types.ModuleType)
        tags = versions.read(module_addresses) if versions is not None else None
        for i, (name, namespace, first) in enumerate(module_copies):
            if tags is not None and tags[i] == module_tags[i]:
                continue  # the namespace has not changed since its copy
            if all(map(is_, map(namespace.get, first), first.values())):
                continue  # nothing rebound (a loop in C: a hundred thousand names in ms)
            for attr, value in first.items():
                current = namespace.get(attr, _MISSING)
                if current is value:
                    continue
                kind = type(value)
                if issubclass(kind, _PLAIN_DATA):
                    continue
                if not (callable(value) or issubclass(kind, wrappers)):
                    continue
                if decorated(current, value) or library_function(current):
                    first[attr] = current
                    continue
                moved.append(f"module {name}.{attr}")
        return moved

    def check(where: str, full: bool) -> None:
        moved = modules_moved() if full else []
        for label, obj, _names, snap in watched:
            try:
                now = dict(vars(obj))
            except TypeError:
                continue
            for name, (value, code) in list(snap.items()):
                current = now.get(name, _MISSING)
                if current is not value and decorated(current, value):
                    snap[name] = (current, current.__code__)
                    continue
                if current is not value or (code is not None and current.__code__ is not code):
                    moved.append(f"{label}.{name}")
        for label, (fd, ident) in identities.items():
            try:
                st = fstat(fd)
                same = (st.st_dev, st.st_ino) == ident
            except OSError:
                same = False
            if not same:
                moved.append(f"the {label} descriptor ({fd})")
        for cls in value_classes() if full else ():
            if id(cls) in known_classes:
                continue
            told = lying(cls)
            if told:
                moved.append(
                    f"a value type of the code under test that decides its own comparisons "
                    f"({cls.__name__}: {', '.join(sorted(told))})"
                )
            else:
                known_classes.add(id(cls))
        if moved:
            tamper(where, sorted(set(moved)))

    def refuse_introspection(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith("object."):
            if len(args) < 2 or args[1] not in _INTROSPECTION_ATTRIBUTES:
                return
        elif event in ("compile", "exec"):
            pass
        elif not (event in _INTROSPECTION or event.startswith("ctypes.")):
            return
        requester = getframe(2)  # who called the function that raised the event
        if requester is None or requester.f_code.co_filename == here:
            return
        caller = requester.f_back
        if event in ("compile", "exec"):
            # Library code compiles on the candidate's behalf (namedtuple, dataclasses):
            # only the candidate's own compile/exec is refused.
            caller = None
        elif requester.f_code.co_name in _FRAME_USERS.get(
            os.path.basename(requester.f_code.co_filename), ()
        ):
            caller = None  # takes its caller's globals or name, never hands the frame out
        if _candidate_frame(requester) or (
            caller is not None and caller.f_code.co_filename != here and _candidate_frame(caller)
        ):
            what = event if not event.startswith("object.") else f"{event} {args[1]}"
            raise PermissionError(f"rcb-env: {what} is off limits to the code under test")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in _RUNNER_EVENTS and not (
            event in _INTROSPECTION or event.startswith("object.") or event.startswith("ctypes.")
        ):
            return
        me = threading.get_ident()
        if me in busy:
            return
        busy.add(me)
        try:
            if event not in _RUNNER_EVENTS:
                refuse_introspection(event, args)
                return
            if closed[0]:
                return
            requester = getframe(1)
            ours = requester is not None and requester.f_code.co_filename == here
            caller = requester.f_back if requester is not None else None
            if event == _EMIT:
                ours = ours and requester.f_code is emit_code
                ours = ours and caller is not None and caller.f_code.co_filename == here
            if not ours:
                tamper("the code under test", [f"a {event} event raised by the tested code"])
                return
            if current_thread() is not main_thread or candidate_on_stack(requester):
                tamper(
                    "the code under test",
                    [f"the runner's {event} called from the tested code or another thread"],
                )
                return
            if event == _EMIT:
                record = loads(args[0])
                if (
                    record.get("event") == EV_TEST
                    and record.get("status") == "passed"
                    and (record.get("id") != state["returned"] or state["test"] != record.get("id"))
                ):
                    record = dict(
                        record,
                        status="error",
                        exc_type="EndedEarly",
                        message="the test ended without its method returning and without "
                        "a failure (the code under test ended it early)",
                    )
                if record.get("event") == EV_DONE:
                    tags = versions is not None
                    record = dict(
                        record, namespaces=len(module_copies), copied=copied[0], tags=tags
                    )
                sign_and_write(record)
                if record.get("event") == EV_DONE:
                    closed[0] = True
            elif event == _STARTED:
                state["test"], state["returned"] = args[0], None
            elif event == _KEEP:
                kept[(args[0], args[1])] = args[2]
            elif event == _FETCH:
                found = kept.get((args[0], args[1]))
                if found is not None:
                    args[2].append(found)
            elif event == _RETURNED:
                if args[0] == state["test"]:
                    state["returned"] = args[0]
            elif event == _WATCH:
                watch(*args)
            elif event == _WATCH_ALL:
                watch_modules()
            elif event == _CHECK:
                watch_modules()  # modules loaded since: from now on
                check(args[0], bool(args[1]))
        finally:
            busy.discard(me)

    sys.addaudithook(hook)


def _fetch(kind: str, key: str) -> Any:
    """A reference module or source from the vault (None if it has none, or refuses)."""
    box: list[Any] = []
    sys.audit(_FETCH, kind, key, box)
    return box[0] if box else None


def _watch(label: str, obj: Any, names: tuple[str, ...] | None = None) -> None:
    sys.audit(_WATCH, label, obj, names)


def _check(where: str, full: bool = False) -> None:
    """Ask the vault whether what the verdict depends on changed: after each test the
    framework, builtins, comparison functions and descriptors; in full (after the test module is
    loaded, and at the end) also every loaded module and every value type made since. A change
    the tested code makes persists to the end unless it undoes it, which the candidate policy
    does not let it write."""
    sys.audit(_CHECK, where, full)


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


def _completing(method: Any, test_id: str) -> Any:
    """``method``, telling the vault when it returns: a test passes only if its method ran to
    its end (an exception the test framework treats as "not a failure", raised by the tested
    code, ends the method without that)."""

    def ran_to_its_end(*args: Any, **kwargs: Any) -> Any:
        value = method(*args, **kwargs)
        sys.audit(_RETURNED, test_id)
        return value

    inner = getattr(method, "__func__", method)
    for name in ("__unittest_skip__", "__unittest_skip_why__", "__unittest_expecting_failure__"):
        if name in getattr(inner, "__dict__", {}):
            setattr(ran_to_its_end, name, inner.__dict__[name])
    ran_to_its_end.__name__ = getattr(inner, "__name__", "test")
    ran_to_its_end.__doc__ = getattr(inner, "__doc__", None)
    return ran_to_its_end


class _ReportingResult(unittest.TextTestResult):
    def startTest(self, test: unittest.TestCase) -> None:
        _seal(sys.modules.get("__main__"))
        if "watch-logging" in _options:
            _logging_state[:] = [_logging_snapshot()]
        test_id = _test_id(test)
        sys.audit(_STARTED, test_id)
        name = getattr(test, "_testMethodName", None)
        method = getattr(test, name, None) if isinstance(name, str) else None
        if method is not None:
            vars(test)[name] = _completing(method, test_id)  # type: ignore[index]
        super().startTest(test)

    def printErrorList(self, flavour: str, errors: Any) -> None:
        """Each failure's test and exception type, not its message: what a failed assertion
        says (the expected values) is the report's (a file the run cannot read), never the
        run's own output, which the tested code could read or redirect."""
        for test, err in errors:
            last = str(err).strip().splitlines()[-1:] or [""]
            kind = last[0].split(":", 1)[0].strip() or "Error"
            self.stream.writeln(self.separator1)
            self.stream.writeln(f"{flavour}: {self.getDescription(test)}")
            self.stream.writeln(self.separator2)
            self.stream.writeln("Traceback (most recent call last):")
            self.stream.writeln("  (rcb-env: the traceback and message are in the grading report)")
            self.stream.writeln(f"{kind}: see the grading report")

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
    stream: Any = _output[0] if _output else sys.stderr
    runner = testRunner or unittest.TextTestRunner(stream=stream, verbosity=verbosity)
    if isinstance(runner, type):
        runner = runner(verbosity=verbosity)
    result = runner.run(suite)
    _emit({"event": EV_MAIN_DONE, "tests_run": result.testsRun, "ok": result.wasSuccessful()})
    if exit:
        sys.exit(not result.wasSuccessful())
    return _Program(result)


def _read_policy() -> None:
    """The lying methods' list (and the memory interfaces), from the candidate policy beside
    this file."""
    global _LYING
    here = os.path.dirname(os.path.abspath(__file__))
    policy = _run_file(os.path.join(here, "policy.py"))
    # and the ways to raw memory numpy offers a class (an address of its choosing)
    _LYING = frozenset(policy["LYING_METHODS"]) | frozenset(policy["MEMORY_INTERFACES"])


def _close_keyrings() -> None:
    """Run :func:`keyrings.close_keyrings` from the copy of ``rcb_env/guest/keyrings.py``
    that the grader puts beside this file (one source for the grading runs and the sandboxes'
    shells): an empty session keyring of the run's own, and no keyring system call."""
    here = os.path.dirname(os.path.abspath(__file__))
    _run_file(os.path.join(here, "keyrings.py"))["close_keyrings"]()
    _compiled.clear()


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


class _GuardedStream:
    """The test program's own output (unittest's progress and failure list): written to a
    descriptor of the runner's, only while that descriptor is still what it was (the tested
    code may have put a pipe of its own in its place, to read what the tests say)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)

    def write(self, text: str) -> int:
        try:
            st = os.fstat(self.fd)
            if (st.st_dev, st.st_ino) == self.identity:
                os.write(self.fd, text.encode("utf-8", "replace"))
        except OSError:
            pass
        return len(text)

    def flush(self) -> None:
        pass

    def writeln(self, text: str = "") -> None:
        self.write(text + "\n")


_output: list[_GuardedStream] = []


#: System calls that set or read which pages of a file are cached: the host-wide state by which
#: one run could leave what it learned for the next (a shared read-only file's pages evicted or
#: not), refused to the test process and everything it starts. Per architecture: (the audit
#: architecture, {name: number}).
_PAGE_CACHE_CALLS = {
    "x86_64": (
        0xC000003E,
        {
            "fadvise64": 221,
            "mincore": 27,
            "readahead": 187,
            "preadv2": 327,
            "pwritev2": 328,
            "process_madvise": 440,
            "cachestat": 451,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "fadvise64": 223,
            "mincore": 232,
            "readahead": 213,
            "preadv2": 286,
            "pwritev2": 287,
            "process_madvise": 440,
            "cachestat": 451,
        },
    ),
}
_MADVISE = {"x86_64": 28, "aarch64": 233}
#: madvise advice that evicts pages (MADV_COLD, MADV_PAGEOUT); the rest is the allocators'.
_EVICTING_ADVICE = (20, 21)


def _seccomp_program(machine: str) -> bytes | None:
    """A classic BPF program (seccomp's filter) that answers EPERM to the page-cache calls,
    to madvise with evicting advice and to the x32 ABI, and allows the rest; None on an
    architecture without a table."""
    import struct

    if machine not in _PAGE_CACHE_CALLS:
        return None
    arch, calls = _PAGE_CACHE_CALLS[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    numbers = sorted(calls.values())
    # Layout: 0 ld arch; 1 jeq arch; 2 ld nr; 3 jge x32; then one jeq per call; madvise jeq;
    # ret allow; [madvise: ld advice; jeq cold; jeq pageout; ret allow]; ret deny.
    program: list[tuple[int, int, int, int]] = []
    n = len(numbers)
    deny_at = 4 + n + 1 + 1 + 4
    madvise_at = 4 + n + 1 + 1
    program.append((ld, 0, 0, 4))
    program.append((jeq, 0, deny_at - 2, arch))
    program.append((ld, 0, 0, 0))
    program.append((jge, deny_at - 4, 0, 0x40000000))
    for i, number in enumerate(numbers):
        here = 4 + i
        program.append((jeq, deny_at - here - 1, 0, number))
    here = 4 + n
    program.append((jeq, madvise_at - here - 1, 0, _MADVISE[machine]))
    program.append((ret, 0, 0, allow))
    program.append((ld, 0, 0, 16 + 8 * 2))  # args[2], its low 32 bits (little-endian)
    program.append((jeq, deny_at - (madvise_at + 1) - 1, 0, _EVICTING_ADVICE[0]))
    program.append((jeq, deny_at - (madvise_at + 2) - 1, 0, _EVICTING_ADVICE[1]))
    program.append((ret, 0, 0, allow))
    program.append((ret, 0, 0, deny))
    return b"".join(struct.pack("=HBBI", *op) for op in program)


def _deny_page_cache_calls() -> None:
    """Install :func:`_seccomp_program` for this process and its children (no_new_privs first,
    as an unprivileged process must). Where it cannot be installed (an old kernel, a container
    that forbids seccomp), the run goes on without it."""
    import ctypes
    import platform

    program = _seccomp_program(platform.machine())
    if program is None:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return

    class _Filter(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    prog = _Filter(len(program) // 8, program)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return
    libc.prctl(22, 2, ctypes.byref(prog), 0, 0)  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def _start(report_path: str, key_path: str) -> None:
    """Read the key (it leaves the disk before any code under test exists), open the report
    and make the vault; none of it stays in a frame that outlives this call."""
    with open(key_path, "rb") as f:
        key = f.read().strip()
    os.unlink(key_path)
    report_fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    streams: dict[str, int] = {}
    for label, fd in (("stdout", 1), ("stderr", 2)):
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            streams[label] = fd
            # Opened again by path (/proc/self/fd/N), a pipe gives its reading end.
            _protected_ids.add((st.st_dev, st.st_ino))
    with contextlib.suppress(OSError):
        private = os.dup(2)
        streams["test output"] = private
        _output.append(_GuardedStream(private))
    warm, _warm[0] = _warm[0], None
    _install_vault(key, report_fd, streams, _DictVersions.make(), warm)


def run() -> int:
    test_file, report_path, key_path = sys.argv[1], sys.argv[2], sys.argv[3]
    _read_policy()
    _deny_page_cache_calls()
    _start(report_path, key_path)
    _close_keyrings()
    if len(sys.argv) >= 7:
        _limit(resource.RLIMIT_AS, int(sys.argv[4]))
        _limit(resource.RLIMIT_FSIZE, int(sys.argv[5]))
        _limit(resource.RLIMIT_CPU, int(sys.argv[6]))
        _limit(resource.RLIMIT_CORE, 0)
    _emit({"event": EV_START, "pid": os.getpid(), "python": sys.version.split()[0]})
    here = os.getcwd()
    declared: list[str] = []
    if len(sys.argv) >= 9 and sys.argv[8]:
        with open(sys.argv[8], encoding="utf-8") as f:
            declared = [line.rstrip("\n") for line in f if line.strip()]
        _options.update(d.split("\t", 1)[1] for d in declared if d.startswith("option\t"))
        for line in declared:
            if line.startswith("span\t"):
                _lo, _hi = line.split("\t")[1:3]
                _span.append((int(_lo), int(_hi)))
        declared = [d for d in declared if not d.startswith(("option\t", "span\t"))]
    _guard(here, test_file, sys.argv[7] if len(sys.argv) >= 8 else "", declared)
    unittest.main = _main  # type: ignore[assignment]
    # Test files that build their own TextTestRunner still report through our result class.
    unittest.TextTestRunner.resultclass = _ReportingResult  # type: ignore[assignment]
    # The one exception unittest swallows as "not a failure" (raised by its own failfast mode,
    # which the runner never sets): now nothing is swallowed.
    unittest.case._ShouldStop = ()  # type: ignore[attr-defined]
    _watch("unittest.case names", unittest.case, ("_ShouldStop", "SkipTest", "_Outcome"))
    _watch(
        "sys streams and hooks",
        sys,
        ("stdout", "stderr", "__stdout__", "__stderr__", "excepthook", "unraisablehook"),
    )
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
    if "numpy" in sys.modules:
        _bound_as_strided()
    sys.audit(_WATCH_ALL)  # every module loaded so far, before the tested code exists
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
    _check("end", full=True)
    _emit({"event": EV_DONE, "code": code, "main_calls": _main_calls})
    return code


if __name__ == "__main__":
    sys.exit(run())
