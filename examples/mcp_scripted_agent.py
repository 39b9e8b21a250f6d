"""An external agent that works an rcb-env episode through its MCP server, written with nothing
but the official ``mcp`` SDK's client: the shape of any MCP-capable framework's side.

It plays a fixed plan (a JSON list of ``{"tool": ..., "arguments": {...}}``, each optionally
with ``"repeat": N``, or ``{"sleep": seconds}``) and logs what it saw as JSON lines, so that a
test or a person can check it. Run it against a served episode, either way:

    # HTTP: rcb-env starts the endpoint and this command per episode
    rcb-env eval --agent "mcp:python examples/mcp_scripted_agent.py --plan plan.json" ...

    # stdio: this script starts `rcb-env mcp serve` and speaks to it over its stdin/stdout
    python examples/mcp_scripted_agent.py --plan plan.json --stdio -- \
        rcb-env mcp serve --paper adamw-warmup --snippet "bias correction"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def play(session: ClientSession, plan: list[dict[str, Any]], log: Any) -> None:
    init = await session.initialize()
    tools = await session.list_tools()
    resources = await session.list_resources()
    task = await session.read_resource("rcb://task")
    log({
        "event": "connected",
        "server": init.server_info.name,
        "instructions": init.instructions or "",
        "tools": {t.name: t.input_schema for t in tools.tools},
        "resources": [str(r.uri) for r in resources.resources],
        "task": "".join(getattr(c, "text", "") for c in task.contents),
    })  # fmt: skip
    for entry in plan:
        if "sleep" in entry:  # a pause (a slow model)
            await anyio.sleep(float(entry["sleep"]))
            continue
        for _ in range(int(entry.get("repeat", 1))):
            result = await session.call_tool(entry["tool"], entry.get("arguments") or {})
            log({
                "event": "call", "tool": entry["tool"], "is_error": bool(result.is_error),
                "text": _text(result),
            })  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", type=Path, required=True, help="JSON list of tool calls.")
    parser.add_argument("--log", type=Path, help="Where to append what was seen (JSON lines).")
    parser.add_argument("--url", help="The MCP endpoint (default: $RCB_MCP_URL).")
    parser.add_argument("--stdio", action="store_true", help="Start the server command given.")
    parser.add_argument("server", nargs="*", help="With --stdio, after --: the server command.")
    args = parser.parse_args()
    plan = json.loads(args.plan.read_text())

    def log(event: dict[str, Any]) -> None:
        line = json.dumps(event)
        if args.log is None:
            print(line, file=sys.stderr)
        else:
            with args.log.open("a") as f:
                f.write(line + "\n")

    async def run() -> None:
        if args.stdio:
            argv = args.server
            params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await play(s, plan, log)
            return
        url = args.url or os.environ["RCB_MCP_URL"]
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
            await play(s, plan, log)

    anyio.run(run)


if __name__ == "__main__":
    main()
