"""OpenEnv's own ``MCPToolClient`` (openenv-core, unchanged) against ``rcb-env serve``'s ``/ws``,
run by the interpreter of ``.venv/openenv`` (tests/integrations/test_serve_doors.py). Prints one
JSON object: what it saw.

Usage: python openenv_mcp_client.py ws <base_url> <task_id> <oracle body>   (its default mode:
       list_tools and call_tool steps over /ws)
       python openenv_mcp_client.py http <base_url>   (its production mode: OpenEnv's JSON-RPC
       dialect at POST /mcp, a session of a drawn task)
"""

from __future__ import annotations

import json
import sys
from typing import Any

from openenv.core.env_server.mcp_types import (  # type: ignore[import-not-found,unused-ignore]
    CallToolAction,
)
from openenv.core.mcp_client import MCPToolClient  # type: ignore[import-not-found,unused-ignore]


def production(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    client = MCPToolClient(base_url=url, message_timeout_s=300)
    client.use_production_mode = True
    c = client.sync()
    out["tools"] = sorted(t.name for t in c.list_tools())
    out["list_files"] = c.call_tool("list_files")
    out["submit"] = c.call_tool("submit")
    try:
        c.call_tool("list_files")
        out["after_end"] = "accepted"
    except RuntimeError as exc:
        out["after_end"] = str(exc)
    c.close()
    return out


def main() -> None:
    mode, url, *rest = sys.argv[1:]
    if mode == "http":
        print(json.dumps(production(url)))
        return
    task, body = rest
    out: dict[str, Any] = {}
    c = MCPToolClient(base_url=url, message_timeout_s=300).sync()
    c.connect()
    reset = c.reset(task_id=task)
    out["reset"] = {"done": reset.done, "reward": reset.reward}
    out["tools"] = sorted(t.name for t in c.list_tools())
    out["list_files"] = c.call_tool("list_files")
    try:
        c.call_tool("read_file")  # no path: a malformed call
        out["malformed"] = "accepted"
    except RuntimeError as exc:
        out["malformed"] = str(exc)
    submitted = c.step(CallToolAction(tool_name="submit", arguments={"body": body}))
    out["submit"] = {
        "done": submitted.done,
        "reward": submitted.reward,
        "result": submitted.observation.result,
    }
    try:
        c.call_tool("list_files")
        out["after_end"] = "accepted"
    except RuntimeError as exc:
        out["after_end"] = str(exc)
    c.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
