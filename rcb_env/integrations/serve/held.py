"""HTTP-held episodes: ``POST /reset`` starts an episode the server keeps under its episode id,
``POST /step`` with that ``episode_id`` continues it, ``GET /state?episode_id=`` reads it. The
same frames, episodes, caps, reaper and records as a ``/ws`` session (each HTTP call is one
frame of a :class:`~.sessions.ServedSession` held by the server, not by a socket).

OpenEnv's own HTTP routes build a fresh environment per request and close it after, so an
episode of several steps cannot live there; for rcb-env that would be a sandbox per call and no
task at ``/step``. The request bodies are OpenEnv's (``ResetRequest``: ``seed``,
``episode_id``, and rcb-env's ``task_id``; ``StepRequest``: ``action``, ``timeout_s``,
``request_id``) plus ``episode_id`` on ``/step``; the answers are OpenEnv's
``{"observation", "reward", "done"}``. Errors are HTTP statuses with ``{"detail", "code"}``:
422 a body that is no request, 400 a step without ``episode_id``, 404 an episode the server
does not hold, 409 a reset naming an episode it holds, 503 (``Retry-After``) at the episode cap
or while draining.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from rcb_env.integrations.serve.protocol import ErrorCode
from rcb_env.integrations.serve.sessions import EpisodeServer, ServedSession

__all__ = ["HeldEpisodes"]

#: The HTTP status of each refusal.
STATUS = {
    ErrorCode.INVALID_JSON: 422,
    ErrorCode.VALIDATION_ERROR: 422,
    ErrorCode.UNKNOWN_TYPE: 422,
    ErrorCode.SESSION_ERROR: 422,
    ErrorCode.NO_EPISODE: 404,
    ErrorCode.CAPACITY_REACHED: 503,
    ErrorCode.DRAINING: 503,
    ErrorCode.EXECUTION_ERROR: 500,
}
MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest request body taken (an action is at most 1 MB of JSON)."""
_RESET_KEYS = {"task_id", "seed", "episode_id"}
_STEP_KEYS = {"action", "episode_id", "timeout_s", "request_id"}


def _refused(code: ErrorCode, message: str) -> JSONResponse:
    status = STATUS[code]
    headers = {"Retry-After": "5"} if status == 503 else None
    return JSONResponse({"detail": message, "code": code.value}, status, headers=headers)


def _answered(reply: dict[str, Any] | None) -> JSONResponse:
    """An answer frame as OpenEnv's HTTP answer (an error frame as its status)."""
    assert reply is not None  # only a close frame answers None, and none is sent here
    data = reply["data"]
    if reply["type"] == "error":
        return _refused(ErrorCode(data["code"]), data["message"])
    return JSONResponse(data)


class HeldEpisodes:
    """The routes of HTTP-held episodes over ``server``."""

    def __init__(self, server: EpisodeServer) -> None:
        self.server = server

    async def _body(self, request: Request, keys: set[str]) -> dict[str, Any] | JSONResponse:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return JSONResponse(
                    {"detail": f"the body is over {MAX_BODY_BYTES} bytes", "code": "TOO_LARGE"},
                    413,
                )
            chunks.append(chunk)
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _refused(ErrorCode.INVALID_JSON, f"the body is not JSON ({exc})"[:200])
        if not isinstance(body, dict):
            return _refused(ErrorCode.VALIDATION_ERROR, "the body is a JSON object")
        unknown = sorted(set(body) - keys)
        if unknown:
            return _refused(
                ErrorCode.VALIDATION_ERROR,
                f"unknown field(s) {', '.join(k[:40] for k in unknown[:5])}; "
                f"known: {', '.join(sorted(keys))}",
            )
        return body

    async def reset(self, request: Request) -> JSONResponse:
        body = await self._body(request, _RESET_KEYS)
        if isinstance(body, JSONResponse):
            return body
        episode_id = body.get("episode_id")
        if isinstance(episode_id, str) and episode_id in self.server.held:
            return JSONResponse(
                {"detail": f"episode {episode_id[:80]!r} is held here: step it, or name another"},
                409,
            )
        if self.server.draining:
            return _refused(ErrorCode.DRAINING, "the server is shutting down; no new episode")
        if not self.server.room_to_hold():
            return _refused(
                ErrorCode.CAPACITY_REACHED,
                f"the server holds {len(self.server.held)} HTTP and MCP sessions, its cap; "
                "retry later",
            )
        client = {
            "client": f"{request.client.host}:{request.client.port}" if request.client else None,
            "user_agent": request.headers.get("user-agent"),
            "door": "http",
        }
        session = ServedSession(self.server, client)
        reply = await session.answer(json.dumps({"type": "reset", "data": body}))
        if reply is not None and reply["type"] == "observation":
            self.server.hold(reply["data"]["observation"]["episode_id"], session)
        return _answered(reply)

    async def step(self, request: Request) -> JSONResponse:
        body = await self._body(request, _STEP_KEYS)
        if isinstance(body, JSONResponse):
            return body
        episode_id = body.get("episode_id")
        if not isinstance(episode_id, str):
            return JSONResponse(
                {
                    "detail": "no episode_id: POST /reset first and pass the episode_id it "
                    "answered (or use the websocket /ws)",
                    "code": ErrorCode.NO_EPISODE.value,
                },
                400,
            )
        session = self.server.held.get(episode_id)
        if session is None:
            return _refused(
                ErrorCode.NO_EPISODE,
                f"no episode {episode_id[:80]!r} is held here (never started, or ended and "
                "forgotten)",
            )
        action = body.get("action")
        frame: dict[str, Any] = {"type": "step", "data": action}
        if isinstance(body.get("request_id"), str):
            frame["id"] = body["request_id"]
        return _answered(await session.answer(json.dumps(frame)))

    def state(self, episode_id: str) -> JSONResponse:
        session = self.server.held.get(episode_id)
        if session is None:
            return _refused(ErrorCode.NO_EPISODE, f"no episode {episode_id[:80]!r} is held here")
        return JSONResponse(session.state().model_dump(mode="json"))
