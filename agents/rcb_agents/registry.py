"""Built-in agents by name. The environment resolves names here (``rcb_env.agent``), through the
entry point ``builtin`` of the group ``rcb_env.agents`` that the project declares (pyproject.toml);
each agent is imported on first use, so an agent whose SDK is not installed only matters when
asked for. The module implements :class:`rcb_env.agent.AgentRegistry`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rcb_env.agent import Agent
from rcb_env.registry import import_target
from rcb_env.task.models import Pset

Factory = Callable[[], Agent]


@dataclass(frozen=True)
class Request:
    """What a run tells an agent builder."""

    pset: Pset
    model: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)


def _oracle(req: Request) -> Factory:
    from rcb_agents.baselines import OracleAgent
    from rcb_env.task.source import source_for

    answers = {s.id: s.reference_body for s in req.pset.snippets}
    # Layouts with their own placeholder (LMR-Bench's may be empty, or a `pass` that occurs
    # elsewhere in the file): the whole goal file as a perfect agent would leave it.
    files = {
        s.id: source_for(p).solved_file(p, s, s.reference_body)
        for p in req.pset.papers
        for s in p.snippets
        if s.placeholder is not None
    }
    return lambda: OracleAgent(answers, files)


def _null(_req: Request) -> Factory:
    from rcb_agents.baselines import NullAgent

    return NullAgent


def _llm(kind: str) -> Callable[[Request], Factory]:
    def build(req: Request) -> Factory:
        if req.model is None:
            raise ValueError(f"agent {kind} needs --model provider:name")
        from rcb_agents.llm import SingleShotAgent, ToolsAgent
        from rcb_agents.models import ModelConfig, make_model

        cfg = ModelConfig.model_validate(req.model)
        make_model(cfg)  # fail now on an unknown provider or a missing SDK, not per episode
        if kind == "tools":
            return lambda: ToolsAgent(make_model(cfg))
        with_paper = bool(req.options.get("with_paper", True))
        return lambda: SingleShotAgent(make_model(cfg), with_paper=with_paper)

    return build


#: Agent frameworks, each running its own loop in the episode ("module:Class" under
#: rcb_agents.frameworks; imported when asked for, so a framework that is not installed only
#: matters then).
FRAMEWORKS = {
    "mini-swe-agent": ("minisweagent", "MiniSweAgent", "minisweagent"),
    "openai-agents": ("openai_agents", "OpenAIAgentsAgent", "agents"),
    "smolagents": ("smolagents", "SmolagentsAgent", "smolagents"),
}


def _framework(kind: str) -> Callable[[Request], Factory]:
    def build(req: Request) -> Factory:
        import importlib

        from rcb_agents.models import ModelConfig

        if req.model is None:
            raise ValueError(f"agent {kind} needs --model openai:NAME (and --base-url)")
        module, cls_name, needs = FRAMEWORKS[kind]
        import importlib.util

        if importlib.util.find_spec(needs) is None:  # found, not imported (no side effects)
            raise ValueError(f"agent {kind} needs rcb-env[{kind}] (no module {needs!r})")
        cls = import_target(f"rcb_agents.frameworks.{module}:{cls_name}")
        cfg = ModelConfig.model_validate(req.model)
        max_turns = int(req.options.get("max_turns", 100))
        cls(cfg, max_turns=max_turns)  # fail now on a bad setting, not per episode
        factory: Factory = lambda: cls(cfg, max_turns=max_turns)  # noqa: E731
        return factory

    return build


def _cli(name: str) -> Callable[[Request], Factory]:
    """An agent CLI run inside the episode's sandbox (:mod:`rcb_agents.cli_agent`), its model
    behind the run's one proxy."""

    def build(req: Request) -> Factory:
        from rcb_agents.cli_agent import CliAgent, RunProxy
        from rcb_agents.clis import ADAPTERS
        from rcb_agents.models import ModelConfig

        adapter = ADAPTERS[name]
        cli = adapter.cli
        if req.model is None:
            raise ValueError(f"agent {name} needs --model {cli.provider}:NAME (and --base-url)")
        cfg = ModelConfig.model_validate(req.model)
        if cfg.provider != cli.provider:
            raise ValueError(f"agent {name} speaks to {cli.provider} models: --model "
                             f"{cli.provider}:NAME, not {cfg.spec}")  # fmt: skip
        if cli.executable() is None:
            raise ValueError(f"agent {name} {cli.version} is not installed: "
                             f"rcb-env agents install {name}")  # fmt: skip
        proxy = RunProxy(cfg)
        return lambda: CliAgent(adapter, cfg, proxy)

    return build


#: The agent CLIs by name (rcb_agents.clis.CLIS; named here so that listing them imports none).
CLI_AGENTS = ("claude-code", "codex", "mini-swe-agent-cli")

AGENTS: dict[str, Callable[[Request], Factory]] = {
    "oracle": _oracle,
    "null": _null,
    "single-shot": _llm("single-shot"),
    "tools": _llm("tools"),
    **{name: _framework(name) for name in FRAMEWORKS},
    **{name: _cli(name) for name in CLI_AGENTS},
}


def factory(
    name: str, pset: Pset, *, model: dict[str, Any] | None, options: dict[str, Any]
) -> Factory:
    """A factory of fresh agents named ``name``.

    Raises:
        ValueError: unknown name, or a setting the agent needs is missing.
    """
    build = AGENTS.get(name)
    if build is None:
        raise ValueError(
            f"unknown agent {name!r}: use one of {', '.join(AGENTS)} or package.module:ClassName"
        )
    return build(Request(pset, model, options))


def mcp_command(command: str, model: dict[str, Any] | None) -> Factory:
    """``--agent mcp:<command>``: the command works each episode through rcb-env's MCP server;
    with ``--model``, its model calls are recorded through a proxy in front of the endpoint.

    Raises:
        ValueError: the MCP server's packages (rcb-env[mcp]) are not installed.
    """
    try:
        from rcb_env.integrations.mcp_server import McpCommandAgent
    except ImportError as exc:
        raise ValueError(f"mcp agents need rcb-env[mcp] ({exc})") from None
    if model is None:
        return lambda: McpCommandAgent(command)
    from rcb_agents.frameworks.mcp_command import MeteredMcpCommandAgent
    from rcb_agents.models import ModelConfig

    cfg = ModelConfig.model_validate(model)
    return lambda: MeteredMcpCommandAgent(command, cfg)


def model_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Validated, complete model settings as JSON (what a run records).

    Raises:
        ValueError: invalid settings (pydantic's ValidationError is one).
    """
    from rcb_agents.models import ModelConfig

    return ModelConfig.model_validate(settings).model_dump(mode="json")


def agent_programs() -> list[dict[str, Any]]:
    """The agent CLIs: name, version, installed or not, wire format (``rcb-env agents
    list``)."""
    from rcb_agents.clis import listing

    return listing()


def install_agent_program(name: str, log: Callable[[str], None]) -> str:
    """Install the agent CLI ``name`` (what ``scripts/install.sh`` runs too); its folder.

    Raises:
        ValueError: unknown name.
        ConfigError: the install failed.
    """
    from rcb_agents.clis import CLIS, install

    cli = CLIS.get(name)
    if cli is None:
        raise ValueError(f"unknown agent CLI {name!r}: one of {', '.join(CLIS)}")
    return str(install(cli, log=log))
