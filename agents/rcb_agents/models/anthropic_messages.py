"""The Anthropic Messages API through the anthropic SDK."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import anthropic

from rcb_agents.models.client import ChatModel, ModelConfig
from rcb_agents.models.retry import sdk_errors
from rcb_agents.models.types import Completion, ToolCall, Turn, Usage
from rcb_env.tools.actions import ToolSpec


def _input(arguments: str) -> Any:
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {"_unparsed": arguments}
    return value if isinstance(value, dict) else {"_unparsed": arguments}


class AnthropicMessages(ChatModel):
    provider = "anthropic"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.client = anthropic.Anthropic(
            api_key=os.environ.get("ANTHROPIC_API_KEY") or "unused",
            base_url=config.base_url,
            max_retries=0,  # our policy retries (one place, tested)
            timeout=config.timeout_s,
        )

    def payload(
        self, system: str, transcript: Sequence[Turn], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        for turn in transcript:
            if turn.role == "assistant":
                blocks: list[dict[str, Any]] = []
                if turn.text:
                    blocks.append({"type": "text", "text": turn.text})
                blocks += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
                    for c in turn.tool_calls
                ]
                messages.append({"role": "assistant", "content": blocks})
                continue
            block: dict[str, Any] = (
                {"type": "tool_result", "tool_use_id": turn.tool_call_id, "content": turn.text}
                if turn.role == "tool"
                else {"type": "text", "text": turn.text}
            )
            # Consecutive user-side blocks (tool results) travel in one user message.
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
        body: dict[str, Any] = {
            "model": self.model,
            "system": system,
            "messages": messages,
            "max_tokens": self.config.max_output_tokens,
        }
        if self.config.temperature is not None:
            # Not a named parameter of every SDK version; the API field is sent as is.
            body["extra_body"] = {"temperature": self.config.temperature}
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        return body

    def send(self, payload: dict[str, Any]) -> Completion:
        with sdk_errors(anthropic):
            response = self.client.messages.create(**payload)
        text = "".join(b.text for b in response.content if b.type == "text")
        calls = tuple(
            ToolCall(id=b.id, name=b.name, arguments=json.dumps(b.input))
            for b in response.content
            if b.type == "tool_use"
        )
        u = response.usage
        return Completion(
            text=text,
            tool_calls=calls,
            usage=Usage(
                input_tokens=u.input_tokens + (u.cache_read_input_tokens or 0),
                output_tokens=u.output_tokens,
                cached_tokens=u.cache_read_input_tokens or 0,
            ),
            stop_reason=response.stop_reason or "",
        )
