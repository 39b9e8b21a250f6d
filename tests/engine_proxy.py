"""A fault injector between rcb-env and a real Docker engine: a unix-socket relay that can go
away (connections refused), come back, and "restart" the engine the way a real restart looks
from outside: every open connection (API calls, `docker exec` streams) is cut, the engine's
running containers of this process are killed, and nothing answers for a while."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from rcb_env.sandbox.backends.docker.engine import (
    LABEL_OWNER,
    LABEL_ROLE,
    list_containers,
    owner_label,
)


def engine_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        raise RuntimeError(f"the engine proxy relays unix sockets only, not {host}")
    return host.removeprefix("unix://")


class EngineProxy:
    def __init__(self, path: Path, upstream: str | None = None) -> None:
        self.path = path
        self.upstream = upstream or engine_socket()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self.up()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    # lifecycle -------------------------------------------------------------------------------
    def up(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(64)
        listener.settimeout(0.05)
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def down(self) -> None:
        """Unreachable: new connections are refused, open ones are cut."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._accepting is not None:
            self._accepting.join()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        with self._lock:
            conns = list(self._open)
            self._open.clear()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def restart(self, outage_s: float) -> None:
        """What an engine restart does to us: cut everything, kill our running containers,
        answer nothing for ``outage_s``, then serve again (in the background)."""
        self.down()
        killed = kill_our_containers(self.upstream)
        assert killed, "the fault must hit a running episode"

        def back() -> None:
            time.sleep(outage_s)
            self.up()

        threading.Thread(target=back, daemon=True).start()

    def restart_when_grading(self, outage_s: float, limit_s: float = 120.0) -> bool:
        """Restart (as :meth:`restart`) as soon as one of our grading containers (a cold
        grading's, or a warm grading process's) is running. False if none ran in ``limit_s``."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            for c in our_containers(self.upstream):
                role = (c.get("Labels") or {}).get(LABEL_ROLE)
                if c.get("State") == "running" and role in ("grading", "warm-grading"):
                    self.restart(outage_s)
                    return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        self.down()

    # relaying --------------------------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by down()
            client.settimeout(None)
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                engine.connect(self.upstream)
            except OSError:
                client.close()
                engine.close()
                continue
            with self._lock:
                self._open.update((client, engine))
            for a, b in ((client, engine), (engine, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def _engine(upstream: str) -> Any:
    import docker

    return docker.DockerClient(base_url=f"unix://{upstream}", timeout=60)


def our_containers(upstream: str | None = None) -> list[dict[str, Any]]:
    """Containers this process started (running or not), asked of the real engine."""
    engine = _engine(upstream or engine_socket())
    return list_containers(engine, f"{LABEL_OWNER}={owner_label()}")


def kill_our_containers(upstream: str) -> list[str]:
    engine = _engine(upstream)
    killed = []
    for c in our_containers(upstream):
        if c.get("State") == "running":
            with contextlib.suppress(Exception):
                engine.api.kill(c["Id"])
                killed.append(str(c["Id"])[:12])
    return killed
