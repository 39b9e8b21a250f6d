"""What every framework adapter shares: the framework's own agent loop runs in a thread of the
episode, its tool calls become the episode's steps (so the environment's budgets apply, whatever
the framework's own limits), and its model client talks to the endpoint through a recording
proxy (so the record holds each call's tokens, whatever client the framework uses)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib import metadata
from typing import Any, ClassVar

from rcb_agents.models.client import ModelConfig
from rcb_agents.models.pricing import load_prices
from rcb_agents.models.proxy import RecordingProxy
from rcb_agents.models.types import ModelCall
from rcb_env.errors import ModelError
from rcb_env.integrations.bridge import EpisodeBridge
from rcb_env.tools.actions import Action, ToolSpec

#: The endpoint a model spec without a base URL means.
OPENAI_URL = "https://api.openai.com/v1"


class FrameworkAgent(EpisodeBridge):
    """An :class:`~rcb_env.agent.Agent` (and a metered one) whose episode is worked by an agent
    framework's own loop. Subclasses implement :meth:`run_framework`."""

    name = "framework"
    framework: ClassVar[str] = ""
    """The framework's distribution name (its installed version goes in the record)."""

    def __init__(self, model: ModelConfig, *, max_turns: int = 100) -> None:
        super().__init__(label=self.framework)
        if model.provider != "openai":
            raise ValueError(
                f"{self.name} talks to OpenAI-compatible endpoints: --model openai:NAME"
            )
        self.model = model
        self.max_turns = max_turns
        self.proxy: RecordingProxy | None = None
        self.error: str | None = None
        self._thread: threading.Thread | None = None

    @property
    def api_key(self) -> str:
        import os

        return os.environ.get("OPENAI_API_KEY") or "unused"

    def run_framework(self, task: str, base_url: str) -> None:
        """Run the framework's agent on ``task`` with its model at ``base_url`` (the proxy) and
        the episode's tools through :meth:`tool`; returns when the framework's agent stops."""
        raise NotImplementedError

    def tool(self, name: str, arguments: dict[str, Any]) -> str:
        """One tool call of the framework's agent, as an episode step: its observation."""
        text, _is_error = self.call(name, arguments)
        if self.ended.is_set():
            self.stop_framework()
        return text

    def stop_framework(self) -> None:
        """The episode has ended (submitted, or a budget ran out): stop the framework's loop
        where it offers a way (the tool answers say so in any case)."""

    # the runner's side -------------------------------------------------------------------------
    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        super().start(observation, info, tools)
        proxy = RecordingProxy(
            self.model.base_url or OPENAI_URL,
            prices=load_prices(self.model.prices),
            concurrency=self.model.concurrency,
        )
        self.proxy = proxy.__enter__()
        self._thread = threading.Thread(target=self._drive, name=f"rcb-{self.name}", daemon=True)
        self._thread.start()

    def _drive(self) -> None:
        assert self.proxy is not None
        try:
            self.run_framework(self.statement, self.proxy.url)
        except BaseException as exc:  # the framework's own failure: recorded, workspace graded
            if not self.ended.is_set():  # (once the episode is over, being stopped is expected)
                self.error = f"{type(exc).__name__}: {exc}"[:2000]
        finally:
            self.disconnect()

    def left(self) -> Action | dict[str, Any] | str:
        if self.error is not None and self.proxy is not None and self.proxy.upstream_failures:
            # the model endpoint failed and took the framework down: not the agent's doing
            raise ModelError(f"{self.name}: the model endpoint failed ({self.error})")
        return super().left()

    def end(self, info: dict[str, Any]) -> None:
        super().end(info)
        if self._thread is not None:
            self._thread.join(timeout=60)  # it sees the end in its last tool answer
        if self.proxy is not None:
            self.proxy.close()

    def describe(self) -> dict[str, Any]:
        try:
            version = metadata.version(self.framework)
        except metadata.PackageNotFoundError:
            version = None
        return {
            **super().describe(),
            "name": self.name,
            "framework": self.framework,
            "version": version,
            "model": self.model.spec,
            "error": self.error,
        }

    # MeteredAgent ------------------------------------------------------------------------------
    def spent(self) -> tuple[int, float]:
        if self.proxy is None:
            return 0, 0.0
        return self.proxy.tokens, self.proxy.cost

    def drain_calls(self) -> Sequence[ModelCall]:
        return self.proxy.drain() if self.proxy is not None else []
