"""``rcb-env serve`` measured (issue 38), in one run (ratios are what to compare; the machine is
shared).

1. Latency: a reset and a ``read_file`` step through OpenEnv's own client over ``/ws`` against
   the same two calls in process (:class:`~rcb_env.episode.driver.Episode` on the process's
   shared sandbox factory, bwrap), alternating call by call, p50 of each and the difference
   (goal: under 2 ms added), also the median of the paired differences, the same two calls
   as raw frames from a lean client (``websockets``' sync client: the server's share), and
   the round trip of a ``state`` frame (the protocol's own cost: no episode work). Each
   iteration ends its episode unscored (nothing graded) on every side.
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
from websockets.sync.client import connect

from benchmarks._serve import CLIENT, OPENENV_PYTHON, start, stop
from rcb_env.episode.driver import Episode
from rcb_env.errors import InfraError
from rcb_env.integrations.pull import load_tasks
from rcb_env.rl import shared
from rcb_env.runner.episode import EvalConfig
from rcb_env.sandbox import SandboxConfig

TASK = "scaled-attention/softmax"
READ = {"tool": "read_file", "path": "attention/core.py"}
MiB = 1024 * 1024


class InProcess:
    """Episode start + a read_file step, in this process, on the shared sandbox factory."""

    def __init__(self) -> None:
        self.cfg = EvalConfig(agent="bench", sandbox=SandboxConfig(backend="bwrap")).episode
        self.factory = shared.shared_factory(self.cfg.sandbox)
        paper_id, _, name = TASK.partition("/")
        self.paper = load_tasks(None).paper(paper_id)
        self.snippet = self.paper.snippet(name)

    def once(self) -> float:
        """Milliseconds of the two calls."""
        episode = Episode(self.paper, self.snippet, config=self.cfg, factory=self.factory)
        t0 = time.perf_counter()
        episode.start()
        episode.step(READ)
        ms = (time.perf_counter() - t0) * 1000
        episode.fail(InfraError(stage="agent", type="Bench", message="not graded"))
        episode.close()
        return ms


class OverWebsocket:
    """The same two calls through OpenEnv's own client (a process of its own), one per call."""

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [str(OPENENV_PYTHON), str(CLIENT), "latency", url, TASK],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout

    def once(self) -> float:
        self.stdin.write("go\n")
        self.stdin.flush()
        ms: float = json.loads(self.stdout.readline())["ms"]
        time.sleep(0.05)  # the server releases the episode's sandbox (in process: untimed too)
        return ms

    def state_round_trip(self) -> float:
        """The p50 of a ``state`` frame's round trip (no episode work), ending the client."""
        self.stdin.write("\n")
        self.stdin.flush()
        ms: float = json.loads(self.stdout.readline())["state_ms"]
        self.proc.wait()
        return ms


class OverLeanSocket:
    """The same two calls as raw frames from this process (``websockets``' sync client, one
    thread): the server's share of the added time, without OpenEnv's client's two threads."""

    def __init__(self, url: str) -> None:
        self.url = url.replace("http://", "ws://", 1) + "/ws"

    def once(self) -> float:
        with connect(self.url, compression=None, max_size=None) as ws:
            t0 = time.perf_counter()
            ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
            assert json.loads(ws.recv())["type"] == "observation"
            ws.send(json.dumps({"type": "step", "data": READ}))
            assert json.loads(ws.recv())["type"] == "observation"
            ms = (time.perf_counter() - t0) * 1000
            ws.send(json.dumps({"type": "close"}))
        time.sleep(0.05)  # as above
        return ms


def latency(url: str, n: int) -> dict[str, Any]:
    """In process and over /ws, alternating call by call (the machine's load drifts alike on
    both); after 10 of each to warm up."""
    local, remote, lean = InProcess(), OverWebsocket(url), OverLeanSocket(url)
    runs = [(local.once(), remote.once(), lean.once()) for _ in range(n + 10)][10:]
    state_ms = remote.state_round_trip()
    p50_local = statistics.median(r[0] for r in runs)
    p50_remote = statistics.median(r[1] for r in runs)
    p50_lean = statistics.median(r[2] for r in runs)
    return {
        "in_process_p50_ms": round(p50_local, 2),
        "ws_p50_ms": round(p50_remote, 2),
        "added_p50_ms": round(p50_remote - p50_local, 2),
        "added_paired_p50_ms": round(statistics.median(r[1] - r[0] for r in runs), 2),
        "ratio": round(p50_remote / p50_local, 2),
        "lean_client_p50_ms": round(p50_lean, 2),
        "lean_added_p50_ms": round(p50_lean - p50_local, 2),
        "state_round_trip_p50_ms": round(state_ms, 3),
        "iterations": n,
    }


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
    parser.add_argument("--sessions", type=int, default=256, help="0: the latency only")
    parser.add_argument("--command", action="store_true")
    args = parser.parse_args()
    limit = str(args.sessions + 8)
    proc, url = start(
        *("--sandbox", "bwrap", "--paper", "scaled-attention", "--runs-dir", "runs/bench-serve"),
        *("--max-episodes", limit, "--max-connections", limit, "--ping-s", "0"),
    )
    report: dict[str, Any] = {}
    try:
        # 1. latency, call by call: in process, over /ws, lean over /ws, in process, ...
        report["latency"] = latency(url, args.iterations)
        print(json.dumps(report["latency"]), flush=True)

        if not args.sessions:  # 0: the latency only
            return
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
