"""bubblewrap: a persistent, network-less, unprivileged shell per episode.

Inside, the sandbox sees read-only system folders (``/usr``, ``/etc``), the task interpreter and
its venv at their own paths (the interpreter finds its shared library through an absolute
RUNPATH), a private ``/tmp``, its own ``/proc``, only ``lo``, and ``/workspace``, the only
writable folder. Processes run as the unprivileged ``rcb-sandbox`` user when rcb-env runs as root.
Limits: a memory and a pids cgroup (v1 or v2, :mod:`rcb_env.sandbox.cgroups`) per sandbox, in
the cpu controller too where it is available (an equal CPU share per sandbox, and a cap with
``Limits.cpus``), and rlimits always.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from rcb_env import config as settings
from rcb_env import guest
from rcb_env.errors import SandboxError
from rcb_env.execution import ExecResult
from rcb_env.sandbox import cgroups
from rcb_env.sandbox.backend import Backend
from rcb_env.sandbox.backends.local import LocalExecutor
from rcb_env.sandbox.base import (
    Command,
    Executor,
    Limits,
    Program,
    Sandbox,
    SandboxConfig,
    WarmPath,
    chown_tree,
)
from rcb_env.sandbox.cgroups import Cgroup, with_oom
from rcb_env.sandbox.session import ShellSession
from rcb_env.sandbox.warm import WarmLaunch, WarmPool
from rcb_env.task import environments as envs
from rcb_env.task.models import Paper

_SYSTEM_RO = ("/usr", "/etc", "/lib", "/lib64", "/bin", "/sbin")


class BwrapOptions(BaseModel):
    """The bwrap backend's settings (``SandboxConfig.options`` with ``backend="bwrap"``, or
    ``auto`` when it picks bwrap)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cgroup_parent: str = "rcb-env"
    """The cgroup under which each sandbox gets its own group. Point it at a group you limit
    yourself to cap what all sandboxes together may use."""
    cgroup_limits: Literal["required", "best-effort", "off"] = "required"
    """``required`` refuses to run when the memory or pids limit cannot be set (cgroup v1 or
    v2), ``best-effort`` sets what it can, ``off`` relies on rlimits alone. The CPU share is
    set wherever the cpu controller is available, and its absence is a warning, not an error
    (unless ``Limits.cpus`` asks for a cap)."""
    read_only: tuple[Path, ...] = ()
    """More host folders bound read-only at their own paths (a paper's asset cache)."""
    cgroup_root: Path = Path("/sys/fs/cgroup")
    """Where the cgroup hierarchies are mounted (or a delegated v2 subtree)."""

    @field_validator("cgroup_parent")
    @classmethod
    def _relative_group(cls, value: str) -> str:
        parts = value.split("/")
        if value.startswith("/") or not value or any(p in ("", ".", "..") for p in parts):
            raise ValueError(
                f"cgroup_parent must be a relative group path like 'rcb-env': {value!r}"
            )
        return value

    def group(self, limits: Limits) -> Cgroup:
        """A new cgroup with ``limits`` for one sandbox or run, under :attr:`cgroup_parent`."""
        return Cgroup(limits, self.cgroup_parent, policy=self.cgroup_limits, root=self.cgroup_root)


@functools.cache
def _system_mounts() -> list[str]:
    """The system folders every sandbox sees, read-only (a symlink stays a symlink), and its own
    ``/proc``, ``/dev`` and ``/tmp``: what the probe runs in too. Never the host's whole tree: a
    recursive bind of ``/`` also takes every mount under it, and one that goes away meanwhile
    (a container's overlay) makes bwrap fail with EINVAL."""
    argv: list[str] = []
    for d in _SYSTEM_RO:
        p = Path(d)
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            argv += ["--ro-bind", d, d]
    return [*argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]


def probe_command(exe: str) -> list[str]:
    """What :func:`probe` runs: ``true`` in a sandbox with the mounts every sandbox has."""
    return [exe, "--unshare-all", "--die-with-parent", *_system_mounts(), "true"]


def probe() -> str | None:
    """None if bwrap really runs a sandbox here, else why not (never decided by ``which``)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    try:
        run = subprocess.run(
            probe_command(exe),
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to run: {exc}"
    if run.returncode != 0:
        return f"bwrap cannot create namespaces here: {run.stderr.decode(errors='replace')[:300]}"
    return None


def keyring_guard(python: str) -> list[str]:
    """A prefix for the sandbox's shell: the task interpreter joins an empty session keyring and
    installs the seccomp filter that refuses the keyring system calls
    (:func:`rcb_env.guest.keyrings.close_keyrings`, which every grading run also runs), then
    becomes the command that follows. Keys are outside every namespace: without it, one
    episode's shell could leave keys (their descriptions listed in ``/proc/keys`` to every
    process of the sandbox's user) for the next."""
    code = (
        f"{_keyrings_source()}\n"
        "import sys\n"
        "close_keyrings()\n"
        "os.execvp(sys.argv[1], sys.argv[1:])\n"
    )
    return [python, "-I", "-S", "-c", code]


@functools.cache
def _keyrings_source() -> str:
    return guest.text("keyrings")


@functools.cache
def _python_prefixes(python: str) -> tuple[str, ...]:
    """Folders the interpreter needs (venv and base installation), bound read-only in place."""
    run = subprocess.run(
        [python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if run.returncode != 0:
        raise SandboxError(f"task interpreter {python} does not run: {run.stderr.strip()[:300]}")
    prefixes = {str(Path(p).resolve()) for p in run.stdout.split()}
    prefixes.add(str(Path(python).parent.parent))
    # /usr is bound anyway; binding a folder inside it again would be redundant.
    return tuple(sorted(p for p in prefixes if p != "/usr" and not p.startswith("/usr/")))


def check_traversable(path: Path) -> None:
    """The unprivileged sandbox user must be able to reach ``path`` to bind it.

    Raises:
        SandboxError: a folder above ``path`` is closed to other users.
    """
    for folder in [path, *path.parents]:
        if folder.exists() and not folder.stat().st_mode & 0o001:
            raise SandboxError(
                f"the sandbox user cannot reach {path}: {folder} is not searchable by other users "
                "(choose a scratch folder such as /dev/shm with RCB_SCRATCH_DIR)"
            )


def _identity(user: str | None) -> tuple[int, int] | None:
    """uid/gid to drop to, when we are root and the sandbox user exists."""
    if user is None or os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def bwrap_command(
    *,
    binds: Sequence[tuple[str, str]],
    ro_binds: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    limits: Limits,
    identity: tuple[int, int] | None,
    dirs: Sequence[str] = (),
) -> list[str]:
    """The full launcher: [drop privileges] [rlimits] bwrap <profile> -- (command follows)."""
    mb = 1024 * 1024
    argv: list[str] = []
    if identity is not None:
        uid, gid = identity
        argv += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    argv += [
        "prlimit",
        f"--as={limits.memory_mb * mb}",
        f"--fsize={limits.file_size_mb * mb}",
        f"--nofile={limits.nofile}",
        f"--cpu={limits.cpu_s}",
        "--core=0",
    ]
    if identity is not None:
        # Per-user, so it only bites an unprivileged user (root ignores it).
        argv.append(f"--nproc={limits.pids * 4}")
    argv += ["--", "bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    argv += _system_mounts()
    for d in ro_binds:
        argv += ["--ro-bind", d, d]
    for src, dst in binds:
        argv += ["--bind", src, dst]
    for d in dirs:
        argv += ["--dir", d]
    # The sandbox's own root (bwrap's tmpfs) read-only too: only /tmp and the binds are writable.
    argv += ["--remount-ro", "/", "--chdir", cwd, "--clearenv"]
    for k, v in env.items():
        argv += ["--setenv", k, v]
    return argv


class BwrapExecutor:
    """One-shot commands under the same profile (used for grading runs)."""

    interpreter: str | None = None
    warm: WarmPath | None = None

    def __init__(self, config: SandboxConfig, scratch: Path) -> None:
        self.config = config
        self.limits = config.limits
        self.options = BwrapOptions.model_validate(config.options)
        self.python = str(config.python or settings.task_python())
        self._local = LocalExecutor(output_limit=config.output_limit, scratch=scratch)
        self._identity = _identity(config.user)

    def run(self, command: Command) -> ExecResult:
        argv, cwd, env = command.argv, command.cwd, command.env
        writable = command.writable
        area = writable or cwd
        if self._identity is not None:
            check_traversable(area.parent)
            chown_tree(area, *self._identity)
        group = self.options.group(self.config.limits)
        try:
            launcher = bwrap_command(
                binds=[(str(area), str(area))],
                ro_binds=(*_python_prefixes(self.python), *map(str, self.options.read_only)),
                cwd=str(cwd),
                env=env,
                limits=self.config.limits,
                identity=self._identity,
            )
            result = self._local.run(
                replace(
                    command,
                    argv=(*group.enter_command(), *launcher, *argv),
                    env={"PATH": os.environ.get("PATH", os.defpath)},
                )
            )
            return with_oom(result, 0, group.memory_events())
        finally:
            group.remove()

    def _group(self) -> Cgroup:
        return self.options.group(self.config.limits)

    def prepare(self, path: Path) -> None:
        if self._identity is not None:
            check_traversable(path.parent)
            chown_tree(path, *self._identity)

    def warm_command(
        self, *, area: Path, control: Path, stage: str, env: Mapping[str, str]
    ) -> WarmLaunch:
        """The warm process's sandbox: this profile, with the grading area writable and the
        control folder readable at their own paths, in a cgroup of its own."""
        if self._identity is not None:
            check_traversable(control.parent.parent)
            chown_tree(control.parent, *self._identity)
            for folder in (control.parent, area, control):
                folder.chmod(0o711)
        ro_binds = (*_python_prefixes(self.python), *map(str, self.options.read_only))
        group = self._group()
        prefix = [
            *group.enter_command(),
            *bwrap_command(
                binds=[(str(area), str(area))],
                ro_binds=(*ro_binds, str(control)),
                cwd="/",
                env=env,
                limits=self.config.limits,
                identity=self._identity,
                dirs=[stage],
            ),
        ]
        return WarmLaunch(prefix=prefix, run_group=self._group, close=group.remove)


class BwrapSandbox(Sandbox):
    backend = "bwrap"
    workspace_inside = "/workspace"
    control_mount = "/.rcb"

    def __init__(self, template: Path, config: SandboxConfig, scratch: Path) -> None:
        reason = probe()
        if reason is not None:
            raise SandboxError(reason)
        identity = _identity(config.user)
        if identity is not None:
            check_traversable(scratch)
        super().__init__(template, config, scratch)
        self.options = BwrapOptions.model_validate(config.options)
        self.python = str(config.python or settings.task_python())
        self._identity = identity
        self._session: ShellSession | None = None
        self._group: Cgroup | None = None
        self._scratch = scratch

    def _prepare_tree(self, path: Path) -> None:
        if self._identity is not None:
            chown_tree(path, *self._identity)

    def _launcher(self) -> list[str]:
        return [*self._sandbox_command(), *keyring_guard(self.python)]

    def _sandbox_command(self) -> list[str]:
        if self._group is not None:  # a restarted session gets a fresh, empty group
            self._group.remove()
        self._group = self.options.group(self.config.limits)
        venv_bin = str(Path(self.python).parent)
        env = {
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TERM": "dumb",
            **self.config.env,
        }
        return [
            *self._group.enter_command(),
            *bwrap_command(
                binds=[
                    (str(self.workspace), self.workspace_inside),
                    (str(self.control), self.control_inside),
                ],
                ro_binds=(*_python_prefixes(self.python), *map(str, self.options.read_only)),
                cwd=self.workspace_inside,
                env=env,
                limits=self.config.limits,
                identity=self._identity,
            ),
        ]

    def exec(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        if self.closed:
            raise SandboxError("sandbox is closed")
        if self._session is None:
            self._session = ShellSession(
                self._launcher,
                control_host=self.control,
                control_inside=self.control_inside,
                output_limit=self.config.output_limit,
                launcher_outside=True,
                launcher_env={"PATH": os.environ.get("PATH", os.defpath)},  # no host secret
            )
        before = self._group.memory_events()[0] if self._group is not None else 0
        result = self._session.run(command, timeout_s=timeout_s or self.config.command_timeout_s)
        if self._group is None:
            return result
        return with_oom(result, before, self._group.memory_events())

    def executor(self) -> Executor:
        return BwrapExecutor(self.config, self._scratch)

    @property
    def program_python(self) -> str:
        return self.python

    def run_program(self, program: Program) -> ExecResult:
        """The program in this sandbox's profile (``--unshare-all``: no network; the workspace
        writable at :attr:`workspace_inside`, its home at :attr:`program_home_inside`, its
        folders read-only), behind the keyring guard, in a cgroup of its own."""
        if self.closed:
            raise SandboxError("sandbox is closed")
        home = self._program_home(program)
        venv_bin = str(Path(self.python).parent)
        env = {
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": self.program_home_inside,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            **self.config.env,
            **program.env,
        }
        group = self.options.group(self.config.limits)
        try:
            launcher = bwrap_command(
                binds=[
                    (str(self.workspace), self.workspace_inside),
                    (str(home), self.program_home_inside),
                ],
                ro_binds=(
                    *_python_prefixes(self.python),
                    *map(str, self.options.read_only),
                    *program.read_only,
                ),
                cwd=self.workspace_inside,
                env=env,
                limits=self.config.limits,
                identity=self._identity,
            )
            local = LocalExecutor(output_limit=self.config.output_limit, scratch=self._scratch)
            result = local.run(
                Command(
                    argv=(
                        *group.enter_command(),
                        *launcher,
                        *keyring_guard(self.python),
                        *program.argv,
                    ),
                    cwd=self.root,
                    env={"PATH": os.environ.get("PATH", os.defpath)},
                    timeout_s=program.timeout_s,
                )
            )
            return with_oom(result, 0, group.memory_events())
        finally:
            group.remove()

    def _stop_session(self) -> None:
        if self._session is not None:
            self._session.kill()
            self._session = None
        if self._group is not None:
            self._group.remove()
            self._group = None


class BwrapBackend(Backend):
    """bubblewrap namespaces, cgroup limits; the default where it runs."""

    name = "bwrap"
    auto = True
    options_model = BwrapOptions
    options: BwrapOptions

    def __init__(self, config: SandboxConfig, scratch: Path) -> None:
        super().__init__(config, scratch)
        if self.options.cgroup_limits != "off":
            cgroups.check(self.options.cgroup_limits, self.options.cgroup_root)
            cgroups.sweep(parent_name=self.options.cgroup_parent, root=self.options.cgroup_root)
        self._warm = WarmPool(scratch, config.warm_processes)

    @classmethod
    def probe(cls) -> str | None:
        return probe()

    def _for(self, paper: Paper) -> SandboxConfig:
        """The config with the paper's interpreter and asset cache, bound read-only into its
        sandboxes, and its environment variables."""
        update: dict[str, object] = {}
        if self.config.python is None:
            update["python"] = envs.python_for(paper)
        if paper.overlay.assets and envs.assets_ready(paper):  # not fetched: nothing to bind
            root = envs.asset_root(paper)
            if _identity(self.config.user) is not None:
                check_traversable(root)
            update["options"] = {
                **self.config.options,
                "read_only": (*self.options.read_only, root),
            }
        if paper.overlay.env:
            update["env"] = {**self.config.env, **envs.task_env(paper)}
        return self.config.model_copy(update=update) if update else self.config

    def create(self, template: Path, paper: Paper) -> Sandbox:
        return BwrapSandbox(template, self._for(paper), self.scratch)

    def grading_executor(self, paper: Paper) -> Executor:
        cold = BwrapExecutor(self._for(paper), self.scratch)
        if not self.config.warm_grading:
            return cold
        return self._warm.executor(
            cold, paper, python=cold.python, output_limit=self.config.output_limit
        )

    def close(self) -> None:
        self._warm.close()

    def sandbox_uids(self) -> set[int]:
        identity = _identity(self.config.user)
        return {identity[0]} if identity is not None else set()
