"""An agent CLI's episode overhead over the tools agent's on the same scripted work: one snippet
of a bundled task, its file written with the reference body by the agent's own write tool, then
the end (the tools agent: ``write_file`` then ``submit``; Claude Code: ``Write`` then a text
answer; Codex: ``apply_patch`` then a text answer; mini-swe-agent: ``bash`` then its submit),
each episode through the one driver in bwrap, graded. The agents take turns in one run; the
medians and their ratios to the tools agent's are printed (the grading is the same for all,
so the difference is the CLI's start, its model round trips through the proxy and its exit).

Run by hand (not in CI): ``.venv/bin/python -m benchmarks.bench_agent_cli [--episodes 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from rcb_agents.clis import CLIS
from rcb_agents.registry import factory
from rcb_agents.testing.cli_oracle import CliOracle
from rcb_agents.testing.server import Reply, ScriptedModelServer

from rcb_env import config
from rcb_env.episode.config import EpisodeConfig
from rcb_env.episode.driver import Episode
from rcb_env.grading.grader import GradingConfig
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task import bundled_root, load
from rcb_env.task.selection import select_snippets
from rcb_env.task.source import source_for

KEY = "sk-bench-agent-cli"
SNIPPET = "adamw-warmup/clip by global norm"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5, help="per agent")
    parser.add_argument("--agent", action="append", choices=sorted(CLIS))
    args = parser.parse_args(argv)
    agents = ["tools", *(args.agent or [c.name for c in CLIS.values() if c.executable()])]
    pset = select_snippets(
        load(bundled_root(), papers={SNIPPET.split("/", maxsplit=1)[0]}), (SNIPPET,)
    )
    [paper] = pset.papers
    [snippet] = paper.snippets
    solved = source_for(paper).solved_file(paper, snippet, snippet.reference_body)
    os.environ["ANTHROPIC_API_KEY"] = os.environ["OPENAI_API_KEY"] = KEY
    cfg = EpisodeConfig(
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
    )
    times: dict[str, list[float]] = {a: [] for a in agents}
    rewards: dict[str, list[float]] = {a: [] for a in agents}
    sandboxes = SandboxFactory(cfg.sandbox)
    with (
        ScriptedModelServer(api_key=KEY, responder=CliOracle(pset)) as cli_server,
        ScriptedModelServer(api_key=KEY) as tools_server,
    ):
        makers: dict[str, Any] = {}
        for a in agents:
            provider = "openai" if a == "tools" else CLIS[a].provider
            url = tools_server.openai_url if a == "tools" else cli_server.url
            model = {"spec": f"{provider}:rcb-bench", "base_url": url}
            makers[a] = factory(a, pset, model=model, options={})
        for i in range(args.episodes + 1):  # the first round warms up (not counted)
            for a in agents:
                if a == "tools":
                    tools_server.extend([
                        Reply(tool_calls=(("write_file",
                                           {"path": snippet.file, "content": solved}),)),
                        Reply(tool_calls=(("submit", {}),)),
                    ])  # fmt: skip
                episode = Episode(paper, snippet, config=cfg, factory=sandboxes)
                t0 = time.perf_counter()
                outcome = episode.run(makers[a]())
                took = time.perf_counter() - t0
                episode.close()
                if i:
                    times[a].append(took)
                    rewards[a].append(outcome.reward)
    sandboxes.close()
    base = statistics.median(times["tools"])
    for a in agents:
        med = statistics.median(times[a])
        print(json.dumps({
            "agent": a,
            "version": CLIS[a].version if a in CLIS else None,
            "episodes": len(times[a]),
            "median_s": round(med, 3),
            "min_s": round(min(times[a]), 3),
            "overhead_s": round(med - base, 3),
            "ratio_to_tools": round(med / base, 2),
            "rewards": sorted(set(rewards[a])),
        }))  # fmt: skip


if __name__ == "__main__":
    main()
