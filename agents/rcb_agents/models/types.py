"""Provider-neutral conversation, completion and call-record types."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rcb_env.frozen import Frozen


class ToolCall(Frozen):
    id: str
    name: str
    arguments: str
    """The raw JSON text the model produced (it may be malformed)."""


class Turn(Frozen):
    """One entry of a transcript."""

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    """assistant turns: the calls it made."""
    tool_call_id: str = ""
    """tool turns: which call this answers."""


class Usage(Frozen):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class Completion(Frozen):
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    stop_reason: str = ""
    logprobs: Any = None
    """Token log-probabilities (and ids) when the server returns them (e.g. vLLM), for RL."""


class ModelCall(Frozen):
    """One call as the episode record keeps it."""

    provider: str
    model: str
    request_chars: int
    """Size of the serialized request."""
    completion: Completion | None = None
    usage: Usage = Usage()
    cost: float = 0.0
    latency_s: float = 0.0
    retries: int = 0
    cached: bool = False
    error: str | None = None
    started_at: float = Field(default=0.0)
