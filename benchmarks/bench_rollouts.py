"""Concurrent async rollouts vs one, measured in the same run (the ratio is what to compare).

Each rollout works the bundled numpy snippet ("adamw-warmup" / "bias correction") in a bubblewrap
sandbox: 4 steps that run ``sleep 1`` in the sandbox, then a submit with the reference (graded).
One rollout alone, then ``k`` (default 8) of them as one group (``rollout_group``: one template,
k sandboxes, the blocking work in k threads). Serial would be k times one; the goal (issue 13)
is under 1.6x.

Run by hand: ``.venv/bin/python -m benchmarks.bench_rollouts [--k 8] [--repeat 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from rcb_env import config
from rcb_env.grading import GradingConfig
from rcb_env.rl import PolicyOutput, RolloutConfig, rollout, rollout_group
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import bundled_root, load


class SleepyPolicy:
    """Four ``sleep 1`` commands, then the reference and a submit, for every conversation."""

    def __init__(self, path: str, old: str, new: str) -> None:
        self.edit = {"path": path, "old": old, "new": new}
        self.turns: dict[int, int] = {}

    async def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        turn = self.turns.get(id(messages), 0)
        self.turns[id(messages)] = turn + 1
        if turn < 4:
            name, args = "run_command", {"command": "sleep 1"}
        elif turn == 4:
            name, args = "replace_in_file", self.edit
        else:
            name, args = "submit", {}
        call = {
            "id": f"c{turn}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        return PolicyOutput(message={"role": "assistant", "content": None, "tool_calls": [call]})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    paper = load(bundled_root()).paper("adamw-warmup")
    snippet = paper.snippet("bias correction")
    cfg = RolloutConfig(grading=GradingConfig(python=config.task_python(), timeout_s=120))
    sandbox = SandboxConfig(backend="bwrap", python=config.task_python())

    def policy() -> SleepyPolicy:
        return SleepyPolicy(snippet.file, snippet.todo_body(), snippet.reference_body)

    ones, groups = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        one = asyncio.run(rollout(paper, snippet, policy(), config=cfg, sandbox=sandbox))
        ones.append(time.perf_counter() - t)
        assert one.reward == snippet.weight, one
        t = time.perf_counter()
        group = asyncio.run(rollout_group(paper, snippet, policy(), args.k, config=cfg,
                                          sandbox=sandbox))  # fmt: skip
        groups.append(time.perf_counter() - t)
        assert all(x.reward == snippet.weight for x in group.trajectories), group
    one_s, group_s = statistics.median(ones), statistics.median(groups)
    print(f"one rollout (4 x sleep 1 + submit): {one_s:.2f} s (median of {args.repeat})")
    print(f"{args.k} concurrent rollouts (one group): {group_s:.2f} s")
    print(f"ratio {group_s / one_s:.2f}x (serial would be {args.k}x; goal < 1.6x)")


if __name__ == "__main__":
    main()
