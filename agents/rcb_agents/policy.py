"""A rollout policy for OpenAI-compatible servers (vLLM, SGLang, OpenAI, a local server).

It asks for per-token logprobs and, when ``tokens`` is on, for the exact prompt and completion
token ids (vLLM's ``return_token_ids``), and degrades to messages only when the server does not
return them: a trajectory then says ``tokens: none`` and a trainer must not re-tokenize it
silently.
"""

from __future__ import annotations

import os
from typing import Any

import openai

from rcb_env.rl.policy import ContextLengthError, PolicyOutput


class OpenAIPolicy:
    """``await policy(messages, tools)`` -> the next assistant message, with tokens if given."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        tokens: bool = True,
        temperature: float | None = None,
        max_tokens: int = 4096,
        weight_version: str | None = None,
        timeout_s: float = 600.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.tokens = tokens
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.weight_version = weight_version
        """Set by the trainer when it loads new weights; stamped on every call."""
        self.extra_body = dict(extra_body or {})
        self.client = openai.AsyncOpenAI(
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "unused",
            base_url=base_url,
            timeout=timeout_s,
        )

    async def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> PolicyOutput:
        extra = dict(self.extra_body)
        if self.tokens:
            extra["return_token_ids"] = True
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "tools": tools,
            "max_tokens": self.max_tokens,
            "logprobs": True,
            "extra_body": extra,
        }
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        try:
            response = await self.client.chat.completions.create(**kwargs)
        except openai.BadRequestError as exc:
            text = str(exc).lower()
            if "context" in text and ("length" in text or "window" in text):
                raise ContextLengthError(str(exc)) from exc
            raise
        choice = response.choices[0]
        message = choice.message.model_dump(exclude_none=True)
        message = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
        logprobs: tuple[float, ...] | None = None
        if choice.logprobs is not None and choice.logprobs.content:
            logprobs = tuple(float(t.logprob) for t in choice.logprobs.content)
        extra_choice = choice.model_extra or {}
        extra_response = response.model_extra or {}
        completion_ids = extra_choice.get("token_ids")
        prompt_ids = extra_response.get("prompt_token_ids")
        usage = response.usage
        return PolicyOutput(
            message=message,
            prompt_ids=tuple(int(i) for i in prompt_ids) if prompt_ids is not None else None,
            completion_ids=(
                tuple(int(i) for i in completion_ids) if completion_ids is not None else None
            ),
            logprobs=logprobs if completion_ids is not None or logprobs else None,
            finish_reason=choice.finish_reason,
            weight_version=self.weight_version,
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
        )
