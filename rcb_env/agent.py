"""The agent contract: what a runner drives. It belongs to the environment; agents (the baselines
in ``rcb_agents``, yours) implement it, and a runner takes a factory of them.

Built-in agents are resolved by name through the registry that the installed distribution
declares in the entry-point group ``rcb_env.agents`` (rcb-env's own: ``rcb_agents.registry``, loaded
on first use), so ``rcb_env`` never imports ``rcb_agents`` and works without the LLM SDKs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from rcb_env.errors import ConfigError
from rcb_env.registry import import_target
from rcb_env.tools.actions import Action, ToolSpec

# The tool-calling agents' prompt and nudge live with their loop; importable from here as well.
from rcb_env.tools.chat import NUDGE as NUDGE  # noqa: PLC0414
from rcb_env.tools.chat import tools_system_prompt as tools_system_prompt  # noqa: PLC0414

if TYPE_CHECKING:
    from rcb_env.sandbox.program import ProgramRunner
    from rcb_env.task.models import Pset


#: The Ray actor that holds the model endpoints' concurrency caps of a run on a Ray cluster
#: (created by :mod:`rcb_env.dispatch.ray`, used by the model clients of every worker).
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


@runtime_checkable
class ProgramAgent(Protocol):
    """An agent that is a program of its own (an agent CLI), run inside the episode's sandbox:
    :meth:`work` starts it in the masked workspace with the task statement as its prompt,
    through the ``runner`` the episode driver hands it (one program with the sandbox's
    isolation, a few more read-only folders and its own environment; not a tool any model
    sees). It edits the files with its own tools and exits; the driver then grades the snippet
    region of the edited file exactly like a ``submit`` without a body. Its ``end`` and
    ``describe`` are :class:`Agent`'s; a metered one (:class:`MeteredAgent`) has its model
    calls recorded on the episode."""

    name: str

    def work(self, statement: str, info: dict[str, Any], runner: ProgramRunner) -> str:
        """Run the program to its end; why it ended (a
        :class:`~rcb_env.episode.outcome.StopReason`): ``submit`` (it exited with success: its
        own "done", graded like a submit, ``completed``), ``agent_stopped`` (it failed on its
        own: graded as it stands, ``truncated``; said in :meth:`describe`) or the budget that
        stopped it (``budget_wall_s`` when the runner killed it, ``budget_tokens``, ...).

        Raises:
            ModelError: the model endpoint failed it (an infrastructure failure).
            SandboxError: the sandbox could not run it.
        """
        ...

    def end(self, info: dict[str, Any]) -> None: ...

    def describe(self) -> dict[str, Any]: ...


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

#: The entry-point group of agent registries (``[project.entry-points."rcb_env.agents"]``).
AGENTS_GROUP = "rcb_env.agents"
#: The entry that resolves the built-in agent names (rcb-env's project declares it).
BUILTIN = "builtin"


class AgentRegistry(Protocol):
    """What an entry of :data:`AGENTS_GROUP` provides (a module with these functions)."""

    def factory(
        self, name: str, pset: Pset, *, model: dict[str, Any] | None, options: dict[str, Any]
    ) -> AgentFactory:
        """A factory of fresh agents named ``name``.

        Raises:
            ValueError: unknown name, or a setting the agent needs is missing.
        """
        ...

    def mcp_command(self, command: str, model: dict[str, Any] | None) -> AgentFactory:
        """``mcp:<command>``: the command as an agent each episode, its model calls recorded
        through a proxy when ``model`` is given.

        Raises:
            ValueError: the MCP server's packages are not installed.
        """
        ...

    def model_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Validated, complete model settings as JSON (what a run records).

        Raises:
            ValueError: invalid settings.
        """
        ...

    def agent_programs(self) -> list[dict[str, Any]]:
        """The agents that are programs of their own (agent CLIs): name, version, installed,
        wire format."""
        ...

    def install_agent_program(self, name: str, log: Callable[[str], None]) -> str:
        """Install one (pinned, into the rcb-env home); its folder.

        Raises:
            ValueError: unknown name.
            ConfigError: the install failed.
        """
        ...


def load_agent_class(spec: str) -> type[Any]:
    """``package.module:ClassName`` -> the class (bring your own agent).

    Raises:
        ConfigError: the spec is malformed, the module or class does not exist.
    """
    module_name, _, attr = spec.partition(":")
    try:
        cls = import_target(spec)
    except ValueError:
        raise ConfigError(
            f"agent {spec!r}: expected a built-in name or 'package.module:ClassName'"
        ) from None
    except ImportError as exc:
        raise ConfigError(f"agent {spec!r}: cannot import {module_name}: {exc}") from None
    except AttributeError:
        cls = None
    if not isinstance(cls, type):
        raise ConfigError(f"agent {spec!r}: {module_name} has no class {attr}")
    return cls


def _outside(
    spec: str, cls: type[Any], model: dict[str, Any] | None, options: dict[str, Any]
) -> AgentFactory:
    """The factory of an outside agent class: built with what its constructor asks for by
    name, ``model`` (the run's validated model settings: ``spec``, ``base_url``, ...; as
    ``--model`` and its flags give them) and ``options`` (the run's agent options, such as
    ``with_paper``). A constructor that asks for neither is called with no arguments, as
    before.

    Raises:
        ConfigError: it requires a model and the run names none.
    """
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return cast(AgentFactory, cls)
    given: dict[str, Any] = {}
    for name, value in (("model", model), ("options", options)):
        asked = parameters.get(name)
        if asked is None or asked.kind is inspect.Parameter.POSITIONAL_ONLY:
            continue
        if value is None:
            if asked.default is inspect.Parameter.empty:
                raise ConfigError(f"agent {spec!r} needs a model: pass --model")
            continue
        given[name] = value
    build: Callable[..., Agent] = cls
    return functools.partial(build, **given) if given else build


def _registry() -> AgentRegistry:
    """The built-in agents' registry, from the installed distributions' metadata.

    Raises:
        ConfigError: no distribution declares it, or it does not import.
    """
    found = entry_points(group=AGENTS_GROUP, name=BUILTIN)
    try:
        if not found:
            raise ImportError(f"no entry point {BUILTIN!r} in the group {AGENTS_GROUP!r}")
        registry: AgentRegistry = next(iter(found)).load()
    except ImportError as exc:
        raise ConfigError(
            f"the built-in agents are not installed ({exc}); "
            "pip install 'rcb-env[agents]' or pass package.module:ClassName"
        ) from None
    return registry


def model_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The built-in agents' model settings, validated and complete (as recorded in a run).

    Raises:
        ConfigError: invalid settings, or the built-in agents are not installed.
    """
    try:
        return _registry().model_settings(settings)
    except ValueError as exc:
        raise ConfigError(f"model settings: {exc}") from None


def agent_factory(
    spec: str,
    pset: Pset,
    *,
    model: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> AgentFactory:
    """A factory for the agent ``spec``: a built-in name (``oracle``, ``null``, ``single-shot``,
    ``tools``, ...), ``package.module:ClassName`` (built with the model settings and options
    its constructor asks for: :func:`_outside`), or
    ``mcp:<command>`` (an external agent that works each episode through rcb-env's MCP
    server: :class:`rcb_env.integrations.mcp_server.McpCommandAgent`, built by the registry).

    Raises:
        ConfigError: unknown name, a broken spec, or a missing model setting or package.
    """
    if spec.startswith("mcp:"):  # an external MCP-capable agent command per episode
        command = spec.removeprefix("mcp:").strip()
        if not command:
            raise ConfigError("agent 'mcp:': name the agent command, e.g. mcp:'my-agent {url}'")
        try:
            return _registry().mcp_command(command, model)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if ":" in spec:
        return _outside(spec, load_agent_class(spec), model, options or {})
    registry = _registry()
    try:
        return registry.factory(spec, pset, model=model, options=options or {})
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def agent_programs() -> list[dict[str, Any]]:
    """The built-in agent CLIs (``rcb-env agents list``).

    Raises:
        ConfigError: the built-in agents are not installed.
    """
    return _registry().agent_programs()


def install_agent_program(name: str, log: Callable[[str], None] = lambda _m: None) -> str:
    """Install the built-in agent CLI ``name`` (``rcb-env agents install``); its folder.

    Raises:
        ConfigError: unknown name, or the install failed.
    """
    try:
        return _registry().install_agent_program(name, log)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
