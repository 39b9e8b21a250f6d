"""RL at trainer scale, measured in one run (ratios are what to compare; the machine is shared).

1. Memory: ``--rollouts`` (64) concurrent rollouts (``rcb_env.rl.rollout``) of a scripted policy
   over bundled and published papers, every one on the process's shared sandbox factory (one
   template per snippet, one warm grading process per paper environment). Each rollout reads
   its file, runs a command, waits (so that all are open at once), then submits (graded).
   Reported: the peak memory (RSS) of the process tree beyond what it held before (the tests'
   own memory: the warm processes, started by a warm-up batch first, are part of the
   baseline) and concurrent episodes per GiB (goal >= 20).
2. Concurrent grading: 8 TRL environments (one ``environment_factory``), each with a body
   written and never submitted; TRL's serial ``get_reward()`` loop (the first call grades the
   whole batch on the process's grading pool) vs the same 8 gradings one after another (each
   environment a cohort of its own). Both warm. Goal: <= 0.6x on 2 cores.

Run: ``.venv/bin/python -m benchmarks.bench_rl_scale`` or ``make bench-rl-scale`` (not part of
``make test``). Published papers are used when ``rcb-env get/setup researchcodebench`` ran.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

from rcb_env import config
from rcb_env.errors import RcbError
from rcb_env.grading import GradingConfig
from rcb_env.rl import PolicyOutput, RolloutConfig, rollout, shared
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import bundled_root, load
from rcb_env.task.models import Paper, Snippet

GiB = 1024**3
last_processes = 0
"""Processes in the tree at the last :func:`tree_memory`."""


def _pss(pid: int) -> int:
    """Proportional set size (shared pages split between their sharers: a process forked from a
    warm process is not counted twice), in bytes."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def scratch_bytes() -> int:
    """What this process's scratch folders hold (templates, workspaces: on a tmpfs such as
    /dev/shm that is memory too), each file counted once, in bytes."""
    from rcb_env.sandbox import scratch

    parent = config.scratch_dir()
    me = scratch._me()
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder in parent.iterdir():
        try:
            if (folder / scratch.OWNER_FILE).read_text() != me:
                continue
        except OSError:
            continue
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def tree_memory(root: int) -> int:
    """Memory of ``root`` and all its descendants (PSS) plus what its scratch folders hold
    (a tmpfs is memory), in bytes."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [root]
    global last_processes
    last_processes = 0
    while todo:
        pid = todo.pop()
        total += _pss(pid)
        last_processes += 1
        todo += children.get(pid, [])
    return total + scratch_bytes()


class Peak:
    """Samples the process tree's memory in a thread until stopped; the peak."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, tree_memory(os.getpid()))

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()


def tasks(published: bool) -> list[tuple[Paper, Snippet, bool]]:
    """Bundled snippets, and the published runnable ones when installed (flag: published)."""
    out = [(p, s, False) for p in load(bundled_root()).papers for s in p.snippets]
    if published:
        try:
            from rcb_env.runner.eval import runnable

            pset, _ = runnable(load("researchcodebench"))
            out += [(p, s, True) for p in pset.papers for s in p.snippets[:2]]
        except RcbError as exc:
            print(f"(published papers skipped: {str(exc).splitlines()[0][:100]})")
    return out


class Open:
    """Counts the rollouts waiting with their episode open; measures the tree once all are."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.waiting = 0
        self.memory = 0
        self.processes = 0

    async def wait(self, wait_s: float) -> None:
        self.waiting += 1
        if self.waiting == self.n:
            self.memory = await asyncio.to_thread(tree_memory, os.getpid())
            self.processes = last_processes
        await asyncio.sleep(wait_s)


def scripted(wait_s: float, gate: Open) -> Any:
    async def policy(messages: list[dict[str, Any]], _tools: list[dict[str, Any]]) -> PolicyOutput:
        turn = sum(1 for m in messages if m["role"] == "assistant")
        plan = [("list_files", {}), ("run_command", {"command": "true"}), ("submit", {})]
        if turn == 2:
            await gate.wait(wait_s)  # every rollout open at once
        name, args = plan[min(turn, 2)]
        import json

        call = {"id": f"c{turn}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
        return PolicyOutput(message={"role": "assistant", "content": None, "tool_calls": [call]})

    return policy


async def many(
    chosen: list[tuple[Paper, Snippet, bool]], wait_s: float, gate: Open | None = None
) -> list[Any]:
    gate = gate or Open(len(chosen))
    bundled_sb = SandboxConfig(backend="bwrap", python=config.task_python())
    published_sb = SandboxConfig(backend="bwrap")
    bundled_cfg = RolloutConfig(grading=GradingConfig(python=config.task_python()))
    published_cfg = RolloutConfig()
    runs = []
    for i, (paper, snippet, pub) in enumerate(chosen):
        runs.append(
            rollout(
                paper,
                snippet,
                scripted(wait_s, gate),
                config=published_cfg if pub else bundled_cfg,
                factory=shared.shared_factory(published_sb if pub else bundled_sb),
                sample=i,
            )
        )
    return list(await asyncio.gather(*runs))


def memory(n: int, published: bool, wait_s: float) -> None:
    pool = tasks(published)
    chosen = [pool[i % len(pool)] for i in range(n)]
    papers = {p.id for p, _s, _pub in chosen}
    # warm-up: one rollout per paper (templates, warm processes): the baseline holds them
    firsts = {p.id: (p, s, pub) for p, s, pub in chosen}
    asyncio.run(many(list(firsts.values()), 0.0))
    base = tree_memory(os.getpid())
    base_procs = last_processes
    t0 = time.monotonic()
    gate = Open(n)
    with Peak() as peak:
        out = asyncio.run(many(chosen, wait_s, gate))
    took = time.monotonic() - t0
    open_extra = max(1, gate.memory - base)
    scored = sum(1 for t in out if t.scored)
    for t in out:
        if not t.scored:
            why = "; ".join(f"{e.stage}: {e.message[:160]}" for e in t.errors)
            print(f"  unscored: {t.task_id}: {why}")
    print(
        f"memory (PSS + scratch files): {n} concurrent rollouts over {len(papers)} papers in "
        f"{took:.1f} s "
        f"({scored} scored); warm processes {shared.warm_processes()}; baseline "
        f"{base / 2**20:.0f} MiB (this process, the warm grading processes, the templates); "
        f"with all {n} episodes open ({gate.processes} processes in the tree, {base_procs} "
        f"before) {gate.memory / 2**20:.0f} MiB: {open_extra / n / 2**20:.1f} MiB per "
        f"episode, {n / (open_extra / GiB):.1f} concurrent episodes per GiB (goal >= 20); "
        f"peak with their {n} gradings {peak.peak / 2**20:.0f} MiB"
    )


def batch(envs: list[Any], rows: list[tuple[Paper, Snippet]]) -> float:
    """Reset every environment on its task, write a wrong body, then TRL's reward loop; its
    seconds."""
    for env, (_paper, snippet) in zip(envs, rows, strict=True):
        env.reset(task_id=snippet.id)
        env.replace_in_file(snippet.file, snippet.todo_body(), "        pass\n")
    t0 = time.monotonic()
    for env in envs:  # what TRL does: one after another, in its main thread
        env.get_reward()
    return time.monotonic() - t0


def gradings(k: int) -> None:
    from rcb_env.integrations.pull import Cohort
    from rcb_env.integrations.trl import RcbEnvironment, environment_factory

    sb = SandboxConfig(backend="bwrap", python=config.task_python())
    grading = GradingConfig(python=config.task_python())
    pset = load(bundled_root())
    rows = [(p, s) for p in pset.papers for s in p.snippets][:k]
    factory = environment_factory(sandbox=sb, grading=grading, on_failure="keep")
    together = [factory() for _ in range(k)]
    # each its own cohort: its reward grades only itself
    alone = [RcbEnvironment(sandbox=sb, grading=grading, cohort=Cohort("keep")) for _ in range(k)]
    try:
        batch(together, rows)  # warm-up: every paper's warm process started
        concurrent = batch(together, rows)
        serial = batch(alone, rows)
    finally:
        for env in together + alone:
            env._close()
    print(
        f"grading: {k} gradings of one batch through the TRL adapter: concurrent "
        f"{concurrent:.2f} s, one after another {serial:.2f} s: {concurrent / serial:.2f}x "
        f"(goal <= 0.6x; {shared.grading_workers()} grading workers)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--gradings", type=int, default=8)
    parser.add_argument("--wait-s", type=float, default=3.0)
    parser.add_argument("--no-published", action="store_true")
    args = parser.parse_args()
    try:
        gradings(args.gradings)
        memory(args.rollouts, not args.no_published, args.wait_s)
    finally:
        shared.close_shared()


if __name__ == "__main__":
    main()
