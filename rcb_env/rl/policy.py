"""What a rollout asks of the caller's model: one async call per turn.

The environment never calls a model by itself. A policy takes the conversation (OpenAI chat
messages) and the tool schemas and returns the assistant message, with the token ids and
logprobs when its server gives them. ``rcb_agents.policy.OpenAIPolicy`` is one for
OpenAI-compatible servers (vLLM returns token ids on request).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rcb_env.frozen import Frozen


class ContextLengthError(Exception):
    """The conversation no longer fits the model's context: the rollout ends (stop reason
    ``context_length``) and is graded as it stands."""


class PolicyOutput(Frozen):
    message: dict[str, Any]
    """The assistant message in OpenAI chat format (``content``, ``tool_calls``)."""
    prompt_ids: tuple[int, ...] | None = None
    completion_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    finish_reason: str | None = None
    weight_version: str | None = None
    """The policy version that sampled this turn (e.g. the weights' step)."""
    sampling: dict[str, Any] | None = None
    """The sampling settings of this turn (temperature, top_p, max_tokens...)."""
    input_tokens: int = 0
    output_tokens: int = 0


@runtime_checkable
class Policy(Protocol):
    async def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> PolicyOutput:
        """The next assistant message.

        Raises:
            ContextLengthError: the conversation is too long for the model.
        """
        ...
