"""An external MCP agent command (``--agent mcp:<command>``) with the run's model: its model
calls go through a recording proxy in front of the endpoint (``$RCB_MODEL_URL``, also
``$OPENAI_BASE_URL`` and ``{model_url}`` in the command), so the record has their tokens and
cost although the agent's client lives in another process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rcb_agents.frameworks.base import OPENAI_URL
from rcb_agents.models.client import ModelConfig
from rcb_agents.models.pricing import load_prices
from rcb_agents.models.proxy import RecordingProxy
from rcb_agents.models.types import ModelCall
from rcb_env.integrations.mcp_server import MODEL_URL_VARIABLE, McpCommandAgent
from rcb_env.tools.actions import ToolSpec


class MeteredMcpCommandAgent(McpCommandAgent):
    def __init__(self, command: str, model: ModelConfig) -> None:
        super().__init__(command)
        self.model = model
        self.proxy: RecordingProxy | None = None

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        self.proxy = RecordingProxy(
            self.model.base_url or OPENAI_URL,
            prices=load_prices(self.model.prices),
            concurrency=self.model.concurrency,
        ).__enter__()
        super().start(observation, info, tools)

    def command_env(self) -> dict[str, str]:
        assert self.proxy is not None
        return {
            MODEL_URL_VARIABLE: self.proxy.url,
            "OPENAI_BASE_URL": self.proxy.url,
            "RCB_MODEL": self.model.name,
        }

    def end(self, info: dict[str, Any]) -> None:
        super().end(info)
        if self.proxy is not None:
            self.proxy.close()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model.spec}

    def spent(self) -> tuple[int, float]:
        return (self.proxy.tokens, self.proxy.cost) if self.proxy is not None else (0, 0.0)

    def drain_calls(self) -> Sequence[ModelCall]:
        return self.proxy.drain() if self.proxy is not None else []
