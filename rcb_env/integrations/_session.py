"""One episode behind a synchronous, trainer-neutral interface: start a task by id, call tools by
name, get the reward. The trainer adapters (:mod:`rcb_env.integrations.trl`,
:mod:`rcb_env.integrations.skyrl`) are thin layers over it."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from rcb_env.episode.driver import ENDED, BudgetConfig, Episode
from rcb_env.episode.env import EnvConfig
from rcb_env.episode.outcome import EpisodeOutcome, StopReason
from rcb_env.errors import ConfigError
from rcb_env.grading.grader import GradingConfig
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task.models import Pset


@functools.lru_cache(maxsize=8)
def load_tasks(pset: str | None) -> Pset:
    """A benchmark by name or folder (None: the bundled tasks), loaded once per process."""
    from rcb_env.task import bundled_root, load

    return load(pset if pset is not None else bundled_root())


def task_ids(pset: str | None = None) -> list[str]:
    """Every snippet id of the selection, for building a trainer's dataset."""
    return [s.id for s in load_tasks(pset).snippets]


class Session:
    """One episode at a time over a shared sandbox factory (one template per snippet), driven
    by :class:`~rcb_env.episode.driver.Episode` (the pull shape): the caller names the task,
    calls tools, and asks for the reward. A sandbox that cannot be started ends the episode as
    an infrastructure outcome (reward None), never as an exception out of a trainer's call."""

    def __init__(
        self,
        pset: str | Path | None = None,
        *,
        sandbox: SandboxConfig | None = None,
        grading: GradingConfig | None = None,
        env: EnvConfig | None = None,
        max_turns: int = 30,
        budgets: BudgetConfig | None = None,
    ) -> None:
        """``max_turns`` caps the tool calls of an episode; ``budgets`` (its ``max_steps``
        replaced by ``max_turns``) adds wall-time, token and cost limits."""
        self.pset = str(pset) if pset is not None else None
        self.factory = SandboxFactory(sandbox)
        self.grading = grading
        self.env_config = env or EnvConfig()
        self.max_turns = max_turns
        base = budgets or BudgetConfig(max_wall_s=None)
        self.budgets = base.model_copy(update={"max_steps": max_turns})
        self.episode: Episode | None = None

    @property
    def done(self) -> bool:
        return self.episode is None or self.episode.done

    def start(self, task_id: str) -> str:
        """Begin an episode of ``task_id`` (``<paper>/<snippet>``); the task statement (or, when
        the sandbox could not be started, why: the episode has then ended unscored).

        Raises:
            ConfigError: no such task.
        """
        self.close_episode()
        tasks = load_tasks(self.pset)
        paper_id, _, name = task_id.partition("/")
        try:
            paper = tasks.paper(paper_id)
            snippet = paper.snippet(name)
        except KeyError as exc:
            raise ConfigError(f"no task {task_id!r} in {tasks.root}") from exc
        self.episode = Episode(
            paper,
            snippet,
            factory=self.factory,
            env=self.env_config,
            grading=self.grading,
            budgets=self.budgets,
        )
        obs, _info = self.episode.start()
        return obs

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run one tool; the observation. After the end, a clear message and nothing runs."""
        if self.episode is None or self.episode.done:
            return ENDED
        obs, *_ = self.episode.step({"tool": tool, **arguments})
        return obs

    @property
    def outcome(self) -> EpisodeOutcome | None:
        return self.episode.outcome if self.episode is not None else None

    def reward(self) -> float | None:
        """The episode's reward, grading the workspace as it stands if the model never
        submitted; None when it could not be scored (an infrastructure failure: not 0)."""
        if self.episode is None:
            return None
        if not self.episode.done:
            self.episode.stop(StopReason.BUDGET_STEPS)
        return self.episode.reward()

    def close_episode(self) -> None:
        if self.episode is not None:
            self.episode.close()
            self.episode = None

    def close(self) -> None:
        self.close_episode()
        self.factory.close()


__all__ = ["ENDED", "Session", "load_tasks", "parse_text_tool_calls", "task_ids"]

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_text_tool_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Tool calls written in a completion's text, in the Hermes/Qwen form
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (what text-in/text-out trainers
    such as SkyRL see). Malformed calls are skipped."""
    calls = []
    for raw in _TOOL_CALL.findall(text):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            continue
        args = data.get("arguments") or {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                continue
        if isinstance(args, dict):
            calls.append((data["name"], args))
    return calls
