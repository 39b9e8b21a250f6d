"""Docker: one container per episode from the paper's image, no network, read-only root.

The container's PID 1 (``sleep infinity`` under docker's init, as root with every capability
dropped) keeps it alive; the agent's persistent shell runs in it as uid 1000 through ``docker exec``
and the same pipe protocol as the other backends. The workspace and control folders are host
folders bind-mounted at ``/workspace`` and ``/.rcb``. Grading runs in a fresh container from the
same image with only the grading copy mounted. Every Docker error maps to :class:`SandboxError`
in :func:`docker_errors`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rcb_env import config as settings
from rcb_env._common import truncate
from rcb_env.errors import SandboxError
from rcb_env.execution import ExecResult
from rcb_env.logs import get_logger
from rcb_env.sandbox import registry
from rcb_env.sandbox.backend import Backend
from rcb_env.sandbox.backends.docker.engine import (
    GID,
    INTERPRETER,
    LABEL_OWNER,
    LABEL_ROLE,
    UID,
    USER,
    client,
    container_options,
    docker_errors,
    docker_types,
    list_containers,
    owner_label,
    probe,
    remove_container,
)
from rcb_env.sandbox.backends.docker.images import LABEL
from rcb_env.sandbox.backends.docker.pool import ContainerPool, Slot, cpu_options
from rcb_env.sandbox.base import (
    Command,
    Executor,
    Program,
    Sandbox,
    SandboxConfig,
    WarmPath,
    chown_tree,
)
from rcb_env.sandbox.session import ShellSession
from rcb_env.sandbox.warm import WarmLaunch, WarmPool
from rcb_env.task.models import Paper

log = get_logger(__name__)

__all__ = ["DockerBackend", "DockerExecutor", "DockerOptions", "DockerSandbox"]


class DockerOptions(BaseModel):
    """The docker backend's settings (``SandboxConfig.options`` with ``backend="docker"``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    docker_base: str = Field(default_factory=settings.docker_base)
    """The base the paper images were built from (part of their tag)."""
    pool_size: int = 0
    """Started containers kept ready per image, so an episode does not wait for one."""
    images: dict[str, str] = Field(default_factory=dict)
    """Paper id -> the image to use instead of the built one's tag: a tag, an image id
    (``sha256:...``) or a reference by digest (``name@sha256:...``), e.g. an image pulled from
    a registry or loaded from an archive."""


class DockerSandbox(Sandbox):
    backend = "docker"
    control_mount = "/.rcb"
    workspace_inside = "/workspace"

    def __init__(self, template: Path, config: SandboxConfig, scratch: Path, slot: Slot) -> None:
        super().__init__(template, config, scratch, root=slot.root)
        self.slot = slot
        self._session: ShellSession | None = None
        self._scratch = scratch

    def _prepare_tree(self, path: Path) -> None:
        chown_tree(path, UID, GID)

    def exec(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        if self.closed:
            raise SandboxError("sandbox is closed")
        status = self.slot.container.status
        with docker_errors("checking the container"):
            self.slot.container.reload()
            status = self.slot.container.status
        if status != "running":
            raise SandboxError(f"docker: the episode's container is {status}")
        if self._session is None:
            cid = self.slot.container.id
            self._session = ShellSession(
                lambda: ["docker", "exec", "-i", "-u", USER, "-w", "/workspace", cid],
                control_host=self.control,
                control_inside=self.control_inside,
                output_limit=self.config.output_limit,
                on_kill=self.slot.kill_user_processes,
                launcher_outside=True,
            )
        result = self._session.run(command, timeout_s=timeout_s or self.config.command_timeout_s)
        if result.exit_code is None and not result.timed_out:
            # The shell ended without a status: the agent's doing, or the container (or the
            # engine) went away under the command. Only the first is the agent's business.
            with docker_errors("checking the container after its shell ended"):
                self.slot.container.reload()
            if self.slot.container.status != "running":
                raise SandboxError(
                    f"docker: the episode's container is {self.slot.container.status} "
                    "(it stopped during the command)"
                )
        return result

    def executor(self) -> Executor:
        return DockerExecutor(self.slot.image, self.config, self.slot.docker)

    @property
    def program_python(self) -> str:
        return INTERPRETER

    def run_program(self, program: Program) -> ExecResult:
        """The program in a container of its own from the episode's image (``--network=none``,
        read-only root, no capabilities, the sandbox's limits), as the agent's user, with the
        workspace and its home writable and its folders (its install, the proxy's socket
        folder) bound read-only at their own paths: the install is the host's, the same bits
        as in bwrap, never baked into each paper's image."""
        if self.closed:
            raise SandboxError("sandbox is closed")
        home = self._program_home(program)
        volumes = {
            str(self.workspace): {"bind": self.workspace_inside, "mode": "rw"},
            str(home): {"bind": self.program_home_inside, "mode": "rw"},
            **{p: {"bind": p, "mode": "ro"} for p in program.read_only},
        }
        command = Command(
            argv=program.argv,
            cwd=Path(self.workspace_inside),
            env={
                "HOME": self.program_home_inside,
                "LANG": "C.UTF-8",
                "TERM": "dumb",
                **self.config.env,
                **program.env,
            },
            timeout_s=program.timeout_s,
        )
        return DockerExecutor(self.slot.image, self.config, self.slot.docker).run_in(
            command, volumes, role="agent"
        )

    def _stop_session(self) -> None:
        if self._session is not None:
            self._session.kill()
            self._session = None
        else:
            self.slot.kill_user_processes()

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self.slot.remove()


class DockerExecutor:
    """One-shot commands (grading) in a fresh container from the paper's image."""

    interpreter: str | None = INTERPRETER
    warm: WarmPath | None = None

    def __init__(self, image: str, config: SandboxConfig, docker: Any = None) -> None:
        self.image = image
        self.config = config
        self.limits = config.limits
        self.docker = docker if docker is not None else client()

    def prepare(self, path: Path) -> None:
        chown_tree(path, UID, GID)

    def warm_command(
        self, *, area: Path, control: Path, stage: str, env: Mapping[str, str]
    ) -> WarmLaunch:
        """A warm process in a long-lived container of this image (see :class:`_WarmContainer`)."""
        chown_tree(control.parent, UID, GID)
        for folder in (control.parent, area, control):
            folder.chmod(0o711)
        box = _WarmContainer(self)
        return WarmLaunch(
            prefix=box.command(area, control, stage, env),
            run_group=box.run_group,
            close=box.close,
            env=dict(os.environ),
            search_root=box.search_root,
            run_env=box.run_env,
        )

    def run(self, command: Command) -> ExecResult:
        area = command.writable or command.cwd
        chown_tree(area, UID, GID)
        return self.run_in(command, {str(area): {"bind": str(area), "mode": "rw"}})

    def run_in(
        self, command: Command, volumes: Mapping[str, Mapping[str, str]], role: str = "grading"
    ) -> ExecResult:
        """``command`` to its end in a fresh container of the image with these mounts (host
        folder -> ``{bind, mode}``), no network."""
        argv, cwd, env, timeout_s = command.argv, command.cwd, command.env, command.timeout_s
        needles = command.needles
        start = time.monotonic()
        with docker_errors(f"starting a {role} container from {self.image}"):
            container = self.docker.containers.run(
                self.image,
                list(argv),
                volumes={k: dict(v) for k, v in volumes.items()},
                working_dir=str(cwd),
                environment={
                    "PATH": f"{Path(INTERPRETER).parent}:/usr/local/bin:/usr/bin:/bin",
                    **env,
                },
                user=USER,
                # What the engine keeps of the run's output, and so what the host reads back:
                # bounded (the file-size limit does not cover a pipe).
                log_config=docker_types().LogConfig(
                    type="json-file", config={"max-size": "16m", "max-file": "2"}
                ),
                **container_options(self.config.limits, role),
                **cpu_options(self.config.limits),
            )
        timed_out = False
        try:
            with docker_errors("waiting for the grading container"):
                waiting = time.monotonic()
                try:
                    status = container.wait(timeout=timeout_s)
                    code = int(status.get("StatusCode", -1))
                except Exception as exc:
                    import requests.exceptions

                    # Over a unix socket the SDK reports its read timeout as a ConnectionError:
                    # only the clock tells a timeout from an engine that went away.
                    expired = time.monotonic() - waiting >= timeout_s - 0.5
                    if not isinstance(exc, requests.exceptions.RequestException) or not expired:
                        raise
                    timed_out = True
                    container.kill()
                    code = int(container.wait(timeout=60).get("StatusCode", -1))
                out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
                err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
                container.reload()
                oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        finally:
            remove_container(container)
        limit = self.config.output_limit
        found = tuple(n for n in needles if n in out or n in err)
        signal_no = code - 128 if code > 128 else None
        return ExecResult(
            exit_code=None if signal_no else code,
            signal=signal_no,
            timed_out=timed_out,
            stdout=truncate(out, limit),
            stderr=truncate(err, limit),
            duration_s=time.monotonic() - start,
            found=found,
            oom_killed=oom,
        )


class _WarmContainer:
    """The container of one warm process (started by the docker CLI with its stdin and stdout
    as the protocol's pipes) and its per-run cgroups, nested in the container's own."""

    #: The container may hold its warm process and this many runs at their full limits.
    RUNS = 3

    def __init__(self, executor: DockerExecutor) -> None:
        import uuid

        self.executor = executor
        self.name = f"rcb-warm-{uuid.uuid4().hex[:12]}"
        self.parent: str | None = None

    def command(self, area: Path, control: Path, stage: str, env: Mapping[str, str]) -> list[str]:
        limits = self.executor.config.limits
        mem = limits.memory_mb * (self.RUNS + 1)
        fsize = limits.file_size_mb * 1024 * 1024
        argv = [
            "docker",
            "run",
            "-i",
            "--rm",
            "--name",
            self.name,
            "--network",
            "none",
            "--read-only",
            "--tmpfs",
            "/tmp:rw,exec,size=512m,mode=1777",
            "--tmpfs",
            f"{stage}:rw,size=1m",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            # The warm process builds each run's namespaces itself (user, mount, PID, network,
            # IPC), which Docker's default seccomp profile refuses, and mounts each run's own
            # /proc, which Docker's masked /proc paths refuse; the runs are confined by those
            # namespaces, no capability, and this container.
            "--security-opt",
            "seccomp=unconfined",
            "--security-opt",
            "systempaths=unconfined",
            "--init",
            "--user",
            USER,
            "--memory",
            f"{mem}m",
            "--memory-swap",
            f"{mem}m",
            "--pids-limit",
            str(limits.pids * (self.RUNS + 1)),
            "--ulimit",
            f"nofile={limits.nofile}:{limits.nofile}",
            "--ulimit",
            f"fsize={fsize}:{fsize}",
            "--ulimit",
            "core=0",
            "--label",
            f"{LABEL}=1",
            "--label",
            f"{LABEL_OWNER}={owner_label()}",
            "--label",
            f"{LABEL_ROLE}=warm-grading",
            "-v",
            f"{area}:{area}",
            "-v",
            f"{control}:{control}:ro",
            "-w",
            "/",
        ]
        nano_cpus = cpu_options(limits, self.RUNS + 1).get("nano_cpus")
        if nano_cpus is not None:
            argv += ["--cpus", f"{nano_cpus / 1e9:.3f}"]
        for k, v in env.items():
            argv += ["-e", f"{k}={v}"]
        return [*argv, self.executor.image]

    def search_root(self, _launcher_pid: int) -> int:
        """The container's init on the host; also finds the container's cgroup."""
        with docker_errors("inspecting the warm container"):
            container = self.executor.docker.containers.get(self.name)
            pid = int(container.attrs["State"]["Pid"])
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                if "memory" in controllers.split(",") or controllers == "":
                    self.parent = path.strip("/")
                    break
        return pid

    def run_group(self) -> Any:
        from rcb_env.sandbox.cgroups import Cgroup

        if self.parent is None:
            raise SandboxError("the warm container's cgroup is unknown")
        return Cgroup(self.executor.config.limits, self.parent, policy="required")

    def run_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {**env, "PATH": f"{Path(INTERPRETER).parent}:/usr/local/bin:/usr/bin:/bin"}

    def close(self) -> None:
        with contextlib.suppress(SandboxError), docker_errors("removing the warm container"):
            self.executor.docker.api.remove_container(self.name, force=True)


class DockerBackend(Backend):
    """A container per episode from the paper's image."""

    name = "docker"
    brings_interpreter = True
    preparation_s = 3600.0  # the largest environment image built here took 916 s
    options_model = DockerOptions
    options: DockerOptions

    def __init__(self, config: SandboxConfig, scratch: Path) -> None:
        super().__init__(config, scratch)
        self._docker = client()
        self._pool = ContainerPool(self._docker, config, scratch, self.options.pool_size)
        self._images: dict[str, str] = {}
        self._unbuildable: dict[str, str] = {}
        """Paper id -> why its image could not be built here (not tried again)."""
        self._lock = threading.Lock()
        self._warm = WarmPool(scratch, config.warm_processes)

    @classmethod
    def probe(cls) -> str | None:
        return probe()

    @property
    def engine(self) -> Any:
        return self._docker

    def environment_key(self, paper: Paper) -> str | None:
        return self.image(paper)

    @classmethod
    def unavailable(cls, paper: Paper, config: SandboxConfig) -> str | None:
        from rcb_env.sandbox.backends.docker import images

        options = registry.check_options(cls.name, cls.options_model, config.options)
        assert isinstance(options, DockerOptions)
        given = options.images.get(paper.id)
        tag = given or images.image_tag(paper, images.ImageConfig(base=options.docker_base))
        engine = client()
        try:
            if images.image_exists(engine, tag):
                return None
        finally:
            engine.close()
        if given:
            return f"its image {given} (the docker option `images`) is not on the engine"
        return f"its image {tag} is not built (rcb-env images build --base {options.docker_base})"

    def ensure_available(self, paper: Paper) -> None:
        """The paper's image on this engine: built here when it is missing, with this
        machine's settings (the base image of :attr:`DockerOptions.docker_base`, part of the
        tag, and the wheels folder remembered by ``images build --wheels``), one build per tag
        at a time on the machine, and checked by its content tag
        (:func:`.images.ensure`). An image named by the ``images`` option is used as given,
        never built. A paper whose build failed is not tried again by this instance.

        Raises:
            SandboxError: the image is missing and cannot be built here (why).
        """
        from rcb_env.sandbox.backends.docker import images

        if paper.id in self.options.images:
            self.image(paper)
            return
        with self._lock:
            if paper.id in self._images:
                return
            failed = self._unbuildable.get(paper.id)
        if failed is not None:
            raise SandboxError(failed)
        cfg = images.ImageConfig(base=self.options.docker_base, wheels=settings.docker_wheels())
        try:
            with docker_errors(f"making the image of {paper.id}"):
                tag, built = images.ensure(
                    self._docker, paper, cfg, progress=lambda line: log.debug(line, paper=paper.id)
                )
        except SandboxError as exc:
            why = (
                f"the image of {paper.id} is not on this Docker engine and cannot be built "
                f"here (base {cfg.base}, wheels {cfg.wheels or 'none: pip uses an index'}): {exc}"
            )
            with self._lock:
                self._unbuildable[paper.id] = why
            raise SandboxError(why) from exc
        if built:
            log.info("built a paper image on this machine", paper=paper.id, image=tag)

    def image(self, paper: Paper) -> str:
        """The paper's image tag, which must have been built.

        Raises:
            SandboxError: it has not been built (with the command that builds it).
        """
        from rcb_env.sandbox.backends.docker import images

        with self._lock:
            if paper.id in self._images:
                return self._images[paper.id]
        tag = self.options.images.get(paper.id) or images.image_tag(
            paper, images.ImageConfig(base=self.options.docker_base)
        )
        if not images.image_exists(self._docker, tag):
            raise SandboxError(
                f"no image {tag} for paper {paper.id}: run `rcb-env images build"
                f" --base {self.options.docker_base}` (with the same --pset) first"
            )
        with self._lock:
            self._images[paper.id] = tag  # checked once per factory, not once per episode
        return tag

    def create(self, template: Path, paper: Paper) -> Sandbox:
        slot = self._pool.acquire(self.image(paper))
        return DockerSandbox(template, self.config, self.scratch, slot)

    def grading_executor(self, paper: Paper) -> Executor:
        cold = DockerExecutor(self.image(paper), self.config, self._docker)
        if not self.config.warm_grading:
            return cold
        return self._warm.executor(
            cold, paper, python=INTERPRETER, output_limit=self.config.output_limit
        )

    def warm(self, papers: Sequence[Paper]) -> None:
        if self.options.pool_size > 0:
            for paper in papers:
                self._pool.warm(self.image(paper))

    def close(self) -> None:
        self._warm.close()
        self._pool.close()

    def sandbox_uids(self) -> set[int]:
        return {UID}  # the containers' user, as the host sees it

    def owned_on_host(self) -> set[str]:
        found = list_containers(self._docker, f"{LABEL_OWNER}={owner_label()}")
        return {f"container {str(c['Id'])[:12]}" for c in found}
