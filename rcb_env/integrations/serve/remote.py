"""One episode at a time on a remote ``rcb-env serve``, over its websocket (``/ws``): the
interface of :class:`~rcb_env.integrations.pull.Session` (``start``, ``call``, ``reward``,
``close``), so that a trainer adapter runs its rollouts on a server instead of in its own
process (:class:`rcb_env.integrations.trl.RcbEnvironment` with ``url=``).

It speaks the same frames as OpenEnv's client, with rcb-env's request ids checked on every
answer, and never lets a lost or desynchronised socket score: a connection that fails, a
receive that times out or an answer for another request ends the episode **unscored** (its
reward None, counted by :func:`rcb_env.rl.shared.count_unscored` as stage ``server``), the
socket dropped so that the next ``start`` connects afresh. A reset refused at the server's
episode cap is retried (``capacity_wait_s``), then unscored. A task the server does not serve is
the caller's mistake: :class:`~rcb_env.errors.ConfigError`.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from rcb_env.errors import ConfigError
from rcb_env.logs import get_logger
from rcb_env.rl import shared

__all__ = ["LOST", "RemoteSession"]

log = get_logger(__name__)

LOST = (
    "The episode has ended: its server could not be reached ({why}). No more tools run; it "
    "will not be scored."
)


class _Lost(Exception):
    """The socket failed, timed out, or answered another request."""


class RemoteSession:
    """Episodes of a served selection, one at a time, over one websocket to ``url`` (the
    server's base URL, its token as the path prefix or the URL's password).
    ``timeout_s``: the longest wait for one answer (above the server's grading timeout)."""

    def __init__(
        self, url: str, *, timeout_s: float = 600.0, capacity_wait_s: float = 120.0
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.capacity_wait_s = capacity_wait_s
        self.task_id = ""
        self.status = "idle"
        """``idle``, ``running``, or how the episode ended (its observation's status)."""
        self.done = True
        self.value: float | None = None
        self.scored: bool | None = None
        self._ws: Any = None
        self._ids = itertools.count(1)

    # the socket ---------------------------------------------------------------------------
    def _socket(self) -> Any:
        if self._ws is None:
            from websockets.sync.client import connect

            ws_url = "ws" + self.url.removeprefix("http") + "/ws"
            self._ws = connect(
                ws_url, open_timeout=min(self.timeout_s, 60), max_size=None, compression=None
            )
        return self._ws

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception as exc:  # a socket already gone
                log.debug("remote: closing a lost socket", error=str(exc))

    def _ask(self, kind: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        """One frame and its answer (its id checked)."""
        frame_id = f"r{next(self._ids)}"
        frame: dict[str, Any] = {"type": kind, "id": frame_id}
        if data is not None:
            frame["data"] = data
        try:
            ws = self._socket()
            ws.send(json.dumps(frame))
            answer: dict[str, Any] = json.loads(ws.recv(timeout=self.timeout_s))
        except Exception as exc:  # refused, lost, timed out: the socket is dropped
            self._drop()
            raise _Lost(f"{type(exc).__name__}: {str(exc)[:200]}") from exc
        if answer.get("id") != frame_id:
            self._drop()
            raise _Lost(f"an answer to {answer.get('id')!r} came for {frame_id!r}")
        return answer

    def _lost(self, why: str) -> str:
        self.done, self.value, self.scored, self.status = True, None, False, "infra_error"
        total = shared.count_unscored("server")
        log.warning(
            f"rcb-env: episode of {self.task_id} not scored (its server: {why}); {total} "
            "unscored in this process"
        )
        return LOST.format(why=why)

    def _seen(self, answer: dict[str, Any]) -> str:
        data = answer["data"]
        obs = data["observation"]
        self.done = bool(data["done"])
        self.status = str(obs["status"])
        self.value = data["reward"]
        self.scored = obs.get("scored")
        if self.done and self.scored is False:
            self._lost(f"{obs.get('reason')}: the server recorded an infrastructure failure")
        return str(obs["text"])

    # the Session interface ------------------------------------------------------------------
    def start(self, task_id: str) -> str:
        """Begin an episode of ``task_id`` on the server; its statement (or a text saying it
        could not start: the episode has then ended unscored).

        Raises:
            ConfigError: the server serves no such task.
        """
        self.task_id = task_id
        self.done, self.value, self.scored, self.status = False, None, None, "running"
        deadline = time.monotonic() + self.capacity_wait_s
        while True:
            try:
                answer = self._ask("reset", {"task_id": task_id})
            except _Lost as lost:
                return self._lost(str(lost))
            if answer["type"] == "observation":
                return self._seen(answer)
            code, message = answer["data"].get("code"), str(answer["data"].get("message"))
            if code == "VALIDATION_ERROR":
                self.done, self.status = True, "idle"
                raise ConfigError(f"{self.url}: {message}")
            if code != "CAPACITY_REACHED" or time.monotonic() > deadline:
                return self._lost(f"{code}: {message}")
            time.sleep(0.5)

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run one tool on the server; its observation."""
        if self.done and self.status == "infra_error":
            return LOST.format(why="the episode was not scored")
        try:
            answer = self._ask("step", {**arguments, "tool": tool})
        except _Lost as lost:
            return self._lost(str(lost))
        if answer["type"] == "error":
            return f"error: {answer['data'].get('message')}"
        return self._seen(answer)

    def reward(self) -> float | None:
        """The episode's reward: a running one is submitted as its workspace stands first;
        None when it could not be scored."""
        if not self.done:
            self.call("submit", {})
        return self.value if self.scored else None

    def close(self) -> None:
        """End the session (an episode still running is recorded interrupted by the server)."""
        ws = self._ws
        if ws is not None:
            try:
                ws.send(json.dumps({"type": "close"}))
            except Exception as exc:
                log.debug("remote: close on a lost socket", error=str(exc))
        self._drop()
