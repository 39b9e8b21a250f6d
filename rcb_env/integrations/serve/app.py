"""The ASGI app of ``rcb-env serve`` (starlette on uvicorn; OpenEnv's own server is not used:
its per-request environments, its capacity answered after the handshake and its missing ids
are what this replaces) and :func:`serve`, which runs it until SIGTERM and drains.

Routes: ``/ws`` (the session protocol, :mod:`.protocol`), ``/health``, ``/schema``,
``/metadata``, ``/state`` (the server's counts, or with ``?episode_id=`` an HTTP-held
episode's), ``/rcb`` (rcb-env's own: caps, timeouts, task ids), ``POST /reset`` and
``POST /step`` (HTTP-held episodes, :mod:`.held`), ``/mcp`` (the episode tools over MCP's
streamable HTTP, :mod:`.mcp_door`).

The token: off a loopback address every route needs the server's secret, given as a path
prefix (base URL ``http://host:port/<token>``: OpenEnv's client keeps the path and opens
``/<token>/ws``), as the password of the URL's user info (``http://rcb:<token>@host:port``:
the client sends it as HTTP Basic auth) or as ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import ipaddress
import re
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from rcb_env.integrations.serve.held import HeldEpisodes
from rcb_env.integrations.serve.mcp_door import McpDoor
from rcb_env.integrations.serve.protocol import error_frame, schema
from rcb_env.integrations.serve.sessions import EpisodeServer
from rcb_env.logs import get_logger

__all__ = ["MAX_FRAME_BYTES", "TOKEN_PATTERN", "build_app", "needs_token", "serve"]

log = get_logger(__name__)

MAX_FRAME_BYTES = 4 * 1024 * 1024
"""The largest websocket frame taken (an action is at most 1 MB of JSON)."""


TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_~.-]{16,256}")
"""A token: at least 16 characters that stand in a URL's path and password as they are."""


def needs_token(host: str) -> bool:
    """Whether serving on ``host`` requires the token (anything but a loopback address)."""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rcb-env")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "0"


def build_app(server: EpisodeServer) -> Starlette:
    """The routes of ``server`` (the token is checked around them: :class:`TokenGate`)."""
    the_schema = schema()

    async def health(_request: Request) -> JSONResponse:
        if server.draining:
            return JSONResponse({"status": "unhealthy"}, status_code=503)
        return JSONResponse({"status": "healthy"})

    async def schema_route(_request: Request) -> JSONResponse:
        return JSONResponse(the_schema)

    async def metadata(_request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "name": "rcb-env",
                "description": (
                    f"Research-code episodes: fill one masked snippet of a paper's code "
                    f"({len(server.task_ids)} tasks served); graded by the paper's tests."
                ),
                "readme_content": None,
                "version": _version(),
                "author": None,
                "documentation_url": None,
            }
        )

    held = HeldEpisodes(server)

    async def state(request: Request) -> JSONResponse:
        episode_id = request.query_params.get("episode_id")
        if episode_id is not None:
            return held.state(episode_id)
        return JSONResponse(
            {
                "episode_id": None,
                "step_count": 0,
                "active": server.open_episodes,
                "max": server.limits.max_episodes,
                "draining": server.draining,
            }
        )

    async def rcb(_request: Request) -> JSONResponse:
        return JSONResponse(server.info())

    async def ws(websocket: WebSocket) -> None:
        refusal = server.refusal()
        if refusal is not None:  # refused at the handshake: the client is told, nothing cached
            code, message = refusal
            await websocket.send_denial_response(
                JSONResponse(
                    error_frame(code, message, "handshake"),
                    status_code=503,
                    headers={"Retry-After": "5"},
                )
            )
            return
        await websocket.accept()
        client = {
            "client": f"{websocket.client.host}:{websocket.client.port}"
            if websocket.client
            else None,
            "user_agent": websocket.headers.get("user-agent"),
        }
        session = server.connect(client)
        try:
            while True:
                received = await websocket.receive()
                if received["type"] == "websocket.disconnect":
                    break
                text = received.get("text")
                raw: str | bytes = text if isinstance(text, str) else received.get("bytes") or b""
                reply = await session.answer(raw)
                if reply is None:
                    await websocket.close(1000)
                    break
                await websocket.send_json(reply)
        except (WebSocketDisconnect, OSError, RuntimeError):
            pass  # the client went away (a running episode is recorded below)
        finally:
            await session.disconnected()

    routes = [
        Route("/health", health),
        Route("/schema", schema_route),
        Route("/metadata", metadata),
        Route("/state", state),
        Route("/rcb", rcb),
        Route("/reset", held.reset, methods=["POST"]),
        Route("/step", held.step, methods=["POST"]),
        Route("/mcp", McpDoor(server), methods=["GET", "POST", "DELETE"]),
        WebSocketRoute("/ws", ws),
    ]
    return Starlette(routes=routes)


class TokenGate:
    """Lets through only requests that carry ``token`` (see the module); the path prefix is
    taken off before the routes see the path. Request ids: an HTTP answer carries the
    request's ``X-Request-Id`` (or a new one)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    def _allowed(self, scope: Scope) -> Scope | None:
        if self.token is None:
            return scope
        path: str = scope.get("path", "")
        prefix = "/" + self.token
        head, sep, rest = path[1:].partition("/")
        if hmac.compare_digest(("/" + head).encode(), prefix.encode()):
            inner = "/" + rest if sep else "/"
            return {**scope, "path": inner, "raw_path": inner.encode()}
        for name, value in scope.get("headers", []):
            if name != b"authorization":
                continue
            kind, _, given = value.decode("latin-1").partition(" ")
            if kind.lower() == "bearer" and hmac.compare_digest(
                given.encode(), self.token.encode()
            ):
                return scope
            if kind.lower() == "basic":
                with contextlib.suppress(ValueError):
                    _user, _, password = base64.b64decode(given).decode().partition(":")
                    if hmac.compare_digest(password.encode(), self.token.encode()):
                        return scope
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        allowed = self._allowed(scope)
        if allowed is None:
            denial = JSONResponse({"detail": "a token is required"}, status_code=403)
            if scope["type"] == "websocket":
                await WebSocket(scope, receive, send).send_denial_response(denial)
            else:
                await denial(scope, receive, send)
            return
        if scope["type"] == "http":
            await self.app(allowed, receive, _with_request_id(allowed, send))
        else:
            await self.app(allowed, receive, send)


def _with_request_id(scope: Scope, send: Send) -> Send:
    given = dict(scope.get("headers", [])).get(b"x-request-id")
    request_id = (given or secrets.token_hex(8).encode())[:255]

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {
                **message,
                "headers": [*message.get("headers", []), (b"x-request-id", request_id)],
            }
        await send(message)

    return sending


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handling (:func:`serve` drains first)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve(
    server: EpisodeServer,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    ping_s: float = 20.0,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``server``'s episodes until SIGTERM or SIGINT, then drain (no new connection or
    episode; running ones get ``drain_s``, then are recorded interrupted) and return.
    ``on_ready`` gets the base URL to give a client (with the token's path prefix)."""
    app = TokenGate(build_app(server), token)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        ws="websockets-sansio",
        ws_max_size=MAX_FRAME_BYTES,
        ws_per_message_deflate=False,  # a 136 KB statement: 4.4 ms deflated, 1.1 ms plain
        ws_ping_interval=ping_s or None,
        ws_ping_timeout=ping_s or None,
        h11_max_incomplete_event_size=64 * 1024,
        access_log=False,  # a path may hold the token
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    uv = _Server(config)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        serving = asyncio.create_task(uv.serve())
        while not uv.started:
            if serving.done():
                await serving  # it could not start: its error
                return
            await asyncio.sleep(0.02)
        bound = uv.servers[0].sockets[0].getsockname()[1]
        shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
        url = f"http://{shown}:{bound}" + (f"/{token}" if token else "")
        if on_ready is not None:
            on_ready(url)
        tick = max(1.0, min(server.limits.idle_s, server.limits.episode_wall_s) / 4)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=tick)
            await server.reap()
        log.info("serve: draining", open_episodes=server.open_episodes)
        await server.drain()
        uv.should_exit = True
        await serving

    try:
        asyncio.run(main())
    finally:
        server.close()
        sys.stderr.flush()
