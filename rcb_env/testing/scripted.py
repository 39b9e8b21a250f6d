"""An agent that plays a fixed list of actions (then submits), for tests and examples."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rcb_env.tools.actions import Action, Submit, ToolSpec

Step = Action | dict[str, Any] | str | Callable[[str, dict[str, Any]], Any]
"""An action, or a function of (last observation, info) that returns one."""


class ScriptedAgent:
    """Plays ``script`` in order; once it runs out, submits. Keeps what it saw."""

    name = "scripted"

    def __init__(self, script: Sequence[Step] = ()) -> None:
        self.script = list(script)
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self._queue: list[Step] = []

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        self._queue = list(self.script)
        self.seen = [(observation, info)]

    def act(self, observation: str, info: dict[str, Any]) -> Action | dict[str, Any] | str:
        if len(self._queue) < len(self.script):  # the first act sees the statement again
            self.seen.append((observation, info))
        if not self._queue:
            return Submit()
        step = self._queue.pop(0)
        if callable(step):
            made: Action | dict[str, Any] | str = step(observation, info)
            return made
        return step

    def end(self, info: dict[str, Any]) -> None:
        self.seen.append(("", info))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "steps": len(self.script)}


class SleepThenSubmit:
    """Runs ``sleep`` in its sandbox for :attr:`seconds`, then submits the masked code (reward
    0): a slow, harmless episode, built with no arguments (``rcb_env.testing:SleepThenSubmit``),
    so that a distributed test can act while episodes are in flight."""

    name = "sleep-then-submit"
    seconds = 3.0

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        self._slept = False

    def act(self, observation: str, info: dict[str, Any]) -> Action | dict[str, Any] | str:
        if not self._slept:
            self._slept = True
            return {"tool": "run_command", "command": f"sleep {self.seconds:g}"}
        return Submit()

    def end(self, info: dict[str, Any]) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": self.seconds}
