"""The contracts: an :class:`Executor` runs one :class:`Command` to completion (grading's runs),
with a :class:`WarmPath` when it has warm processes; a :class:`Sandbox` holds an episode's
workspace and a persistent shell (tools)."""

from __future__ import annotations

import atexit
import contextlib
import os
import stat
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from rcb_env.errors import ConfigError, SandboxError
from rcb_env.execution import ExecResult
from rcb_env.sandbox import registry
from rcb_env.sandbox import scratch as scratch_dirs
from rcb_env.sandbox import workspace as ws

__all__ = [
    "HOST_OWNED",
    "BackendName",
    "Command",
    "Executor",
    "Limits",
    "Program",
    "Sandbox",
    "SandboxConfig",
    "WarmPath",
    "WarmUnavailable",
    "chown_tree",
]


class WarmUnavailable(SandboxError):
    """A warm executor cannot run this command in a warm process, and decided nothing: run it
    again cold, in a fresh folder (the one laid out for the warm process may be gone or half
    used)."""


class Executor(Protocol):
    """Runs one command to completion in a prepared folder."""

    interpreter: str | None
    """The Python that runs inside this executor's sandbox (a container image's own), or None
    for the task interpreter of the host (bound into the sandbox)."""
    warm: WarmPath | None
    """Its warm processes (:mod:`rcb_env.sandbox.warm`): where a command's folder must be to run
    in one, and a new one's probe; or None: it runs every command cold."""
    limits: Limits
    """The limits every command it runs gets (its sandbox's; a grading's test process sets its
    own address-space and file-size limits to these too, so one value is documented and
    enforced wherever it runs)."""

    def run(self, command: Command) -> ExecResult:
        """Run ``command`` to completion: ``argv`` in ``cwd``, the whole process tree killed at
        ``timeout_s``; ``writable`` is the only folder it may write (sandboxing executors bind
        it; others ignore it). The result's ``path`` says how it ran (``warm`` or ``cold``).

        Raises:
            WarmUnavailable: (an executor with warm processes) a command laid out in a warm
                process's :meth:`~WarmPath.area` that that process could not run.
            SandboxError: the command could not be started at all.
        """
        ...


class WarmPath(Protocol):
    """What an executor with warm processes (:class:`rcb_env.sandbox.warm.WarmExecutor`) says
    besides running commands: its ``run`` runs a command whose writable folder was made in
    :meth:`area` in the warm process of the command's environment, any other cold."""

    def area(self, env: Mapping[str, str], python: str) -> Path:
        """The folder in which the writable folder of a command with ``env`` (per-run folders
        aside) under ``python`` is to be made for it to run warm (the only folder of the host
        the warm process sees); the process is started on first use.

        Raises:
            WarmUnavailable: no warm process for it: run it cold.
        """
        ...

    def claim_probe(self, env: Mapping[str, str], python: str) -> bool:
        """Is a run in this environment to be the probe of its (new) warm process
        (:attr:`Command.probe`)? True once per process.

        Raises:
            WarmUnavailable: no warm process for it.
        """
        ...

    def start(self, env: Mapping[str, str], python: str) -> bool:
        """Start the warm process of commands with ``env`` under ``python`` now, ahead of them;
        True if one is live (a failure is quiet: the commands decide)."""
        ...


@dataclass(frozen=True)
class Command:
    """One command for an executor (:meth:`Executor.run`): what a grading attempt runs in its
    copy, a probe, a survivor check."""

    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]
    timeout_s: float
    needles: tuple[str, ...] = ()
    """Words to look for in the whole output (:attr:`ExecResult.found`)."""
    writable: Path | None = None
    """The only folder the command may write (None: ``cwd``)."""
    probe: bool = False
    """It is a new warm process's probe (:meth:`WarmPath.claim_probe`: the first run, of the
    pristine paper): after it the warm process also imports what it imported. Cold executors
    ignore it."""


@dataclass(frozen=True)
class Program:
    """One program run to its end in an episode's sandbox (:meth:`Sandbox.run_program`): an
    agent that is a program of its own (an agent CLI), started in the workspace, with the
    sandbox's isolation (no network), a few more host folders read-only, and a writable home
    folder of its own (:attr:`Sandbox.program_home_inside`)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    """Its environment, over the sandbox's own (``HOME`` is its home folder)."""
    read_only: tuple[str, ...] = ()
    """Host folders bound read-only at their own paths (its install folder, the folder of the
    model proxy's socket)."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Files written into its home folder before it starts (path relative to it -> text)."""
    timeout_s: float = 1800.0
    """Wall-clock limit: the program and everything it started is killed then."""


BackendName = str
"""``auto`` or the name of a registered backend (:func:`rcb_env.sandbox.backend_names`)."""


class Limits(BaseModel):
    """Resource limits of one sandbox (cgroups where available, rlimits always)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_mb: int = 4096
    """Memory of the whole sandbox (cgroup) and address space of each process (rlimit)."""
    pids: int = 256
    """Processes and threads in the sandbox."""
    file_size_mb: int = 512
    """Largest file a process may write."""
    cpu_s: int = 3600
    """CPU seconds per process."""
    cpus: float | None = Field(default=None, gt=0)
    """A hard cap on the sandbox's CPU, in cores (cgroup ``cpu.max`` / ``cpu.cfs_quota_us``,
    Docker's ``nano_cpus``). None (the default): no cap, so a run alone may use every core;
    every sandbox still gets an equal share of the CPU when runs compete (its cgroup's CPU
    weight), however many processes it starts."""
    nofile: int = 1024
    """Open files per process."""


class SandboxConfig(BaseModel):
    """How episodes are sandboxed. What only one backend has (docker's base image, bwrap's
    cgroups) is in :attr:`options`, that backend's own settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: BackendName = "auto"
    """``auto`` probes bwrap and uses it when it really runs; ``local`` must be asked for; any
    registered backend by name."""
    options: dict[str, Any] = {}
    """Settings of the chosen backend, validated by its own model (``Backend.options_model``:
    ``DockerOptions``, ``BwrapOptions``).
    For a backend named here, checked now and kept complete (defaults filled in); for ``auto``,
    kept as given and checked once resolved."""
    limits: Limits = Limits()
    """Resource limits per sandbox."""
    command_timeout_s: float = 120.0
    """Default wall-clock limit of one shell command."""
    output_limit: int = 20_000
    """Bytes of a command's stdout/stderr kept (head and tail)."""
    user: str | None = "rcb-sandbox"
    """Unprivileged user the sandboxed processes run as, when rcb-env runs as root."""
    python: Path | None = None
    """Task interpreter (bound read-only in the sandbox); default: the configured task python."""
    env: dict[str, str] = {}
    """More environment variables of the sandbox's shell (a paper's overlay ``env``)."""
    warm_grading: bool = True
    """Grading runs start from a warm process per paper environment that has imported the
    tests' third-party modules (:mod:`rcb_env.sandbox.warm`); False: a fresh interpreter each."""
    warm_processes: int = Field(default=4, ge=1)
    """Warm processes kept alive at once per sandbox factory (each holds its paper's imports:
    some hundred MiB with torch); the least recently used idle one makes room."""

    @model_validator(mode="before")
    @classmethod
    def _no_backend_settings_here(cls, data: Any) -> Any:
        """A backend's own setting given at the top level (where older versions had it) is
        refused with where it goes now."""
        if isinstance(data, Mapping):
            for key, value in data.items():
                owners = [] if key in cls.model_fields else registry.owners(str(key))
                if owners:
                    raise ValueError(
                        f"{key} is a {' and '.join(owners)} option: "
                        f"SandboxConfig(options={{{key!r}: {value!r}}})"
                    )
        return data

    @field_validator("options")
    @classmethod
    def _backend_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        name = info.data.get("backend")
        model = registry.options_model(name) if isinstance(name, str) else None
        if name is None or model is None:
            return value
        try:
            checked = registry.check_options(name, model, value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        complete: dict[str, Any] = checked.model_dump(mode="json")
        return complete

    def with_options(self, **changes: Any) -> SandboxConfig:
        """This config with these backend settings changed (checked as a new config)."""
        data = {**self.model_dump(), "options": {**self.options, **changes}}
        return SandboxConfig.model_validate(data)


_live: weakref.WeakSet[Sandbox] = weakref.WeakSet()
_live_lock = threading.Lock()


@atexit.register
def _close_leftovers() -> None:
    with _live_lock:
        leftovers = list(_live)
    for sb in leftovers:
        sb.close()


class Sandbox(ABC):
    """One episode's workspace (a copy of a snippet's masked template) plus a shell to run
    commands in it. File operations act on the workspace copy from the host, with every path
    confined to it; commands run inside the backend's isolation.

    Use as a context manager, or call :meth:`close`; an at-exit hook closes leftovers.
    """

    backend: str = "abstract"
    #: Where the workspace appears to commands run in the sandbox.
    workspace_inside: str = "/workspace"
    #: Where the control folder (:attr:`control`, for rcb-env's own files such as the shell
    #: protocol's and the audit scanner) appears to commands; None: at its host path.
    control_mount: str | None = None

    #: Where an agent program's home folder appears to it (:meth:`run_program`).
    program_home_inside: str = "/agent"

    @property
    def control_inside(self) -> str:
        """The control folder as commands in the sandbox see it."""
        return self.control_mount or str(self.control)

    def __init__(
        self, template: Path, config: SandboxConfig, scratch: Path, *, root: Path | None = None
    ) -> None:
        self.template = template
        self.config = config
        self.root = root or scratch_dirs.make(f"rcb-{self.backend}-", scratch)
        self.workspace = self.root / "workspace"
        self.control = self.root / "control"
        self.closed = False
        with _live_lock:
            _live.add(self)

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Lay out a fresh workspace. The shell starts lazily on the first command."""
        ws.copy_template(self.template, self.workspace)
        self.control.mkdir(exist_ok=True)
        self._prepare_tree(self.root)

    def reset(self) -> None:
        """Back to the pristine masked workspace; the shell and every process in it end."""
        self._stop_session()
        self.start()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop_session()
        scratch_dirs.discard(self.root)
        with _live_lock:
            _live.discard(self)

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # commands --------------------------------------------------------------------------------
    @abstractmethod
    def exec(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        """Run a shell command in the persistent session (cwd and variables persist).

        Raises:
            SandboxError: the sandbox could not run it (an infrastructure failure).
        """

    @abstractmethod
    def executor(self) -> Executor:
        """An executor with this backend's isolation, for grading runs in fresh folders."""

    @abstractmethod
    def _stop_session(self) -> None: ...

    @property
    def program_python(self) -> str:
        """An interpreter a program can run in this sandbox (a forwarder's)."""
        return "/usr/bin/python3"

    @property
    def program_home(self) -> Path:
        """The host side of an agent program's home folder (its state and result files, read
        after it ends; gone when the sandbox closes)."""
        return self.root / "program-home"

    def run_program(self, program: Program) -> ExecResult:
        """Run ``program`` to its end (or its ``timeout_s``: ``timed_out``) in the workspace,
        with this sandbox's isolation, its ``read_only`` folders, and a fresh home folder
        holding its ``files`` (:attr:`program_home`, :attr:`program_home_inside` inside).
        Not a tool: the episode driver runs an agent program through it.

        Raises:
            SandboxError: this backend cannot run programs, or could not start it.
        """
        raise SandboxError(f"the {self.backend} backend cannot run an agent program")

    def _program_home(self, program: Program) -> Path:
        """A fresh home folder with the program's files (given to the sandbox's user)."""
        home = self.program_home
        if home.exists():
            scratch_dirs.discard(home)
        home.mkdir(mode=0o755)
        for rel, text in program.files.items():
            ws.write_text(home, rel, text)
        self._prepare_tree(home)
        return home

    def _prepare_tree(self, path: Path) -> None:  # noqa: B027 - an optional hook
        """Make a host folder usable by the sandboxed user (e.g. chown); by default nothing."""

    # files -----------------------------------------------------------------------------------
    def read_file(self, path: str) -> str:
        return ws.read_text(self.workspace, path)

    def write_file(self, path: str, content: str) -> None:
        target = ws.write_text(self.workspace, path, content)
        self._prepare_tree(target)

    def list_files(self, path: str = ".") -> list[str]:
        return ws.list_tree(self.workspace, path)

    def search(
        self, pattern: str, path: str = ".", glob: str | None = None
    ) -> list[tuple[str, int, str]]:
        return ws.search(self.workspace, pattern, path, glob)

    def changed_files(self) -> list[str]:
        return ws.changed_files(self.template, self.workspace)

    def diff(self) -> str:
        """Unified diff of the workspace against the masked original."""
        return ws.unified_diff(self.template, self.workspace)


#: A folder of this name in a tree keeps its owner (and what is in it): the host's own files in
#: a sandbox's folder, such as a grading run's report, which the run may append to but not read
#: (:mod:`rcb_env.grading.grader`).
HOST_OWNED = "_rcb_host"


#: Entries :func:`chown_tree` gives away at most: a larger tree is refused. Trees the host lays out
#: are far smaller; a workspace's control folder, which the agent can fill, need not be walked
#: for minutes.
CHOWN_LIMIT = 2_000_000

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give a folder (or file) and everything in it to ``uid:gid``, except any folder named
    :data:`HOST_OWNED` and what it holds. Follows no symbolic link, not even ``path`` itself
    (a sandbox may have swapped a file it just wrote for a link to a folder of the host), and
    enters no other file system.

    The tree may be partly the agent's (the control folder of a workspace), so the walk is
    bounded and total in depth: no recursion (``os.fwalk`` recurses in Python 3.11, and holds a
    descriptor per level), one folder open at a time, its entries changed relative to it. The
    walk climbs back through ``..``, checked to be the very folder it came down from.

    Raises:
        OSError: ``path`` is not there.
        SandboxError: more than :data:`CHOWN_LIMIT` entries, or the tree was moved around
            while it was walked.
    """
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        os.chown(path, uid, gid, follow_symlinks=False)
        return
    walk = _ChownWalk(path, uid, gid)
    try:
        walk.run()
    finally:
        os.close(walk.fd)


class _ChownWalk:
    """One :func:`chown_tree` of a folder, depth first. :attr:`fd` is always the one open
    folder (the caller closes it, whatever happens)."""

    def __init__(self, path: Path, uid: int, gid: int) -> None:
        self.path, self.uid, self.gid = path, uid, gid
        self.fd = os.open(path, _DIR_FLAGS)

    def _move(self, fd: int) -> None:
        old, self.fd = self.fd, fd
        os.close(old)

    def _refuse(self, why: str) -> SandboxError:
        return SandboxError(f"{self.path}: {why}")

    def run(self) -> None:
        uid, gid = self.uid, self.gid
        os.chown(self.fd, uid, gid)
        here = os.fstat(self.fd)
        dev, ident = here.st_dev, (here.st_dev, here.st_ino)
        pending = _names(self.fd)
        seen = len(pending)
        # Each level above the current folder: its names still to do, and its identity.
        above: list[tuple[list[str], tuple[int, int]]] = []
        while True:
            if seen > CHOWN_LIMIT:
                raise self._refuse(f"more than {CHOWN_LIMIT} entries to give to the sandbox")
            if not pending:
                if not above:
                    return
                self._move(os.open("..", _DIR_FLAGS, dir_fd=self.fd))
                pending, ident = above.pop()
                st = os.fstat(self.fd)
                if (st.st_dev, st.st_ino) != ident:
                    raise self._refuse("the tree was moved while its owner was being set")
                continue
            name = pending.pop()
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode) and name == HOST_OWNED:
                continue
            try:
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError
                child = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
            except OSError:  # not a folder (any more): the entry itself, never followed
                with contextlib.suppress(FileNotFoundError):
                    os.chown(name, uid, gid, dir_fd=self.fd, follow_symlinks=False)
                continue
            cst = os.fstat(child)
            try:
                os.chown(child, uid, gid)
                # A mount point: its own file system is not entered.
                names = _names(child) if cst.st_dev == dev else []
            except BaseException:
                os.close(child)
                raise
            if not names:
                os.close(child)
                continue
            seen += len(names)
            above.append((pending, ident))
            pending, ident = names, (cst.st_dev, cst.st_ino)
            self._move(child)


def _names(fd: int) -> list[str]:
    """The entries of the open folder ``fd`` (one more than :data:`CHOWN_LIMIT` at most); none
    if it cannot be listed."""
    names: list[str] = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) > CHOWN_LIMIT:
                    break
    except OSError:
        pass
    return names
