"""An rcb-env episode behind a Model Context Protocol server (needs ``rcb-env[mcp]``).

Any framework that speaks MCP works an episode through the same tools as a native agent
(list, read, search, edit, run commands, run tests, read the paper, submit: the same names and
JSON schemas, from :func:`rcb_env.tools.actions.tool_specs`), with the task statement as the
server's instructions and as the resource ``rcb://task``.

The episode itself is run by the ordinary runner (:func:`rcb_env.runner.eval.run_episode`), so
it is graded, budgeted and recorded exactly as a native one: the server side is an
:class:`~rcb_env.agent.Agent`, :class:`EpisodeBridge`, whose ``act`` waits for the client's next
tool call and whose observation becomes that call's result. The budgets are the environment's
(steps, wall time): a client that exceeds the step budget is truncated by the environment, one
that goes quiet past the wall budget is graded as its workspace stands, and every call after the
end gets a clear error. A client that disconnects without submitting has its workspace graded as
it stands (as the tools agent does when its model stops calling tools).

Transports: stdio (:func:`serve_stdio`, ``rcb-env mcp serve``) and streamable HTTP on 127.0.0.1
(:class:`HttpEndpoint`). :class:`McpCommandAgent` runs an external MCP-capable agent command per
episode against an HTTP endpoint (``rcb-env eval --agent mcp:<command>``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server

from rcb_env.integrations.bridge import ENDED, EpisodeBridge

__all__ = [
    "ENDED",
    "EpisodeBridge",
    "EpisodeTools",
    "HttpEndpoint",
    "McpCommandAgent",
    "build_server",
    "serve_episode",
    "serve_stdio",
]
from rcb_env.logs import get_logger
from rcb_env.tools.actions import ToolSpec

#: The task statement's resource.
TASK_URI = "rcb://task"
#: The environment variable (and ``{url}`` in the command) that tells an external agent where
#: its episode's MCP endpoint is.
URL_VARIABLE = "RCB_MCP_URL"
#: The environment variable (and ``{model_url}`` in the command) that names the model endpoint
#: an external agent should call, when the run has one (a recording proxy in front of it).
MODEL_URL_VARIABLE = "RCB_MODEL_URL"

log = get_logger(__name__)


class EpisodeTools(Protocol):
    """What an MCP server of one episode serves: an :class:`EpisodeBridge`, or a session of
    ``rcb-env serve`` (:class:`rcb_env.integrations.serve.mcp_door.SessionTools`)."""

    @property
    def statement(self) -> str: ...
    @property
    def tools(self) -> list[ToolSpec]: ...
    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """One tool call (blocking: the server runs it in a worker thread): its observation
        and whether it is an error."""
        ...


def build_server(bridge: EpisodeTools, *, name: str = "rcb-env") -> Server[Any]:
    """The MCP server of one episode (the episode must have started: its statement is the
    server's instructions)."""
    tools = [
        types.Tool(name=t.name, description=t.description, input_schema=t.parameters)
        for t in bridge.tools
    ]
    known = {t.name for t in tools}

    async def list_tools(
        _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        _ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in known:
            text, is_error = f"error: no tool named {params.name!r}", True
        else:
            args = dict(params.arguments or {})
            text, is_error = await anyio.to_thread.run_sync(bridge.call, params.name, args)
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)

    async def list_resources(
        _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=TASK_URI,
                    name="task",
                    description="The task statement: file, masked block, files, paper.",
                    mime_type="text/plain",
                )
            ]
        )

    async def read_resource(
        _ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if str(params.uri) != TASK_URI:
            raise ValueError(f"no resource {params.uri}")
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=TASK_URI, text=bridge.statement, mime_type="text/plain"
                )
            ]
        )

    return Server(
        name,
        instructions=bridge.statement,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


async def serve_stdio(bridge: EpisodeBridge) -> None:
    """Serve the episode on this process's stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    await anyio.to_thread.run_sync(bridge.ready.wait)
    server = build_server(bridge)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        bridge.disconnect()


class HttpEndpoint:
    """The episode's server over streamable HTTP on 127.0.0.1 (an ephemeral port unless one is
    given), in a thread of its own; :attr:`url` is the MCP endpoint."""

    def __init__(self, bridge: EpisodeBridge, *, port: int = 0) -> None:
        import uvicorn

        self.bridge = bridge
        app = build_server(bridge).streamable_http_app(host="127.0.0.1")
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="rcb-mcp-http", daemon=True)
        self.url = ""

    def __enter__(self) -> HttpEndpoint:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the MCP HTTP endpoint did not start")
            time.sleep(0.01)
        sock = self._server.servers[0].sockets[0]
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


class McpCommandAgent(EpisodeBridge):
    """An external MCP-capable agent command per episode (``--agent mcp:<command>``): at the
    episode's start an HTTP endpoint opens on 127.0.0.1 and the command runs with its URL in
    ``$RCB_MCP_URL`` (and in place of ``{url}`` in the command). When the command exits, the
    episode ends as its workspace stands unless it submitted; the runner's budgets apply."""

    name = "mcp"

    def __init__(self, command: str) -> None:
        super().__init__(label=command)
        self.command = command
        self._endpoint: HttpEndpoint | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._watch: threading.Thread | None = None
        self.exit_code: int | None = None

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        super().start(observation, info, tools)
        self._endpoint = HttpEndpoint(self).__enter__()
        url = self._endpoint.url
        extra = self.command_env()
        argv = [
            a.replace("{url}", url).replace("{model_url}", extra.get(MODEL_URL_VARIABLE, ""))
            for a in shlex.split(self.command)
        ]
        env = {**os.environ, URL_VARIABLE: url, **extra}
        self._proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
        self._watch = threading.Thread(target=self._wait, name="rcb-mcp-agent", daemon=True)
        self._watch.start()
        log.info("mcp agent started", command=self.command, url=url, pid=self._proc.pid)

    def command_env(self) -> dict[str, str]:
        """More environment variables for the command (a model endpoint to use, ...)."""
        return {}

    def _wait(self) -> None:
        assert self._proc is not None
        self.exit_code = self._proc.wait()
        self.disconnect()

    def end(self, info: dict[str, Any]) -> None:
        super().end(info)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)  # it sees the end in its last answer
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._endpoint is not None:
            self._endpoint.close()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "command": self.command, "exit_code": self.exit_code}


def serve_episode(
    pset: Any,
    cfg: Any,
    run_dir: Any,
    *,
    http: bool = False,
    port: int = 0,
    on_url: Any = None,
) -> Any:
    """One episode (the selection must hold exactly one snippet) served over stdio, or over
    HTTP on 127.0.0.1 (``on_url`` is told the endpoint), graded and recorded in ``run_dir`` as
    an ``eval`` run of one episode: its summary, once the episode has ended.

    Raises:
        ConfigError: the selection is not one snippet.
    """
    from rcb_env.errors import ConfigError
    from rcb_env.runner.eval import run_eval

    if len(pset.snippets) != 1:
        raise ConfigError(
            f"mcp serve runs one episode: the selection has {len(pset.snippets)} snippets "
            "(narrow it with --paper and --snippet)"
        )
    bridge = EpisodeBridge(label="stdio" if not http else "http")
    result: dict[str, Any] = {}

    def episode() -> None:
        try:
            result["summary"] = run_eval(
                pset, cfg, run_dir, make_agent=lambda: bridge, infra_retries=0, only_ready=False
            )
        except BaseException as exc:
            result["error"] = exc
        finally:
            bridge.ended.set()
            bridge.ready.set()
            bridge._refuse_waiting()

    runner = threading.Thread(target=episode, name="rcb-mcp-episode", daemon=True)
    runner.start()
    if http:
        bridge.ready.wait()
        if not bridge.ended.is_set():
            with HttpEndpoint(bridge, port=port) as endpoint:
                if on_url is not None:
                    on_url(endpoint.url)
                runner.join()
    else:
        anyio.run(serve_stdio, bridge)
    runner.join()
    if "error" in result:
        raise result["error"]
    return result["summary"]
