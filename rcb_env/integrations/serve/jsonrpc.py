"""OpenEnv's own JSON-RPC dialect at ``POST /mcp`` (what ``MCPToolClient`` speaks in its
production mode, and OpenEnv's servers answer): ``openenv/session/create`` starts an episode
(``params.task_id`` or ``params.seed``; none: a fresh draw) and answers its ``session_id``;
``tools/list`` and ``tools/call`` (``params.session_id``, ``name``, ``arguments``) are the
episode's tools and steps; ``openenv/session/close`` ends the session (an episode still
running is recorded interrupted, unscored). Each session is a held
:class:`~.sessions.ServedSession`: the same caps, reaper, drain and records as every door.

A ``tools/call`` result is ``{"data": <the observation>, "done", "reward", "status"}``
(``MCPToolClient.call_tool`` returns ``data``); a malformed call, or one after the end, is a
JSON-RPC error (the client raises it). Refusals are JSON-RPC errors whose message starts with
the code (``CAPACITY_REACHED: ...``), answered with HTTP 200 as OpenEnv's server does.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from rcb_env.integrations.serve.protocol import ErrorCode
from rcb_env.integrations.serve.sessions import EpisodeServer, ServedSession
from rcb_env.tools.actions import tool_specs

__all__ = ["METHODS", "OpenEnvDialect"]

METHODS = frozenset({"openenv/session/create", "openenv/session/close", "tools/list", "tools/call"})
"""The methods of the dialect (a standard MCP client starts with ``initialize`` instead)."""

_PREFIX = "openenv:"


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


class OpenEnvDialect:
    """The dialect's sessions over ``server``."""

    def __init__(self, server: EpisodeServer) -> None:
        self.server = server

    async def answer(self, request: dict[str, Any], client: dict[str, Any]) -> dict[str, Any]:
        """The JSON-RPC answer to ``request`` (one of :data:`METHODS`)."""
        request_id = request.get("id")
        params = request.get("params")
        if not isinstance(params, dict):
            params = {}
        method = request.get("method")
        if method == "openenv/session/create":
            return await self._create(request_id, params, client)
        if method == "tools/list":
            tools = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tool_specs()
            ]
            return _result(request_id, {"tools": tools})
        session_id = params.get("session_id")
        session = self.server.held.get(_PREFIX + str(session_id))
        if session is None:
            message = f"{ErrorCode.NO_EPISODE.value}: no session {str(session_id)[:80]!r} here"
            return _error(request_id, -32602, message)
        if method == "openenv/session/close":
            async with session.lock:
                await session.interrupt("ClientClosed", "the client closed its MCP session")
            self.server.forget(_PREFIX + str(session_id))
            return _result(request_id, {"closed": True})
        arguments = params.get("arguments")
        frame = {
            "type": "step",
            "data": {
                "type": "call_tool",
                "tool_name": params.get("name"),
                "arguments": arguments if isinstance(arguments, dict) else {},
            },
        }
        reply = await session.answer(json.dumps(frame))
        assert reply is not None  # only a close frame answers None
        data = reply["data"]
        if reply["type"] == "error":
            return _error(request_id, -32602, f"{data['code']}: {data['message']}")
        obs = data["observation"]
        if obs.get("error"):
            return _error(request_id, -32602, str(obs["error"]["message"]))
        return _result(
            request_id,
            {
                "data": obs["text"],
                "done": data["done"],
                "reward": data["reward"],
                "status": obs["status"],
            },
        )

    async def _create(
        self, request_id: Any, params: dict[str, Any], client: dict[str, Any]
    ) -> dict[str, Any]:
        if self.server.draining:
            return _error(request_id, -32000, "DRAINING: the server is shutting down")
        if not self.server.room_to_hold():
            held = len(self.server.held)
            return _error(request_id, -32000, f"CAPACITY_REACHED: {held} sessions held, the cap")
        reset = {k: params[k] for k in ("task_id", "seed") if k in params}
        session = ServedSession(self.server, {**client, "door": "openenv-mcp"})
        reply = await session.answer(json.dumps({"type": "reset", "data": reset}))
        assert reply is not None
        data = reply["data"]
        if reply["type"] == "error":
            return _error(request_id, -32000, f"{data['code']}: {data['message']}")
        session_id = secrets.token_hex(16)
        self.server.hold(_PREFIX + session_id, session)
        obs = data["observation"]
        return _result(
            request_id,
            {"session_id": session_id, "task_id": obs["task_id"], "statement": obs["text"]},
        )
