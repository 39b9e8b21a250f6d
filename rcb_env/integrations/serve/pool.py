"""A trainer's side of several ``rcb-env serve`` servers: :class:`ServerPool` spreads episodes
over the servers that are up, and a server lost mid-episode costs only that episode, reported
unscored (reward null, ``status="infra_error"``), never a reward of 0.

The pool speaks the servers' frames itself (OpenEnv's ``/ws`` session frames, with rcb-env's
request ids), over the ``websockets`` library, rather than wrapping ``openenv-core``'s client:
that client (0.3.0) keeps a dead socket cached and fails every later call, shifts every later
answer by one after a receive timeout, takes no header for a token, and installs gradio and
fastmcp with it. Here every request carries an ``id`` and its answer must carry it back; a
lost, late or mismatched answer drops the socket and the episode is reported unscored.

Needs only what a trainer's machine has: rcb-env installed (no sandbox, no Docker engine, no
task interpreter) and ``websockets`` (``pip install 'rcb-env[serve]'``); the server's own
packages (uvicorn, starlette) are not imported.

Each :class:`PooledSession` holds one socket and runs one episode at a time, with
:meth:`~PooledSession.reset`, :meth:`~PooledSession.step`, :meth:`~PooledSession.state` and
:meth:`~PooledSession.close` as OpenEnv's sync client has them. A reset picks the server with
the lowest share of its capacity open by this pool (ties in turn); a server that answers
``CAPACITY_REACHED`` or ``DRAINING`` (or 503 at the handshake) is passed over for a moment and
another is tried; a server that cannot be reached is left out and probed again (``GET /rcb``)
after ``retry_s``, and used again once it answers.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

from rcb_env.episode.outcome import EpisodeStatus, StopReason
from rcb_env.errors import ConfigError, InfrastructureError
from rcb_env.integrations.serve.protocol import ErrorCode, ServedObservation
from rcb_env.logs import get_logger

__all__ = ["NoServer", "PooledSession", "ServerPool", "ServerRefused", "StepResult"]

log = get_logger(__name__)

MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The largest answer taken (a paper's statement is a few hundred KB)."""

_BUSY_S = 2.0
"""How long a server that refused a reset for capacity is passed over."""


@dataclass(frozen=True)
class StepResult:
    """An answer to a reset or a step, shaped as OpenEnv's client returns it."""

    observation: dict[str, Any]
    """The served observation (:class:`~rcb_env.integrations.serve.protocol.ServedObservation`
    as JSON)."""
    reward: float | None
    """Null while the episode runs and when it is not scored."""
    done: bool


class NoServer(InfrastructureError):
    """No server of the pool could start an episode within the pool's ``wait_s``."""


class ServerRefused(ConfigError):
    """A server refused a frame for a reason that another server would give too (an unknown
    task, a malformed frame, a step before any reset, the token): ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} (code: {code})")
        self.code = code


class _Lost(Exception):
    """The socket to a server is gone, or its answer did not come or was not the one asked
    for."""


class _Busy(Exception):
    """The server cannot take an episode now (full or draining)."""


@dataclass(eq=False)
class _Server:
    """One server of the pool, and what the pool knows of it."""

    url: str
    """Its base URL without user info (a token path prefix kept)."""
    headers: dict[str, str]
    name: str
    """``host:port``: how logs and :meth:`ServerPool.status` name it (never the token)."""
    capacity: int | None = None
    """Its ``max_episodes`` (from ``/rcb``)."""
    open: int = 0
    """Episodes this pool has open there."""
    dead_until: float | None = None
    """Unreachable: not used, and probed again after this (monotonic) time. None: up."""
    busy_until: float = 0.0
    episodes: int = 0
    """Episodes started there through this pool."""
    unscored: int = 0
    """Episodes lost there mid-way (reported unscored)."""
    errors: list[str] = field(default_factory=list)

    def load(self) -> float:
        return self.open / (self.capacity or 1)


def _server(entry: str | tuple[str, str]) -> _Server:
    url, token = (entry, None) if isinstance(entry, str) else entry
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"a server's URL is http(s)://host:port[/token], not {url!r}")
    headers: dict[str, str] = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    elif parts.password is not None:  # http://rcb:<token>@host:port
        pair = (
            f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password)}"
        )
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return _Server(
        url=urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")),
        headers=headers,
        name=netloc,
    )


class ServerPool:
    """Several ``rcb-env serve`` servers as one source of episodes.

    ``servers``: base URLs as the servers print them (``http://host:port/<token>``, or
    ``http://rcb:<token>@host:port``), or ``(url, token)`` pairs (the token sent as a Bearer
    header). ``message_timeout_s``: the longest a step may take (above the servers' grading
    timeout: a grading is one step); an answer later than that drops the socket and the
    episode is unscored. ``retry_s``: how long an unreachable server is left out before it is
    probed again. ``wait_s``: how long a reset waits for a server to take it before it raises
    :class:`NoServer`."""

    def __init__(
        self,
        servers: Sequence[str | tuple[str, str]],
        *,
        message_timeout_s: float = 900.0,
        connect_timeout_s: float = 10.0,
        retry_s: float = 10.0,
        wait_s: float = 60.0,
    ) -> None:
        if not servers:
            raise ConfigError("a server pool needs at least one server URL")
        self.servers = [_server(s) for s in servers]
        self.message_timeout_s = message_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry_s = retry_s
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._turn = itertools.count()
        for s in self.servers:
            self._probe(s)

    def session(self) -> PooledSession:
        """A session: one episode at a time, each on the server the pool picks at its reset."""
        return PooledSession(self)

    def status(self) -> list[dict[str, Any]]:
        """Each server: up or not, episodes open (of its capacity), started, lost."""
        with self._lock:
            return [
                {
                    "server": s.name,
                    "up": s.dead_until is None,
                    "open": s.open,
                    "capacity": s.capacity,
                    "episodes": s.episodes,
                    "unscored": s.unscored,
                }
                for s in self.servers
            ]

    # the servers' state ---------------------------------------------------------------------
    def _probe(self, server: _Server) -> bool:
        """Ask ``server`` its ``/rcb``; up (and not draining) or left out for ``retry_s``."""
        request = urllib.request.Request(server.url + "/rcb", headers=server.headers)
        try:
            with urllib.request.urlopen(request, timeout=self.connect_timeout_s) as answer:
                info = json.loads(answer.read())
        except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON, HTTP 4xx/5xx
            if isinstance(exc, urllib.error.HTTPError) and exc.code == 403:
                raise ServerRefused("403", f"{server.name} refused the token") from None
            self._down(server, f"probe: {type(exc).__name__}: {exc}")
            return False
        with self._lock:
            if isinstance(info.get("max_episodes"), int):
                server.capacity = info["max_episodes"]
            if server.dead_until is not None:
                log.info("serve pool: server up again", server=server.name)
            server.dead_until = None
            if info.get("draining"):
                server.busy_until = time.monotonic() + self.retry_s
        return True

    def _down(self, server: _Server, why: str) -> None:
        with self._lock:
            if server.dead_until is None:
                log.warning("serve pool: server unreachable", server=server.name, why=why)
            server.dead_until = time.monotonic() + self.retry_s
            server.errors = [*server.errors[-9:], why]

    def _busy(self, server: _Server) -> None:
        with self._lock:
            server.busy_until = time.monotonic() + _BUSY_S

    def _candidates(self, tried: set[int]) -> list[_Server]:
        """The servers a reset may try now, least loaded first (ties in turn); unreachable
        ones whose wait is over are probed first."""
        now = time.monotonic()
        for s in self.servers:
            if id(s) not in tried and s.dead_until is not None and s.dead_until <= now:
                self._probe(s)
        with self._lock:
            turn = next(self._turn)
            n = len(self.servers)
            up = [
                (s.load(), (i - turn) % n, s)
                for i, s in enumerate(self.servers)
                if id(s) not in tried and s.dead_until is None and s.busy_until <= now
            ]
        return [s for *_, s in sorted(up, key=lambda t: t[:2])]

    def _opened(self, server: _Server) -> None:
        with self._lock:
            server.open += 1
            server.episodes += 1

    def _closed(self, server: _Server, *, lost: bool = False) -> None:
        with self._lock:
            server.open = max(0, server.open - 1)
            server.unscored += lost


class PooledSession:
    """One episode at a time on one of the pool's servers (see the module)."""

    def __init__(self, pool: ServerPool) -> None:
        self.pool = pool
        self._ws: ClientConnection | None = None
        self._server: _Server | None = None
        self._seq = itertools.count(1)
        self._running = False
        self._last: dict[str, Any] | None = None
        self._lost: StepResult | None = None

    @property
    def server(self) -> str | None:
        """``host:port`` of the server the current episode runs on."""
        return self._server.name if self._server is not None else None

    def __enter__(self) -> PooledSession:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # OpenEnv's calls -------------------------------------------------------------------------
    def reset(
        self, task_id: str | None = None, seed: int | None = None, episode_id: str | None = None
    ) -> StepResult:
        """Start an episode (``task_id`` ``<paper>/<snippet>``, or a draw, seeded or not) on
        the least loaded server that takes it; a running one is ended first.

        Raises:
            NoServer: no server took it within the pool's ``wait_s``.
            ServerRefused: the server refused the reset itself (an unknown task).
        """
        data = {
            k: v
            for k, v in (("task_id", task_id), ("seed", seed), ("episode_id", episode_id))
            if v is not None
        }
        self._end_here()
        deadline = time.monotonic() + self.pool.wait_s
        tried: set[int] = set()
        while True:
            for server in self.pool._candidates(tried):
                tried.add(id(server))
                try:
                    answer = self._on(server, {"type": "reset", "data": data})
                except _Busy:
                    self.pool._busy(server)
                    continue
                except _Lost as exc:
                    self._drop()
                    self.pool._down(server, f"reset: {exc}")
                    continue
                self.pool._opened(server)
                self._running, self._lost = True, None
                return self._result(answer)
            if time.monotonic() >= deadline:
                raise NoServer(
                    f"no server took an episode within {self.pool.wait_s:g} s: "
                    + "; ".join(
                        f"{s['server']} ({'up' if s['up'] else 'unreachable'}, "
                        f"{s['open']}/{s['capacity']} open)"
                        for s in self.pool.status()
                    )
                )
            time.sleep(0.2)
            tried.clear()

    def step(self, action: dict[str, Any]) -> StepResult:
        """One action (``{"tool": ..., ...}``). If the server is lost on the way (the socket
        closed, no answer within ``message_timeout_s``, an answer to another request), the
        episode ends here: reward null, ``status="infra_error"``, ``scored=False``.

        Raises:
            ServerRefused: a frame the server refused (a step before any reset).
        """
        if self._lost is not None:
            return self._lost
        if self._ws is None or self._server is None:
            raise ServerRefused(ErrorCode.NO_EPISODE, "no episode: reset first")
        try:
            answer = self._ask({"type": "step", "data": action})
        except _Lost as exc:
            return self._lose(exc)
        result = self._result(answer)
        if result.done and self._running:
            self._running = False
            self.pool._closed(self._server)
        return result

    def state(self) -> dict[str, Any]:
        """The episode's state (its id, step count, status, ``done``, ``reward``)."""
        if self._lost is None and self._ws is not None:
            try:
                answer = self._ask({"type": "state"})
            except _Lost as exc:
                self._lose(exc)
            else:
                state: dict[str, Any] = answer["data"]
                return state
        last = self._lost.observation if self._lost is not None else self._last or {}
        return {
            "episode_id": last.get("episode_id"),
            "step_count": last.get("step", 0),
            "task_id": last.get("task_id"),
            "status": last.get("status"),
            "done": self._lost is not None,
            "reward": None,
            "scored": last.get("scored"),
        }

    def close(self) -> None:
        """End the session (an episode still running is recorded by its server as ended by
        the client, unscored)."""
        if self._ws is not None:
            with contextlib.suppress(ConnectionClosed, OSError):
                self._ws.send(json.dumps({"type": "close"}))
        self._end_here()
        self._drop()

    # frames ---------------------------------------------------------------------------------
    def _on(self, server: _Server, frame: dict[str, Any]) -> dict[str, Any]:
        """Send ``frame`` to ``server`` (connecting first if the socket is elsewhere)."""
        if self._server is not server:
            self._drop()
            self._connect(server)
        answer = self._ask(frame)
        if answer["type"] == "error":
            code = answer["data"].get("code", "")
            if code in (ErrorCode.CAPACITY_REACHED, ErrorCode.DRAINING):
                raise _Busy(code)
            raise ServerRefused(code, str(answer["data"].get("message", "")))
        return answer

    def _connect(self, server: _Server) -> None:
        url = "ws" + server.url.removeprefix("http") + "/ws"
        try:
            self._ws = connect(
                url,
                additional_headers=server.headers,
                open_timeout=self.pool.connect_timeout_s,
                close_timeout=2,
                compression=None,
                max_size=MAX_ANSWER_BYTES,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status == 503:  # full of connections, or draining
                raise _Busy(str(status)) from None
            if status in (401, 403):
                raise ServerRefused(str(status), f"{server.name} refused the token") from None
            raise _Lost(f"handshake answered HTTP {status}") from None
        except InvalidURI as exc:
            raise ConfigError(f"not a server URL: {exc}") from None
        except (OSError, WebSocketException) as exc:  # refused, reset, timed out
            raise _Lost(f"{type(exc).__name__}: {exc}") from None
        self._server = server

    def _ask(self, frame: dict[str, Any]) -> dict[str, Any]:
        """The answer to ``frame`` (its id checked)."""
        ws = self._ws
        assert ws is not None
        frame_id = f"p{next(self._seq)}"
        try:
            ws.send(json.dumps({**frame, "id": frame_id}))
            raw = ws.recv(timeout=self.pool.message_timeout_s)
        except TimeoutError:
            raise _Lost(f"no answer within {self.pool.message_timeout_s:g} s") from None
        except (ConnectionClosed, OSError) as exc:
            raise _Lost(f"{type(exc).__name__}: {exc}") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise _Lost("an answer that is not JSON") from None
        if not isinstance(answer, dict) or answer.get("id") != frame_id:
            raise _Lost(f"an answer to another request (sent {frame_id})")
        if answer.get("type") == "error" and frame["type"] != "reset":
            data = answer.get("data") or {}
            raise ServerRefused(str(data.get("code", "")), str(data.get("message", "")))
        return answer

    def _result(self, answer: dict[str, Any]) -> StepResult:
        data = answer["data"]
        self._last = data["observation"]
        return StepResult(observation=data["observation"], reward=data["reward"], done=data["done"])

    # ends -----------------------------------------------------------------------------------
    def _lose(self, exc: _Lost) -> StepResult:
        """The server is gone mid-episode: the episode is unscored; the server is left out."""
        server = self._server
        assert server is not None
        self._drop()
        self.pool._down(server, f"mid-episode: {exc}")
        if self._running:
            self._running = False
            self.pool._closed(server, lost=True)
        last = self._last or {}
        observation = ServedObservation(
            text=(
                f"The server {server.name} was lost mid-episode ({exc}); the episode is not scored."
            ),
            episode_id=str(last.get("episode_id", "")),
            task_id=str(last.get("task_id", "")),
            step=int(last.get("step", 0)),
            status=EpisodeStatus.INFRA_ERROR,
            reason=StopReason.INFRA_ERROR.value,
            scored=False,
            weight=int(last.get("weight", 0)),
        )
        log.warning(
            "serve pool: episode unscored",
            server=server.name,
            episode_id=observation.episode_id,
            why=str(exc),
        )
        self._lost = StepResult(observation.model_dump(mode="json"), None, True)
        return self._lost

    def _end_here(self) -> None:
        """The pool's count of the running episode, if any, is released."""
        if self._running and self._server is not None:
            self._running = False
            self.pool._closed(self._server)

    def _drop(self) -> None:
        ws, self._ws, self._server = self._ws, None, None
        if ws is not None:
            with contextlib.suppress(ConnectionClosed, OSError):
                ws.close()
