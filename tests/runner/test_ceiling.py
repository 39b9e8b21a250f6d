"""A run's ceiling counts what the episodes in flight have spent so far, not only the records:
an episode that has spent past the ceiling keeps the next one from starting while it still
runs (it then finishes and is recorded)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rcb_env import config
from rcb_env.grading import GradingConfig
from rcb_env.results import read_records
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.runner.eval import RunCeiling
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import bundled_root, load
from rcb_env.tools.actions import Action, ListFiles, Submit, ToolSpec


class Spender:
    """A metered agent: on 'weighted mean' it spends 500 tokens at its first step, then waits
    until an 'affine map' episode has ended before it submits; on 'affine map' it submits."""

    name = "spender"

    def __init__(self, other_ended: threading.Event) -> None:
        self.other_ended = other_ended
        self.tokens = 0

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        self.slow = info["snippet_id"].endswith("/weighted mean")
        self.steps = 0

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        self.steps += 1
        if not self.slow:
            return Submit()
        if self.steps == 1:
            self.tokens = 500
            return ListFiles()
        assert self.other_ended.wait(60)
        return Submit()

    def end(self, info: dict[str, Any]) -> None:
        if not self.slow:
            self.other_ended.set()

    def describe(self) -> dict[str, Any]:
        return {"name": "spender"}

    def spent(self) -> tuple[int, float]:
        return self.tokens, 0.0

    def drain_calls(self) -> list[Any]:
        return []


@pytest.mark.bwrap
def test_the_episodes_in_flight_count_toward_the_ceiling(
    tmp_path: Path, require_bwrap: None
) -> None:
    pset = load(bundled_root() / "strength-canary")  # 'weighted mean', 'affine map'
    cfg = EvalConfig(
        agent="spender",
        samples=2,
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
    )
    ended = threading.Event()
    run = tmp_path / "run"
    # Two at a time: 'weighted mean' #0 spends 500 and waits; 'affine map' #0 ends, and its
    # worker would start 'weighted mean' #1, but 500 >= 400 is in flight.
    run_eval(pset, cfg, run, jobs=2, make_agent=lambda: Spender(ended),
             ceiling=RunCeiling(max_tokens=400))  # fmt: skip
    records = read_records(run / "episodes.jsonl")
    assert sorted((r.snippet_id.split("/")[1], r.sample, r.tokens) for r in records) == [
        ("affine map", 0, 0),
        ("weighted mean", 0, 500),
    ]
    stopped = json.loads((run / "run.json").read_text())["stopped"]
    assert (stopped["pending"], stopped["tokens"]) == (2, 500)
    assert "1 episode(s) in flight included" in stopped["detail"]
