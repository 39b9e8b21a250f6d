"""The provider layer: one module per concern."""

from rcb_agents.models.client import ChatModel, ModelConfig, make_model
from rcb_agents.models.errors import ProviderError, RetryableError
from rcb_agents.models.retry import RetryPolicy
from rcb_agents.models.types import Completion, ModelCall, ToolCall, Turn, Usage

__all__ = [
    "ChatModel",
    "Completion",
    "ModelCall",
    "ModelConfig",
    "ProviderError",
    "RetryPolicy",
    "RetryableError",
    "ToolCall",
    "Turn",
    "Usage",
    "make_model",
]
