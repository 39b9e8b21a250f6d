"""A minimal tool-calling agent in a process of its own, on the official ``mcp`` and ``openai``
SDKs: it lists the episode's tools from rcb-env's MCP server, offers them to a model as function
tools, and runs the calls the model makes until the model stops calling tools or the episode
ends. It is how any framework outside rcb-env's process takes part:

    rcb-env eval --agent "mcp:python examples/mcp_model_agent.py" \\
        --model openai:Qwen/Qwen3-32B --base-url http://localhost:8000/v1

The endpoint, the model and the MCP server come from the environment rcb-env gives the command
(``$RCB_MODEL_URL``, which is a recording proxy in front of ``--base-url``; ``$RCB_MODEL``;
``$RCB_MCP_URL``), so every model call lands in the episode's record with its tokens.
"""

from __future__ import annotations

import json
import os

import anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from openai import OpenAI


async def main(max_turns: int = 50) -> None:
    model = OpenAI(
        base_url=os.environ["RCB_MODEL_URL"], api_key=os.environ.get("OPENAI_API_KEY") or "unused"
    )
    async with (
        streamable_http_client(os.environ["RCB_MCP_URL"]) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        init = await mcp.initialize()
        tools = [
            {"type": "function", "function": {"name": t.name, "description": t.description or "",
                                              "parameters": t.input_schema}}
            for t in (await mcp.list_tools()).tools
        ]  # fmt: skip
        messages: list[dict[str, object]] = [{"role": "user", "content": init.instructions or ""}]
        for _ in range(max_turns):
            reply = (
                model.chat.completions.create(
                    model=os.environ.get("RCB_MODEL", "model"),
                    messages=messages,
                    tools=tools,
                )
                .choices[0]
                .message
            )
            messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                return
            for call in reply.tool_calls:
                result = await mcp.call_tool(
                    call.function.name, json.loads(call.function.arguments or "{}")
                )
                text = "".join(getattr(c, "text", "") for c in result.content)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                if result.is_error and "episode has ended" in text:
                    return


if __name__ == "__main__":
    anyio.run(main)
