"""The agent contract: what a runner drives. It belongs to the environment; agents (the baselines
in ``rcb_agents``, yours) implement it, and a runner takes a factory of them.

Built-in agents are resolved by name through ``rcb_agents.registry`` (imported by name on first
use, so ``rcb_env`` never imports ``rcb_agents`` and works without the LLM SDKs).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rcb_env.errors import ConfigError
from rcb_env.tools.actions import Action, ToolSpec

if TYPE_CHECKING:
    from rcb_env.task.models import Pset


#: The Ray actor that holds the model endpoints' concurrency caps of a run on a Ray cluster
#: (created by :mod:`rcb_env.runner.ray_runner`, used by the model clients of every worker).
MODEL_CAP_ACTOR = "rcb-env-model-cap"


@runtime_checkable
class Agent(Protocol):
    """Observation in, action out. ``act`` may return a typed action, a dict, or a JSON string
    (the environment validates it; a malformed one comes back as an error observation)."""

    name: str

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        """A new episode: the task statement, its info (``info["task"]`` holds the statement's
        fields) and the tools available."""
        ...

    def act(self, observation: str, info: dict[str, Any]) -> Action | dict[str, Any] | str:
        """The next action, given the last observation."""
        ...

    def end(self, info: dict[str, Any]) -> None:
        """The episode ended (``info["outcome"]`` holds how)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Name and settings, for the episode record."""
        ...


@runtime_checkable
class MeteredAgent(Protocol):
    """An agent that calls a model: the runner charges its spending to the episode's budgets and
    records its calls."""

    def spent(self) -> tuple[int, float]:
        """Tokens and cost (USD) spent so far in this episode."""
        ...

    def drain_calls(self) -> Sequence[Any]:
        """The model calls made since the last drain (pydantic models or JSON-able dicts)."""
        ...


class OutOfBudget(Exception):
    """Raised by an agent's ``act`` when it cannot give an action within the episode's
    remaining budget (an external agent that went quiet past the wall-clock limit). The runner
    then grades the workspace as it stands and ends the episode with ``truncated=True`` and
    this stop reason, exactly as the :class:`~rcb_env.episode.wrappers.Budgets` wrapper does."""

    def __init__(self, reason: str = "budget_wall_s") -> None:
        super().__init__(reason)
        self.reason = reason


AgentFactory = Callable[[], Agent]
"""Builds a fresh agent for each episode."""

#: Where built-in agent names are resolved (a module with ``factory(name, ...)``).
BUILTIN_REGISTRY = "rcb_agents.registry"


def load_agent_class(spec: str) -> type[Any]:
    """``package.module:ClassName`` -> the class (bring your own agent).

    Raises:
        ConfigError: the spec is malformed, the module or class does not exist.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"agent {spec!r}: expected a built-in name or 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"agent {spec!r}: cannot import {module_name}: {exc}") from None
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ConfigError(f"agent {spec!r}: {module_name} has no class {attr}")
    return cls


def _registry() -> Any:
    try:
        return importlib.import_module(BUILTIN_REGISTRY)
    except ImportError as exc:
        raise ConfigError(
            f"the built-in agents are not installed ({exc}); "
            "pip install 'rcb-env[agents]' or pass package.module:ClassName"
        ) from None


def model_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The built-in agents' model settings, validated and complete (as recorded in a run).

    Raises:
        ConfigError: invalid settings, or the built-in agents are not installed.
    """
    try:
        normalised: dict[str, Any] = _registry().model_settings(settings)
    except ValueError as exc:
        raise ConfigError(f"model settings: {exc}") from None
    return normalised


def agent_factory(
    spec: str,
    pset: Pset,
    *,
    model: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> AgentFactory:
    """A factory for the agent ``spec``: a built-in name (``oracle``, ``null``, ``single-shot``,
    ``tools``, ...), ``package.module:ClassName`` (built with no arguments), or
    ``mcp:<command>`` (an external agent that works each episode through rcb-env's MCP
    server: :class:`rcb_env.integrations.mcp_server.McpCommandAgent`).

    Raises:
        ConfigError: unknown name, a broken spec, or a missing model setting or package.
    """
    if spec.startswith("mcp:"):  # an external MCP-capable agent command per episode
        command = spec.removeprefix("mcp:").strip()
        if not command:
            raise ConfigError("agent 'mcp:': name the agent command, e.g. mcp:'my-agent {url}'")
        try:
            from rcb_env.integrations.mcp_server import McpCommandAgent
        except ImportError as exc:
            raise ConfigError(f"mcp agents need rcb-env[mcp] ({exc})") from None
        if model is not None:  # its model calls recorded through a proxy (rcb_agents)
            metered: AgentFactory = _registry().mcp_command(command, model)
            return metered
        return lambda: McpCommandAgent(command)
    if ":" in spec:
        return load_agent_class(spec)
    registry = _registry()
    try:
        made: AgentFactory = registry.factory(spec, pset, model=model, options=options or {})
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return made
