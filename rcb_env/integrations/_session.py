"""One episode behind a synchronous, trainer-neutral interface: start a task by id, call tools by
name, get the reward. The trainer adapters (:mod:`rcb_env.integrations.trl`,
:mod:`rcb_env.integrations.skyrl`) are thin layers over it."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from rcb_env.episode.env import EnvConfig, RcbEnv
from rcb_env.episode.outcome import EpisodeOutcome, StopReason
from rcb_env.errors import ConfigError
from rcb_env.grading.grader import GradingConfig
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task.models import Pset

ENDED = "The episode has ended (submitted or out of budget); no more tools can run."


@functools.lru_cache(maxsize=8)
def load_tasks(pset: str | None) -> Pset:
    """A benchmark by name or folder (None: the bundled tasks), loaded once per process."""
    from rcb_env.task import bundled_root, load

    return load(pset if pset is not None else bundled_root())


def task_ids(pset: str | None = None) -> list[str]:
    """Every snippet id of the selection, for building a trainer's dataset."""
    return [s.id for s in load_tasks(pset).snippets]


class Session:
    """One episode at a time over a shared sandbox factory (one template per snippet)."""

    def __init__(
        self,
        pset: str | Path | None = None,
        *,
        sandbox: SandboxConfig | None = None,
        grading: GradingConfig | None = None,
        env: EnvConfig | None = None,
        max_turns: int = 30,
    ) -> None:
        self.pset = str(pset) if pset is not None else None
        self.factory = SandboxFactory(sandbox)
        self.grading = grading
        self.env_config = env or EnvConfig()
        self.max_turns = max_turns
        self.env: RcbEnv | None = None
        self.turns = 0
        self.done = False

    def start(self, task_id: str) -> str:
        """Begin an episode of ``task_id`` (``<paper>/<snippet>``); the task statement."""
        self.close_episode()
        tasks = load_tasks(self.pset)
        paper_id, _, name = task_id.partition("/")
        try:
            paper = tasks.paper(paper_id)
            snippet = paper.snippet(name)
        except KeyError as exc:
            raise ConfigError(f"no task {task_id!r} in {tasks.root}") from exc
        self.env = RcbEnv(
            paper, snippet, self.env_config, grading_config=self.grading, factory=self.factory
        )
        self.turns = 0
        self.done = False
        obs, _info = self.env.reset()
        return obs

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run one tool; the observation. After the end, a clear message and nothing runs."""
        if self.env is None or self.done:
            return ENDED
        self.turns += 1
        obs, _r, terminated, truncated, _info = self.env.step({"tool": tool, **arguments})
        if terminated or truncated:
            self.done = True
        elif self.turns >= self.max_turns:
            self.env.finish(reason=StopReason.BUDGET_STEPS)
            self.done = True
        return obs

    @property
    def outcome(self) -> EpisodeOutcome | None:
        return self.env.outcome if self.env is not None else None

    def reward(self) -> float | None:
        """The episode's reward, grading the workspace as it stands if the model never
        submitted; None when it could not be scored (an infrastructure failure: not 0)."""
        if self.env is None:
            return None
        if not self.done:
            self.env.finish(reason=StopReason.BUDGET_STEPS)
            self.done = True
        outcome = self.env.outcome
        if outcome is None or outcome.infra_error is not None:
            return None
        return outcome.reward

    def close_episode(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def close(self) -> None:
        self.close_episode()
        self.factory.close()


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
