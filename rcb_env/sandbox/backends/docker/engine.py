"""Docker: the engine and the containers rcb-env starts, shared by the sandbox backend
(:mod:`rcb_env.sandbox.backends.docker.backend`) and its pool of started containers
(:mod:`rcb_env.sandbox.backends.docker.pool`). Every Docker error maps to :class:`SandboxError` in
:func:`docker_errors`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from rcb_env import config
from rcb_env.errors import SandboxError
from rcb_env.sandbox.backends.docker.images import LABEL
from rcb_env.sandbox.base import Limits

USER = "1000:1000"
UID = GID = 1000
INTERPRETER = "/opt/rcb-venv/bin/python"
LABEL_OWNER = "org.rcb-env.owner"
LABEL_ROLE = "org.rcb-env.role"


def owner_label() -> str:
    """host:pid of this process, so `images gc` can tell our leftovers from live containers."""
    return f"{os.uname().nodename}:{os.getpid()}"


@contextlib.contextmanager
def docker_errors(what: str) -> Iterator[None]:
    """The one place Docker SDK and transport errors become :class:`SandboxError`."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except requests.exceptions.ConnectionError as exc:
        raise SandboxError(f"docker: {what}: the engine is unreachable ({exc})") from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise SandboxError(f"docker: {what}: {exc}") from exc


SYSTEM_SOCKET = "/var/run/docker.sock"


def session_socket() -> str:
    """The socket of the engine ``scripts/with-dockerd.sh start`` keeps running for a session
    (in ``$RCB_DOCKERD_RUN``, default ``/run/rcb-env-dockerd``)."""
    return str(config.settings().dockerd_run / "docker.sock")


def client() -> Any:
    """A Docker client for $DOCKER_HOST, else the system socket, else the engine that
    ``scripts/with-dockerd.sh start`` started; checked with a ping.

    Raises:
        SandboxError: no engine answers.
    """
    import docker

    with docker_errors("no engine answers (is dockerd running? is DOCKER_HOST set?)"):
        if (
            "DOCKER_HOST" not in os.environ
            and not os.path.exists(SYSTEM_SOCKET)
            and os.path.exists(session_socket())
        ):
            # the docker command line that sandboxes run (docker exec) must reach it too
            os.environ["DOCKER_HOST"] = f"unix://{session_socket()}"
        c = docker.from_env(timeout=120)
        c.ping()
        return c


def probe() -> str | None:
    """None if a Docker engine answers a ping, else why not (never ``docker --version``)."""
    try:
        client()
    except SandboxError as exc:
        return str(exc)
    return None


def _limits(limits: Limits) -> dict[str, Any]:
    mem = f"{limits.memory_mb}m"
    return {
        "mem_limit": mem,
        "memswap_limit": mem,
        "pids_limit": limits.pids,
        "ulimits": [
            _ulimit("nofile", limits.nofile),
            _ulimit("fsize", limits.file_size_mb * 1024 * 1024),
            _ulimit("core", 0),
        ],
    }


def docker_types() -> Any:
    import docker.types

    return docker.types


def _ulimit(name: str, value: int) -> Any:
    import docker.types

    return docker.types.Ulimit(name=name, soft=value, hard=value)


def container_options(limits: Limits, role: str, tmpfs_mb: int = 512) -> dict[str, Any]:
    """The settings every rcb-env container is started with: no network, read-only root, every
    capability dropped, the sandbox's limits, and our labels (``role``: episode or grading)."""
    return {
        "detach": True,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,exec,size={tmpfs_mb}m,mode=1777"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "init": True,
        "labels": {LABEL: "1", LABEL_OWNER: owner_label(), LABEL_ROLE: role},
        **_limits(limits),
    }


_unremoved: list[Any] = []
_unremoved_lock = threading.Lock()


def remove_container(container: Any) -> None:
    """Remove a container; if the engine cannot be reached now, remember it and try again at
    the next container start and when the pool closes (a restarted engine is back by then)."""
    import requests.exceptions

    try:
        with docker_errors("removing a container"):
            container.remove(force=True)
    except SandboxError as exc:
        # Gone already, or refused for good (`images gc` is the tool then): nothing to retry.
        if isinstance(exc.__cause__, requests.exceptions.ConnectionError):
            with _unremoved_lock:
                _unremoved.append(container)


def remove_leftovers() -> int:
    """Retry the removals that failed while the engine was unreachable. Returns how many are
    still pending."""
    with _unremoved_lock:
        pending = list(_unremoved)
        _unremoved.clear()
    for container in pending:
        remove_container(container)
    with _unremoved_lock:
        return len(_unremoved)


def list_containers(docker: Any, label: str = LABEL_ROLE) -> list[dict[str, Any]]:
    """Containers with ``label`` (``key`` or ``key=value``), running or not, as the engine's list
    answers them (``Id``, ``Labels``, ``State``): one call, so a container that another process
    removes meanwhile cannot fail it, as the SDK's per-container inspect would. The default,
    the role label, is set only on containers rcb-env starts: a container of an image built
    FROM a paper image (a Harbor task's) inherits the image's labels, never this one."""
    with docker_errors("listing containers"):
        found: list[dict[str, Any]] = docker.api.containers(all=True, filters={"label": label})
    return found


def gc_containers(docker: Any, *, everything: bool = False) -> list[str]:
    """Remove rcb-env containers whose owning process is gone (or all of ours)."""
    host = os.uname().nodename
    removed = []
    for c in list_containers(docker):
        owner = (c.get("Labels") or {}).get(LABEL_OWNER, "")
        name, _, pid = owner.partition(":")
        alive = name == host and pid.isdigit() and _pid_alive(int(pid))
        if everything or not alive:
            # gone meanwhile (another process removed it) or not removable now: skip it
            with contextlib.suppress(SandboxError), docker_errors("removing a container"):
                docker.api.remove_container(c["Id"], force=True)
                removed.append(str(c["Id"])[:12])
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
