"""``rcb-env serve`` measured (issue 38), in one run (ratios are what to compare; the machine is
shared).

1. Latency: a reset and a ``read_file`` step through OpenEnv's own client over ``/ws`` against
   the same two calls in process (:class:`~rcb_env.episode.driver.Episode` on the process's
   shared sandbox factory, bwrap), p50 of each and the difference (goal: under 2 ms added).
   Each iteration ends its episode unscored (nothing graded) on both sides.
2. Sessions held: ``--sessions`` (256) OpenEnv clients connected at once, each with an open
   episode and a step answered; the server's memory (RSS of its process tree) and processes
   before and while they are open, per open episode. ``--command``: the step is a
   ``run_command`` (it starts the episode's shell: 3 processes each).

Run: ``make bench-serve`` (not part of ``make test``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import time
from typing import Any

import psutil

from benchmarks._serve import CLIENT, OPENENV_PYTHON, start, stop
from rcb_env.episode.driver import Episode
from rcb_env.errors import InfraError
from rcb_env.integrations.pull import load_tasks
from rcb_env.rl import shared
from rcb_env.runner.episode import EvalConfig
from rcb_env.sandbox import SandboxConfig

TASK = "scaled-attention/softmax"
MiB = 1024 * 1024


def in_process(n: int) -> list[float]:
    """Episode start + a read_file step, in this process; milliseconds."""
    cfg = EvalConfig(agent="bench", sandbox=SandboxConfig(backend="bwrap")).episode
    factory = shared.shared_factory(cfg.sandbox)
    paper_id, _, name = TASK.partition("/")
    paper = load_tasks(None).paper(paper_id)
    snippet = paper.snippet(name)
    times = []
    for i in range(n + 10):
        episode = Episode(paper, snippet, config=cfg, factory=factory)
        t0 = time.perf_counter()
        episode.start()
        episode.step({"tool": "read_file", "path": "attention/core.py"})
        if i >= 10:
            times.append((time.perf_counter() - t0) * 1000)
        episode.fail(InfraError(stage="agent", type="Bench", message="not graded"))
        episode.close()
    return times


def tree(pid: int) -> tuple[int, int]:
    """RSS (bytes) and process count of ``pid`` and its descendants."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    rss = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            rss += p.memory_info().rss
    return rss, len(procs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--command", action="store_true")
    args = parser.parse_args()
    limit = str(args.sessions + 8)
    proc, url = start(
        *("--sandbox", "bwrap", "--paper", "scaled-attention", "--runs-dir", "runs/bench-serve"),
        *("--max-episodes", limit, "--max-connections", limit, "--ping-s", "0"),
    )
    report: dict[str, Any] = {}
    try:
        # 1. latency, interleaved: in process, over /ws, in process, over /ws
        local: list[float] = []
        remote: list[float] = []
        for _ in range(2):
            local += in_process(args.iterations // 2)
            out = subprocess.run(
                [str(OPENENV_PYTHON), str(CLIENT), "latency", url, TASK, str(args.iterations // 2)],
                capture_output=True,
                text=True,
                check=True,
            )
            remote += json.loads(out.stdout)["ms"]
        p50_local, p50_remote = statistics.median(local), statistics.median(remote)
        report["latency"] = {
            "in_process_p50_ms": round(p50_local, 2),
            "ws_p50_ms": round(p50_remote, 2),
            "added_p50_ms": round(p50_remote - p50_local, 2),
            "ratio": round(p50_remote / p50_local, 2),
            "iterations": len(local),
        }
        print(json.dumps(report["latency"]), flush=True)

        # 2. sessions held at once
        before_rss, before_procs = tree(proc.pid)
        many = subprocess.Popen(
            [
                *(str(OPENENV_PYTHON), str(CLIENT), "many", url, TASK, str(args.sessions)),
                *(["command"] if args.command else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert many.stdin is not None
        assert many.stdout is not None
        many.stdout.readline()  # all open, a step answered for each
        held_rss, held_procs = tree(proc.pid)
        many.stdin.write("\n")
        many.stdin.flush()
        result = json.loads(many.stdout.readline())
        many.wait()
        report["sessions"] = {
            **result,
            "server_rss_mib_before": round(before_rss / MiB, 1),
            "server_rss_mib_open": round(held_rss / MiB, 1),
            "mib_per_open_episode": round((held_rss - before_rss) / MiB / args.sessions, 3),
            "processes_before": before_procs,
            "processes_open": held_procs,
            "step": "run_command" if args.command else "read_file",
        }
        print(json.dumps(report["sessions"]), flush=True)
    finally:
        stop(proc)
        shared.close_shared()


if __name__ == "__main__":
    main()
