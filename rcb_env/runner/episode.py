"""One episode of a run, start to record: the run's configuration (:class:`EvalConfig`), the
agent it names, and :func:`run_episode`, which drives the episode through the one driver
(:class:`~rcb_env.episode.driver.Episode`) and turns its outcome into the record. Used by the
local runner (:mod:`rcb_env.runner.eval`) and the Ray layer (:mod:`rcb_env.dispatch.ray`)
alike."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from rcb_env.agent import Agent, AgentFactory, agent_factory
from rcb_env.episode.config import BudgetConfig, EnvConfig, EpisodeConfig
from rcb_env.episode.driver import Episode
from rcb_env.episode.outcome import EpisodeOutcome
from rcb_env.grading.grader import GradingConfig
from rcb_env.logs import get_logger
from rcb_env.results.records import EpisodeRecord
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task.models import Paper, Pset, Snippet, task_hash

log = get_logger(__name__)


class EvalConfig(BaseModel):
    """Everything that defines a run (and must match when resuming it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str
    """Built-in agent name (oracle, null, single-shot, tools) or ``package.module:Class``."""
    model: dict[str, Any] | None = None
    """For the LLM agents: which model, where, and how it is called (the agents' model settings,
    e.g. ``rcb_agents.models.ModelConfig``, as JSON)."""
    with_paper: bool = True
    """single-shot: include the paper (False is the paper's "without paper" ablation)."""
    samples: int = 1
    """Episodes per snippet."""
    env: EnvConfig = EnvConfig()
    sandbox: SandboxConfig = SandboxConfig()
    grading: GradingConfig = GradingConfig()
    budgets: BudgetConfig = BudgetConfig()

    @property
    def episode(self) -> EpisodeConfig:
        """The run's episode config: its four parts, as every front door takes them (kept flat
        here, as a run's manifest and its records have them)."""
        return EpisodeConfig(
            env=self.env, sandbox=self.sandbox, grading=self.grading, budgets=self.budgets
        )

    @field_validator("model", mode="before")
    @classmethod
    def _model_as_json(cls, value: Any) -> Any:
        return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def make_agent_factory(cfg: EvalConfig, pset: Pset) -> AgentFactory:
    """The factory of ``cfg.agent`` (a built-in name or ``package.module:Class``).

    Raises:
        ConfigError: an unknown or broken spec.
    """
    return agent_factory(cfg.agent, pset, model=cfg.model, options={"with_paper": cfg.with_paper})


def run_episode(
    paper: Paper,
    snippet: Snippet,
    sample: int,
    agent: Agent,
    cfg: EvalConfig,
    factory: SandboxFactory,
    run_id: str,
    *,
    on_start: Callable[[Episode], None] | None = None,
) -> EpisodeRecord:
    """One episode, start to record, driven by :class:`~rcb_env.episode.driver.Episode`.
    Infrastructure failures become infra records. ``on_start`` is handed the episode before it
    runs (a run's ceiling reads what it spends while it runs)."""
    episode = Episode(
        paper,
        snippet,
        config=cfg.episode,
        factory=factory,
        episode_id=f"{snippet.slug[:40]}-s{sample}-{secrets.token_hex(4)}",
    )
    if on_start is not None:
        on_start(episode)
    try:
        outcome = episode.run(agent)
    finally:
        episode.close()
    record = episode_record(
        episode, outcome, run_id=run_id, sample=sample, agent=agent.describe(), cfg=cfg
    )
    episode_id = episode.episode_id
    log.info(
        "episode",
        run_id=run_id,
        task_id=snippet.id,
        episode_id=episode_id,
        sample=sample,
        status=record.status,
        passed=record.passed,
    )
    return record


def episode_record(
    episode: Episode,
    outcome: EpisodeOutcome,
    *,
    run_id: str,
    sample: int,
    agent: dict[str, Any],
    cfg: EvalConfig,
) -> EpisodeRecord:
    """The record of an ended ``episode`` (every door that records episodes as a run does:
    ``eval``, ``rcb-env serve``)."""
    return EpisodeRecord.from_outcome(
        outcome,
        run_id=run_id,
        episode_id=episode.episode_id,
        snippet_id=episode.snippet.id,
        paper_id=episode.paper.id,
        sample=sample,
        weight=episode.snippet.weight,
        task_hash=task_hash(episode.snippet),
        agent=agent,
        config=cfg.model_dump(mode="json", exclude={"agent"}),
        initial_observation=episode.initial,
        steps=episode.steps,
        model_calls=episode.model_calls,
        tokens=episode.tokens,
        cost=round(episode.cost, 6),
        started_at=episode.started_at,
        duration_s=round(episode.duration_s, 3),
    )
