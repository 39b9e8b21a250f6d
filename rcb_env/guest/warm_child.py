"""rcb-env's warm grading process. Runs INSIDE the task interpreter and sandbox, so it imports only
the standard library and keeps to syntax older Pythons accept.

Usage: ``python in_sandbox.py CONFIG_JSON`` (CONFIG_JSON: a file with ``modules``, the third-party
modules to import once, ``area``, the folder where every grading copy lies, and ``stage``, an
empty folder of the sandbox).

It imports the modules, checks that forking is safe afterwards (no other thread but fork-safe
ones, no CUDA context), and then serves gradings over its standard input and output (JSON lines;
see :mod:`rcb_env.sandbox.warm.host` for the host's side):

- out ``{"event": "ready", "pid": P, "imported": [...], "failed": {...}}``, or
  ``{"event": "unsafe", "why": "..."}`` and it exits;
- in ``{"op": "import", "id": I, "modules": [...]}``: import more (what a run of the pristine
  paper imported lazily); out ``{"event": "imported", "id": I, ..., "unsafe": null or why}``
  (unsafe: it exits);
- in ``{"op": "run", "id": I, "argv": [...], "cwd": C, "env": {...}, "run_dir": D, "out": O,
  "err": E, "probe": false}``: a manager process is forked and reported
  (``{"event": "started", "id": I, "pid": M}``); it waits for ``{"op": "go", "id": I}``
  (the host moves it into the run's cgroup first), then builds the run's own namespaces and
  reports ``{"event": "exit", "id": I, "status": S}`` (a wait status) or
  ``{"event": "exit", "id": I, "error": "..."}``.

The tested code never runs in this process. Each run happens three forks away, in a new user,
mount, PID, network, IPC and UTS namespace, where the run sees only its own grading copy (the
rest of the area is covered), fresh ``/tmp`` and ``/dev/shm``, its own ``/proc``, no capability,
and this process not at all: nothing it does (signals, tracing, writes, files or threads left
behind, SysV IPC, sockets) reaches this process or a later run. This process is not dumpable,
so its memory cannot be read or written through ``/proc`` either. The run's interpreter is a copy
of this one after the imports; it runs rcb-env's test runner exactly as ``python runner.py ...``
would (argv, ``sys.path[0]``, environment, fresh random seeds, the imports' own output first).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import json
import os
import random
import signal
import stat
import sys
import tempfile
import traceback
import types
from typing import Any

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
#: Per-mount options a remount inside a user namespace must keep (the kernel locks them).
_LOCKED_OPTIONS = {
    "nosuid": _MS_NOSUID,
    "nodev": _MS_NODEV,
    "noexec": _MS_NOEXEC,
    "noatime": _MS_NOATIME,
    "nodiratime": _MS_NODIRATIME,
    "relatime": _MS_RELATIME,
    "strictatime": _MS_STRICTATIME,
}
#: File systems that hold no files a run could create and a later run read.
_NO_STORAGE = frozenset({"proc", "sysfs", "devpts", "cgroup", "cgroup2"})
_MNT_DETACH = 2
_O_PATH = 0o10000000
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_proto = -1


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl {option}")


def _drop_capabilities() -> None:
    """No capability left, none to gain: the run cannot undo its mounts."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    header = Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (Data * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def _send(event: dict[str, Any]) -> None:
    os.write(_proto, json.dumps(event).encode() + b"\n")


#: Threads that do not make forking unsafe: jemalloc's background thread (pyarrow, hence pandas,
#: starts one) -- jemalloc takes all its locks around fork and a child has none of these threads.
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})


def _threads() -> list[str]:
    """Names of this process's other threads, except the fork-safe ones."""
    own = str(os.getpid())
    names = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return []
    for tid in tasks:
        if tid == own:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
                name = f.read().strip()
        except OSError:
            continue  # it has ended
        if name not in FORK_SAFE_THREADS:
            names.append(name)
    return names


def _shared_writable_mappings() -> list[str]:
    """This process's writable shared memory mappings (``rw-s`` in /proc/self/maps): pages that
    every process forked from it would share, not copy."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/maps", encoding="utf-8") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) > 1 and "w" in fields[1] and fields[1].endswith("s"):
                found.append(fields[5].strip() if len(fields) > 5 else fields[0])
    return found


def _preimport(modules: list[str]) -> tuple[list[str], dict[str, str], str | None, bytes, bytes]:
    """Import ``modules``; their output is kept (each run shows it first, as a cold start
    would). Returns (imported, failed, why unsafe, stdout, stderr)."""
    imported: list[str] = []
    failed: dict[str, str] = {}
    unsafe = None
    captured = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]  # noqa: SIM115 - closed below
    saved = []
    for fd, sink in ((1, captured[0]), (2, captured[1])):
        saved.append(os.dup(fd))
        os.dup2(sink.fileno(), fd)
    try:
        for name in modules:
            try:
                __import__(name)
                imported.append(name)
            except BaseException as exc:
                failed[name] = f"{type(exc).__name__}: {exc}"[:300]
            threads = _threads()
            if threads:
                unsafe = f"importing {name} started {len(threads)} thread(s): {', '.join(threads)}"
                break
        shared = _shared_writable_mappings()
        if unsafe is None and shared:
            # Forked runs would all write the same pages: a channel from one run to the next.
            unsafe = f"writable shared memory after the imports: {', '.join(shared[:3])}"
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        if unsafe is None and cuda is not None:
            try:
                if cuda.is_initialized():
                    unsafe = "a CUDA context exists after the imports"
            except Exception:
                pass
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in ((1, saved[0]), (2, saved[1])):
            os.dup2(old, fd)
            os.close(old)
    out, err = b"", b""
    for i, sink in enumerate(captured):
        sink.seek(0)
        data = sink.read()
        sink.close()
        if i == 0:
            out = data
        else:
            err = data
    return imported, failed, unsafe, out, err


#: For the runner's module-wide watch (rcb_env/guest/runner.py, ``_warm``): a copy of every
#: loaded module's namespace, taken after the imports, and ``mark``, a dict changed just before
#: they were taken (a namespace whose version tag is not greater has not changed since its
#: copy). Each run's runner gets them through its initial globals; without them it would copy
#: every namespace itself, and in a forked process touching them copies their memory pages
#: (about 30 ms a run for torch's).
_namespaces: list[dict[str, Any]] = []


def _remember_namespaces() -> None:
    mark: dict[int, int] = {}
    mark[0] = 0
    copies: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    for module in list(sys.modules.values()):
        try:
            namespace = object.__getattribute__(module, "__dict__")
        except AttributeError:
            continue
        if type(namespace) is dict:
            copies[id(namespace)] = (namespace, namespace.copy())
    _namespaces[:] = [{"mark": mark, "namespaces": copies}]


#: The compiled code of the scripts runs start (rcb-env's runner and the files beside it), by
#: the SHA-256 of their source: compiled here once, before a run is forked, not in every run
#: (the runner alone is some 1,400 lines, 10 ms a compile).
_compiled: dict[bytes, Any] = {}
_SCRIPT_LIMIT = 1 << 20


def _compile_scripts(argv: list[str]) -> None:
    """Compile the script of a run's command line (``argv[1]``) and the ``.py`` files beside
    it, unless their sources were compiled before. Only code: nothing of them runs here."""
    if len(argv) < 2 or not os.path.isabs(argv[1]):
        return
    folder = os.path.dirname(argv[1])
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))[:8]
    except OSError:
        return
    if len(_compiled) > 32:
        _compiled.clear()
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                source = f.read(_SCRIPT_LIMIT + 1)
            digest = hashlib.sha256(source).digest()
            if len(source) <= _SCRIPT_LIMIT and digest not in _compiled:
                _compiled[digest] = compile(source, path, "exec", dont_inherit=True)
        except Exception:
            continue  # the run compiles it itself


def _renamed(code: Any, filename: str) -> Any:
    """``code`` (and the code it holds) as compiled from the file ``filename``."""
    consts = tuple(
        _renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=consts)


def _scripts_code(script: str) -> dict[str, Any]:
    """By path: the compiled code of ``script`` and the files beside it whose sources were
    compiled before (:func:`_compile_scripts`), each checked against the file as it is now."""
    found: dict[str, Any] = {}
    folder = os.path.dirname(script)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))[:8]
    except OSError:
        return found
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                source = f.read(_SCRIPT_LIMIT + 1)
        except OSError:
            continue
        code = _compiled.get(hashlib.sha256(source).digest())
        if code is not None:
            found[path] = _renamed(code, path)
    return found


def _run_as_main(script: str, code: Any, init_globals: dict[str, Any] | None) -> None:
    """What ``runpy.run_path(script, init_globals, run_name="__main__")`` does, with ``code``
    already compiled from it."""
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    if init_globals:
        namespace.update(init_globals)
    namespace.update(
        __name__="__main__",
        __file__=script,
        __cached__=None,
        __doc__=None,
        __loader__=None,
        __package__="",
        __spec__=None,
    )
    saved, argv0 = sys.modules.get("__main__"), sys.argv[0]
    sys.modules["__main__"], sys.argv[0] = module, script
    try:
        exec(code, namespace)
    finally:
        sys.argv[0] = argv0
        if saved is not None:
            sys.modules["__main__"] = saved


def _unescape(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline, backslash as octal)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mounts_under_tmp(own_root: str) -> list[str]:
    """The sandbox's mount points below /tmp and /dev/shm (read-only folders the launcher bound
    there, as a cold run sees them), outermost only, except this process's own folder."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 5:
                continue
            point = _unescape(fields[4])
            if not point.startswith(("/tmp/", "/dev/shm/")):
                continue
            if point == own_root or point.startswith(own_root + "/"):
                continue
            points.append(point)
    return sorted(
        p for p in set(points) if not any(p.startswith(q + "/") for q in points if q != p)
    )


def _mount_id(path: str) -> int | None:
    """The id of the mount that ``path`` resolves to (None: it does not resolve)."""
    try:
        fd = os.open(path, _O_PATH | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as f:
            for line in f:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return None


def _mounts() -> list[tuple[int, str, set[str], str]]:
    """(id, mount point, per-mount options, file system type) of every mount in this
    namespace."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            fields = head.split()
            if len(fields) < 6 or not tail:
                continue
            found.append(
                (int(fields[0]), _unescape(fields[4]), set(fields[5].split(",")), tail.split()[0])
            )
    return found


def _fresh_dev(held: list[tuple[str, int | str]]) -> list[str]:
    """A new /dev of the run's own: a fresh tmpfs with the sandbox's character devices bound
    in (``held``: their names and O_PATH descriptors, or a symbolic link's target), fresh
    ``shm`` and, where the kernel allows, fresh ``pts`` and ``mqueue``; read-only but for
    ``shm``. Returns the mount points of the file systems made anew."""
    _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=0755")
    fresh = ["/dev"]
    for name, what in held:
        path = "/dev/" + name
        if isinstance(what, str):
            os.symlink(what, path)
            continue
        open(path, "w").close()  # a mount point for the device
        _mount(f"/proc/self/fd/{what}", path, None, _MS_BIND)
        os.close(what)
    for name, fstype, flags, data in (
        ("shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777"),
        ("pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"),
        ("mqueue", "mqueue", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, ""),
    ):
        os.mkdir("/dev/" + name)
        try:
            _mount(fstype, "/dev/" + name, fstype, flags, data)
            fresh.append("/dev/" + name)
        except OSError:
            if name == "shm":
                raise
    # The new /dev itself read-only: the run writes in shm, like everywhere else in /tmp.
    _mount(None, "/dev", None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC)
    return fresh


def _held_dev() -> list[tuple[str, int | str]]:
    """The sandbox's /dev entries a run gets again: character devices (held by O_PATH
    descriptors across the new /dev that covers them) and symbolic links."""
    held: list[tuple[str, int | str]] = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir("/dev")):
            path = "/dev/" + name
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                held.append((name, os.readlink(path)))
            elif stat.S_ISCHR(st.st_mode):
                held.append((name, os.open(path, _O_PATH | os.O_NOFOLLOW)))
    return held


def _seal_shared_mounts(fresh: set[int], own: str) -> None:
    """Every file system the run can reach and write must be its own (``fresh``: ids of the
    mounts made anew for it; ``own``: its grading copy). Any other writable one (a folder the
    sandbox shares between runs: its stage, a message queue file system, a writable bind) is
    made read-only here; one that cannot be is an error, and the run is not started."""
    for _ in range(2):
        shared = []
        for mid, point, options, fstype in _mounts():
            if mid in fresh or "rw" not in options or fstype in _NO_STORAGE or point == own:
                continue
            if _mount_id(point) != mid:
                continue  # covered by another mount: out of reach
            with contextlib.suppress(OSError):
                if stat.S_ISCHR(os.stat(point).st_mode):
                    continue  # a device bound in: no files to keep
            shared.append((point, options))
        if not shared:
            return
        for point, options in shared:
            flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
            for option, flag in _LOCKED_OPTIONS.items():
                if option in options:
                    flags |= flag
            with contextlib.suppress(OSError):
                _mount(None, point, None, flags)
    raise OSError(f"writable file systems shared between runs: {', '.join(p for p, _ in shared)}")


def _isolate(area: str, stage: str, run_dir: str) -> None:
    """Namespaces for one run: only ``run_dir`` of the area stays visible. Fresh /tmp and /dev
    (its devices bound in, with fresh shm, pts and mqueue), with whatever the sandbox mounted
    below /tmp and /dev/shm (its read-only folders) bound back. Every other file system the run
    could write is made read-only: nothing a run writes outside its own copy and its own fresh
    file systems can reach a later run."""
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET
    _check(_libc.unshare(flags | _CLONE_NEWIPC | _CLONE_NEWUTS), "unshare")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount(run_dir, stage, None, _MS_BIND | _MS_REC)
    # Held open across the new tmpfs mounts, which cover their paths.
    kept = [(p, os.open(p, _O_PATH)) for p in _mounts_under_tmp(os.path.dirname(area))]
    _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    fresh_points = ["/tmp"]
    if os.path.isdir("/dev"):
        fresh_points += _fresh_dev(_held_dev())
    for point, fd in kept:
        source = f"/proc/self/fd/{fd}"
        if os.path.isdir(source):
            os.makedirs(point, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(point), exist_ok=True)
            open(point, "a").close()  # a mount point for a bound file
        # A bind keeps the mount's own flags (read-only stays read-only).
        _mount(source, point, None, _MS_BIND | _MS_REC)
        os.close(fd)
    if os.path.isdir(area):
        _mount("tmpfs", area, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
        fresh_points.append(area)
    os.makedirs(run_dir, exist_ok=True)
    _mount(stage, run_dir, None, _MS_BIND | _MS_REC)
    _check(_libc.umount2(stage.encode(), _MNT_DETACH), "umount the stage")
    fresh = {m for m in map(_mount_id, fresh_points) if m is not None}
    _seal_shared_mounts(fresh, run_dir)


def _rewrite_process_strings(argv: list[str], env: dict[str, str]) -> None:
    """Make ``/proc/self/cmdline`` and ``/proc/self/environ`` read as the cold run's would (its
    command line and environment), by writing them over this process's original ones (the
    launcher padded both with room to spare; Python keeps copies of what it uses)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # arg_start, arg_end, env_start, env_end: fields 48-51 of proc(5), counted from 1.
        arg_start, arg_end, env_start, env_end = (int(x) for x in fields[45:49])
    except (OSError, ValueError, IndexError):
        return
    for start, end, items in (
        (arg_start, arg_end, argv),
        (env_start, env_end, [f"{k}={v}" for k, v in env.items()]),
    ):
        data = b"".join(os.fsencode(i) + b"\0" for i in items)
        room = end - start
        if start and len(data) <= room:
            ctypes.memmove(start, data + b"\0" * (room - len(data)), room)


def _reseed() -> None:
    """What a fresh interpreter would have: new random seeds (torch's default generator starts
    from a fixed seed in both)."""
    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        with contextlib.suppress(Exception):
            numpy_random.seed()


def _worker(request: dict[str, Any], out_fd: int, err_fd: int, imports: tuple[bytes, bytes]) -> int:
    """PID 2 of the run's namespace: rcb-env's runner, as ``python runner.py ARGS`` would."""
    os.setsid()
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    for fd in (null, out_fd, err_fd):
        os.close(fd)
    # Every other descriptor, however high (close_range: one system call).
    os.closerange(3, 1 << 30)
    _drop_capabilities()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _rewrite_process_strings(list(request["argv"]), dict(request["env"]))
    tempfile.tempdir = None
    _reseed()
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r"))
    os.write(1, imports[0])
    os.write(2, imports[1])
    import runpy

    argv = list(request["argv"][1:])
    sys.argv = argv
    # sys.path as this run's interpreter would have built it: its script's folder, then its own
    # PYTHONPATH (relative entries are relative to its working folder), then the rest.
    rest = [p for p in sys.path[1:] if p not in _STARTUP_PYTHONPATH]
    own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(os.path.abspath(argv[0])), *own, *rest]
    code = 0
    # A box the runner empties (no frame below it keeps the copies).
    handed: dict[str, Any] = {"_rcb_warm": [_namespaces.pop()]} if _namespaces else {}
    scripts = _scripts_code(os.path.abspath(argv[0]))
    own = scripts.pop(os.path.abspath(argv[0]), None)
    if scripts:
        handed["_rcb_compiled"] = scripts  # the runner's own files beside it
    try:
        if own is not None and argv[0] == os.path.abspath(argv[0]):
            _run_as_main(argv[0], own, handed)
        else:
            runpy.run_path(argv[0], init_globals=handed or None, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    if request.get("probe"):
        # A run of the pristine paper (the host asks only for those): what it imported, for
        # the warm process to import too.
        with open(os.path.join(request["run_dir"], "_rcb", "modules"), "w") as f:
            for name, module in list(sys.modules.items()):
                f.write(f"{name}\t{getattr(module, '__file__', None) or ''}\n")
    return code


def _init(request: dict[str, Any], out_fd: int, err_fd: int, status_w: int, imports: Any) -> None:
    """PID 1 of the run's namespace: mount its /proc, start the worker, reap until it ends, pass
    its status on. When this process ends, the kernel kills whatever is left in the namespace."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(status_w)
        code = 1
        try:
            code = _worker(request, out_fd, err_fd, imports)
        finally:
            try:
                import atexit

                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code & 0xFF)
    # Closed from here on (the worker was forked open: tests read their own /proc/self/fd):
    # the run cannot trace this process to forge the status it passes on.
    _prctl(_PR_SET_DUMPABLE, 0)
    os.close(out_fd)
    os.close(err_fd)
    while True:
        try:
            reaped, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if reaped == pid:
            os.write(status_w, str(status).encode())
            os._exit(0)


def _manager(request: dict[str, Any], go_r: int, config: dict[str, Any], imports: Any) -> None:
    """Outside the run's namespaces: wait for the host's go, build them, report the status."""
    rid = request["id"]
    try:
        _prctl(_PR_SET_DUMPABLE, 1)  # to write its own uid_map; the warm process stays closed
        if os.read(go_r, 1) != b"g":
            os._exit(0)
        os.close(go_r)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        out_fd = os.open(request["out"], flags, 0o600)
        err_fd = os.open(request["err"], flags, 0o600)
        _isolate(config["area"], config["stage"], request["run_dir"])
        status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            os.close(_proto)
            try:
                _init(request, out_fd, err_fd, status_w, imports)
            finally:
                os._exit(1)
        os.close(status_w)
        os.close(out_fd)
        os.close(err_fd)
        data = b""
        while True:
            chunk = os.read(status_r, 64)
            if not chunk:
                break
            data += chunk
        _, init_status = os.waitpid(pid, 0)
        status = int(data) if data else init_status
        _send({"event": "exit", "id": rid, "status": status})
    except BaseException as exc:
        _send({"event": "exit", "id": rid, "error": f"{type(exc).__name__}: {exc}"})
    os._exit(0)


#: The entries of sys.path that this process's own PYTHONPATH put there.
_STARTUP_PYTHONPATH = [
    os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
]


def main() -> None:
    global _proto
    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
    # The protocol on its own descriptor; the process's stdout and stderr go nowhere.
    _proto = os.dup(1)
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    _prctl(_PR_SET_DUMPABLE, 0)
    imported, failed, unsafe, out, err = _preimport(list(config["modules"]))
    if unsafe is not None:
        _send({"event": "unsafe", "why": unsafe})
        return
    _remember_namespaces()
    _send({"event": "ready", "pid": os.getpid(), "imported": imported, "failed": failed})
    gates: dict[str, int] = {}

    def reap(_signum: int, _frame: Any) -> None:
        """Ended managers are reaped at once (nothing of a run outlives it, not even a zombie)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    signal.signal(signal.SIGCHLD, reap)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        request = json.loads(line)
        op = request.get("op")
        if op == "quit":
            return
        if op == "run":
            _compile_scripts(list(request["argv"]))
            go_r, go_w = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(go_w)
                for fd in gates.values():
                    os.close(fd)
                stdin.close()
                _manager(request, go_r, config, (out, err))
                os._exit(0)
            os.close(go_r)
            gates[request["id"]] = go_w
            _send({"event": "started", "id": request["id"], "pid": pid})
        elif op == "import":
            more, failed_more, unsafe, more_out, more_err = _preimport(list(request["modules"]))
            out, err = out + more_out, err + more_err
            _remember_namespaces()
            _send(
                {
                    "event": "imported",
                    "id": request["id"],
                    "imported": more,
                    "failed": failed_more,
                    "unsafe": unsafe,
                }
            )
            if unsafe is not None:
                return  # forking from here on would not be safe
        elif op in ("go", "cancel"):
            fd = gates.pop(str(request["id"]), -1)
            if fd >= 0:
                if op == "go":
                    os.write(fd, b"g")
                os.close(fd)


if __name__ == "__main__":
    main()
