"""OpenAI-compatible chat completions (OpenAI, vLLM, OpenRouter, ...) through the openai SDK."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import openai

from rcb_agents.models.client import ChatModel, ModelConfig
from rcb_agents.models.retry import sdk_errors
from rcb_agents.models.types import Completion, ToolCall, Turn, Usage
from rcb_env.tools.actions import ToolSpec


class OpenAIChat(ChatModel):
    provider = "openai"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.client = openai.OpenAI(
            api_key=os.environ.get("OPENAI_API_KEY") or "unused",
            base_url=config.base_url,
            max_retries=0,  # our policy retries (one place, tested)
            timeout=config.timeout_s,
        )

    def payload(
        self, system: str, transcript: Sequence[Turn], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for turn in transcript:
            if turn.role == "tool":
                messages.append(
                    {"role": "tool", "tool_call_id": turn.tool_call_id, "content": turn.text}
                )
            elif turn.role == "assistant":
                msg: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
                if turn.tool_calls:
                    msg["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in turn.tool_calls
                    ]
                messages.append(msg)
            else:
                messages.append({"role": "user", "content": turn.text})
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.config.max_output_tokens,
        }
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        if self.config.logprobs:
            body["logprobs"] = True
        return body

    def send(self, payload: dict[str, Any]) -> Completion:
        with sdk_errors(openai):
            response = self.client.chat.completions.create(**payload)
        choice = response.choices[0]
        message = choice.message
        calls = tuple(
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
            for c in (message.tool_calls or [])
            if getattr(c, "function", None) is not None
        )
        usage = response.usage
        cached = 0
        if usage is not None and usage.prompt_tokens_details is not None:
            cached = usage.prompt_tokens_details.cached_tokens or 0
        logprobs = None
        if getattr(choice, "logprobs", None) is not None:
            logprobs = json.loads(choice.logprobs.model_dump_json())
        return Completion(
            text=message.content or "",
            tool_calls=calls,
            usage=Usage(
                input_tokens=usage.prompt_tokens if usage else 0,
                output_tokens=usage.completion_tokens if usage else 0,
                cached_tokens=cached,
            ),
            stop_reason=choice.finish_reason or "",
            logprobs=logprobs,
        )
