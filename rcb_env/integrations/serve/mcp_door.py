"""``/mcp`` of ``rcb-env serve``: the episode tools of ``rcb-env mcp`` (the same MCP server,
:func:`rcb_env.integrations.mcp_server.build_server`) over MCP's streamable HTTP, one episode
per MCP session.

A client's ``initialize`` (a POST without ``Mcp-Session-Id``) starts an episode: the task named
by the URL's query (``/mcp?task_id=<paper>/<snippet>``, or ``?seed=N`` for a seeded draw; none:
a fresh draw), counted against the server's episode cap like a ``/ws`` reset. The session's
tool calls are that episode's steps, through the same :class:`~.sessions.ServedSession` as a
socket's frames: same budgets, reaper, drain and records (the agent recorded with ``door:
mcp``). The task statement is the server's instructions and the resource ``rcb://task``. A
session ended by the client (HTTP DELETE) mid-episode is recorded interrupted (unscored), as a
``/ws`` close is; an ended, idle session is forgotten after ``idle_s``.

OpenEnv's own JSON-RPC dialect at ``POST /mcp`` (``openenv/session/create``, ``tools/list``,
``tools/call``, ``openenv/session/close``: ``MCPToolClient``'s production mode) is answered by
:mod:`.jsonrpc`.

Refusals before a session exists are HTTP statuses with a JSON-RPC error whose message names
the code: 503 (``CAPACITY_REACHED``, ``DRAINING``), 400 (not an ``initialize``, an unknown
task), 404 (an unknown or forgotten ``Mcp-Session-Id``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from rcb_env.episode.driver import ENDED
from rcb_env.integrations.mcp_server import build_server
from rcb_env.integrations.serve.jsonrpc import METHODS, OpenEnvDialect
from rcb_env.integrations.serve.protocol import ErrorCode
from rcb_env.integrations.serve.sessions import EpisodeServer, ServedSession
from rcb_env.logs import get_logger
from rcb_env.tools.actions import ToolSpec, tool_specs

__all__ = ["McpDoor", "SessionTools"]

log = get_logger(__name__)

SESSION_HEADER = "mcp-session-id"
MAX_BODY_BYTES = 4 * 1024 * 1024


class SessionTools:
    """What :func:`~rcb_env.integrations.mcp_server.build_server` serves, over a served
    session: its tools, the statement, and :meth:`call` (from a worker thread: each call is a
    step frame of the session, answered on the server's loop)."""

    def __init__(self, session: ServedSession, statement: str, loop: asyncio.AbstractEventLoop):
        self.session = session
        self.statement = statement
        self.tools: list[ToolSpec] = tool_specs()
        self.loop = loop

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        frame = {"type": "step", "data": {**arguments, "tool": tool}}
        answering = self.session.answer(json.dumps(frame))
        reply = asyncio.run_coroutine_threadsafe(answering, self.loop).result()
        assert reply is not None  # only a close frame answers None
        data = reply["data"]
        if reply["type"] == "error":
            return f"error: {data['message']}", True
        obs = data["observation"]
        text = str(obs["text"])
        if data["done"] and text != ENDED:  # the step that ended it: how, and the reward
            reward = "null (not scored)" if data["reward"] is None else f"{data['reward']:g}"
            text = f"{text}\n[episode ended: {obs['reason']}; reward {reward}]"
        return text, not obs["tool_ok"]


def _error(status: int, code: str, message: str) -> JSONResponse:
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": f"{code}: {message}"},
    }
    headers = {"Retry-After": "5"} if status == 503 else None
    return JSONResponse(body, status, headers=headers)


class _Held:
    """One MCP session: its episode's session and its MCP server's session manager."""

    def __init__(self, session: ServedSession, manager: StreamableHTTPSessionManager) -> None:
        self.session = session
        self.manager = manager
        self.stop = asyncio.Event()
        self.started = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        async with self.manager.run():
            self.started.set()
            await self.stop.wait()


class McpDoor:
    """The ASGI app of ``/mcp`` over ``server``."""

    def __init__(self, server: EpisodeServer) -> None:
        self.server = server
        self.by_id: dict[str, _Held] = {}
        self.dialect = OpenEnvDialect(server)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = Headers(scope=scope)
        given = headers.get(SESSION_HEADER)
        if given is not None:
            held = self.by_id.get(given)
            if held is None:
                await _error(404, "NO_EPISODE", "Session not found")(scope, receive, send)
                return
            await held.manager.handle_request(scope, receive, send)
            if scope["method"] == "DELETE":  # the client ended its session
                async with held.session.lock:
                    await held.session.interrupt(
                        "ClientClosed", "the MCP client ended its session mid-episode"
                    )
                self.server.forget("mcp:" + given)
            return
        await self._initialize(scope, receive, send, headers)

    def _refusal(self, method: str, body: bytes | None, headers: Headers) -> JSONResponse | None:
        """Why a request without a session starts none (None: it starts one)."""
        if body is None:
            return _error(413, "TOO_LARGE", "the body is over 4 MiB")
        try:
            called = json.loads(body).get("method") if method == "POST" else None
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            called = None
        if called != "initialize":
            return _error(400, "NO_EPISODE", "no session: start one with an initialize (POST)")
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            known = ", ".join(sorted(HANDSHAKE_PROTOCOL_VERSIONS))
            return _error(400, "VALIDATION_ERROR", f"MCP sessions here speak {known}")
        if self.server.draining:
            return _error(503, "DRAINING", "the server is shutting down; connect to another")
        if not self.server.room_to_hold():
            held = len(self.server.held)
            return _error(503, "CAPACITY_REACHED", f"{held} HTTP and MCP sessions held, the cap")
        return None

    async def _initialize(
        self, scope: Scope, receive: Receive, send: Send, headers: Headers
    ) -> None:
        body = await _read(receive)
        request = _json(body) if scope["method"] == "POST" else None
        if request is not None and request.get("method") in METHODS:  # OpenEnv's dialect
            answer = await self.dialect.answer(request, _client(scope, headers))
            await JSONResponse(answer)(scope, receive, send)
            return
        refusal = self._refusal(scope["method"], body, headers)
        if refusal is not None or body is None:
            await (refusal or _error(413, "TOO_LARGE", ""))(scope, receive, send)
            return
        query = QueryParams(scope.get("query_string", b""))
        reset: dict[str, Any] = {}
        if "task_id" in query:
            reset["task_id"] = query["task_id"]
        if "seed" in query:
            reset["seed"] = query["seed"]
        session = ServedSession(self.server, {**_client(scope, headers), "door": "mcp"})
        reply = await session.answer(json.dumps({"type": "reset", "data": reset}))
        assert reply is not None
        if reply["type"] == "error":
            code = reply["data"]["code"]
            status = 503 if code in (ErrorCode.CAPACITY_REACHED, ErrorCode.DRAINING) else 400
            await _error(status, code, reply["data"]["message"])(scope, receive, send)
            return
        tools = SessionTools(
            session, reply["data"]["observation"]["text"], asyncio.get_running_loop()
        )
        held = _Held(session, StreamableHTTPSessionManager(build_server(tools)))
        held.task = asyncio.create_task(held.run())
        await held.started.wait()
        session_id: list[str] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                found = Headers(raw=message.get("headers", [])).get(SESSION_HEADER)
                if found:
                    session_id.append(found)
            await send(message)

        await held.manager.handle_request(scope, _replay(body, receive), sending)
        if not session_id:  # the SDK refused the initialize: no session, no episode
            await session.interrupt("ClientRefused", "the MCP initialize was refused")
            held.stop.set()
            return
        key = session_id[0]
        self.by_id[key] = held

        def forgotten() -> None:  # its episode has ended: the MCP session goes too
            self.by_id.pop(key, None)
            held.stop.set()

        session.on_forget = forgotten
        self.server.hold("mcp:" + key, session)


def _client(scope: Scope, headers: Headers) -> dict[str, Any]:
    peer = scope.get("client")
    return {
        "client": f"{peer[0]}:{peer[1]}" if peer else None,
        "user_agent": headers.get("user-agent"),
    }


def _json(body: bytes | None) -> dict[str, Any] | None:
    try:
        found = json.loads(body) if body is not None else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return found if isinstance(found, dict) else None


async def _read(receive: Receive) -> bytes | None:
    """The request's whole body (None: over the cap)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replaying() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replaying
