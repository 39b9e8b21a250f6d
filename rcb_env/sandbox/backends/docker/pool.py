"""Docker: started containers kept ready per image, so an episode does not wait for one."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from pathlib import Path
from typing import Any

from rcb_env.errors import SandboxError
from rcb_env.sandbox import scratch as scratch_dirs
from rcb_env.sandbox.backends.docker.engine import (
    GID,
    UID,
    USER,
    container_options,
    docker_errors,
    remove_container,
    remove_leftovers,
)
from rcb_env.sandbox.base import Limits, SandboxConfig, chown_tree


def cpu_options(limits: Limits, runs: int = 1) -> dict[str, Any]:
    """A container's CPU beyond what the engine gives it anyway. Each container is a cgroup of
    its own with the default CPU weight, the same for every container, so competing containers
    share the CPU equally however many processes each starts. ``cpu_shares`` stays at that
    default: on cgroup v2, runc before 1.3.2 turns an explicit 1024 into a weight of 39, below
    every other container's 100 (opencontainers/runc#4772). With ``Limits.cpus``, a hard cap of
    that many cores per run (``runs`` of them: the warm container holds several), at most this
    machine's cores (the engine refuses more)."""
    if limits.cpus is None:
        return {}
    return {"nano_cpus": round(min(limits.cpus * runs, os.cpu_count() or 1) * 1e9)}


class Slot:
    """A started container with its own host workspace and control folders."""

    def __init__(self, docker: Any, image: str, config: SandboxConfig, scratch: Path) -> None:
        self.root = scratch_dirs.make("rcb-docker-", scratch)
        self.workspace = self.root / "workspace"
        self.control = self.root / "control"
        self.workspace.mkdir()
        self.control.mkdir()
        chown_tree(self.root, UID, GID)
        self.image = image
        self.docker = docker
        with docker_errors(f"starting a container from {image}"):
            self.container = docker.containers.run(
                image,
                ["sleep", "infinity"],
                volumes={
                    str(self.workspace): {"bind": "/workspace", "mode": "rw"},
                    str(self.control): {"bind": "/.rcb", "mode": "rw"},
                },
                working_dir="/workspace",
                **container_options(config.limits, "episode"),
                **cpu_options(config.limits),
            )

    def running(self) -> bool:
        try:
            with docker_errors("checking a container"):
                self.container.reload()
        except SandboxError:
            return False
        return bool(self.container.status == "running")

    def kill_user_processes(self) -> None:
        """End everything the agent started (uid 1000); PID 1 (root) keeps the container up."""
        with contextlib.suppress(SandboxError), docker_errors("killing processes"):
            self.container.exec_run(["sh", "-c", "kill -9 -1"], user=USER)

    def remove(self) -> None:
        remove_container(self.container)
        scratch_dirs.discard(self.root)


class ContainerPool:
    """Keeps ``size`` started containers per image so a new episode gets one without waiting
    for a container start. Refilled in the background."""

    def __init__(self, docker: Any, config: SandboxConfig, scratch: Path, size: int) -> None:
        self.docker = docker
        self.config = config
        self.scratch = scratch
        self.size = size
        self._ready: dict[str, queue.SimpleQueue[Slot]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []

    def _queue(self, image: str) -> queue.SimpleQueue[Slot]:
        with self._lock:
            return self._ready.setdefault(image, queue.SimpleQueue())

    def warm(self, image: str) -> None:
        """Start containers for ``image`` until ``size`` are ready (in a background thread)."""

        def fill() -> None:
            q = self._queue(image)
            while not self._closed and q.qsize() < self.size:
                try:
                    q.put(Slot(self.docker, image, self.config, self.scratch))
                except SandboxError:
                    return

        t = threading.Thread(target=fill, daemon=True)
        t.start()
        self._threads.append(t)

    def acquire(self, image: str) -> Slot:
        remove_leftovers()
        q = self._queue(image)
        slot: Slot | None = None
        while slot is None:
            try:
                slot = q.get_nowait()
            except queue.Empty:
                slot = Slot(self.docker, image, self.config, self.scratch)
                break
            if not slot.running():  # e.g. the engine restarted since it was started
                slot.remove()
                slot = None
        if self.size > 0:
            self.warm(image)
        return slot

    def close(self) -> None:
        self._closed = True
        for t in self._threads:
            t.join(timeout=60)
        with self._lock:
            queues = list(self._ready.values())
        for q in queues:
            while not q.empty():
                q.get_nowait().remove()
        remove_leftovers()
