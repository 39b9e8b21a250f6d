"""The published harness's procedure vs ``rcb-env eval --agent oracle --jobs 2``, in one run, on
ResearchCodeBench's runnable set here.

1. "published": one plain ``python paper2code_test.py`` per snippet, sequentially, in one folder
   per paper (the file rewritten with the reference body each time), with the paper's
   interpreter; pass by the official rule (exit 0, no error words).
2. "rcb-env": ``run_eval`` with the oracle agent, bwrap, ``--jobs 2`` (fresh sandbox per episode,
   grading in a fresh pristine copy under our runner), once with ``--grading cold`` (a fresh
   interpreter per grading) and once warm (the default: forked from a per-paper process that has
   imported the tests' third-party modules).
3. ``run_tests`` inside an episode of a torch paper (warm and cold), p50 over ``--repeat`` calls,
   against a bare cold ``python paper2code_test.py`` of the same paper.
4. Memory: the warm process's proportional share (PSS), and what each open episode adds beyond
   the tests' own use (its sandbox's processes), as episodes per GiB.

Needs ``rcb-env get researchcodebench`` and ``rcb-env setup researchcodebench`` first. Run by
hand or ``make bench-published`` (not part of ``make test``); ``--paper`` limits the set. The
machine is shared and noisy: only the ratio measured in the same run means anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import rcb_env
from benchmarks._timing import p50, timed
from rcb_env import EnvConfig, RcbEnv, SandboxFactory
from rcb_env.guest.protocol import ERROR_WORDS as OFFICIAL_ERROR_WORDS
from rcb_env.results.summary import Summary
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.runner.eval import runnable
from rcb_env.sandbox import SandboxConfig
from rcb_env.sandbox.warm import preload_modules
from rcb_env.task import annotations as ann
from rcb_env.task import environments as envs
from rcb_env.task.models import Paper, Pset


def published(pset: Pset, shared: Path) -> tuple[float, int, int]:
    """Seconds, snippets passed by the official rule, snippets run."""
    import subprocess

    start = time.perf_counter()
    passed = total = 0
    for paper in pset.papers:
        folder = shared / paper.id
        shutil.copytree(paper.root, folder, dirs_exist_ok=True)
        python = envs.python_for(paper)
        timeout = paper.overlay.timeout_s or 60
        for s in paper.snippets:
            text = ann.insert(paper.file_text(s.file), s.span, s.reference_body)
            (folder / s.file).write_text(text)
            try:
                run = subprocess.run(
                    [str(python), paper.test_file],
                    cwd=folder,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                )
                output = run.stdout + run.stderr
                ok = run.returncode == 0 and not any(w in output for w in OFFICIAL_ERROR_WORDS)
            except subprocess.TimeoutExpired:
                ok = False
            passed += ok
            total += 1
    return time.perf_counter() - start, passed, total


def ours(pset: Pset, runs: Path, jobs: int, warm: bool) -> tuple[float, Summary]:
    start = time.perf_counter()
    sandbox = SandboxConfig(backend="bwrap", warm_grading=warm)
    cfg = EvalConfig(agent="oracle", sandbox=sandbox)
    name = f"oracle-jobs{jobs}-{'warm' if warm else 'cold'}"
    summary = run_eval(pset, cfg, runs / name, jobs=jobs)
    return time.perf_counter() - start, summary


def torch_paper(pset: Pset) -> Paper | None:
    """The runnable paper whose tests import torch and whose reference is quickest to find."""
    return next((p for p in pset.papers if "torch" in " ".join(preload_modules(p))), None)


def bare_runs(paper: Paper, folder: Path, n: int) -> list[float]:
    """``python paper2code_test.py`` in a prepared copy, ``n`` times (ms)."""
    import subprocess

    shutil.copytree(paper.root, folder, dirs_exist_ok=True)
    python = envs.python_for(paper)

    def once() -> None:
        subprocess.run([str(python), paper.test_file], cwd=folder, capture_output=True, check=False)

    return timed(once, n)


def run_tests_latency(paper: Paper, warm: bool, n: int) -> tuple[list[float], str]:
    """p50 material: ``run_tests`` in one episode, ``n`` calls (ms), and the path it took."""
    factory = SandboxFactory(SandboxConfig(backend="bwrap", warm_grading=warm))
    env = RcbEnv(paper, paper.snippets[0], EnvConfig(), factory=factory)
    try:
        env.reset()
        env.step({"tool": "run_tests"})  # the warm process starts here
        path = str(getattr(env.grader.executor, "path", "cold"))
        return timed(lambda: env.step({"tool": "run_tests"}), n), path
    finally:
        env.close()
        factory.close()


def _pss(pid: int) -> int:
    import psutil

    try:
        return int(psutil.Process(pid).memory_full_info().pss)
    except (psutil.Error, AttributeError):
        return 0


def _sandbox_pss() -> int:
    import psutil

    from rcb_env.sandbox.backends.bwrap import _identity

    identity = _identity("rcb-sandbox")
    uid = identity[0] if identity else os.getuid()
    total = 0
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]
        if uids is not None and uids.real == uid:
            total += _pss(proc.pid)
    return total


def memory(paper: Paper, episodes: int) -> tuple[float, float]:
    """(MiB of the warm process, MiB each open episode adds) for ``episodes`` open episodes of
    ``paper`` with their shells started and their tests run once."""
    factory = SandboxFactory(SandboxConfig(backend="bwrap"))
    envs_: list[RcbEnv] = []
    try:
        base = _sandbox_pss()
        first = RcbEnv(paper, paper.snippets[0], EnvConfig(), factory=factory)
        envs_.append(first)
        first.reset()
        first.step({"tool": "run_tests"})
        warm_pids = {
            pid
            for proc in factory.impl._warm.processes()  # type: ignore[attr-defined]
            for pid in (proc.host_pid, *_parents(proc.host_pid))
        }
        warm_mib = sum(_pss(p) for p in warm_pids) / 2**20
        with_one = _sandbox_pss()
        for _ in range(episodes - 1):
            env = RcbEnv(paper, paper.snippets[0], EnvConfig(), factory=factory)
            envs_.append(env)
            env.reset()
            env.step({"tool": "run_command", "command": "true"})
            env.step({"tool": "run_tests"})
        time.sleep(0.5)
        after = _sandbox_pss()
        first.step({"tool": "run_command", "command": "true"})
        per_episode = (after - with_one) / max(1, episodes - 1) / 2**20
        del base
        return warm_mib, per_episode
    finally:
        for env in envs_:
            env.close()
        factory.close()


def _parents(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).parents() if p.uids().real != 0]
    except psutil.Error:
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pset", default="researchcodebench")
    parser.add_argument("--paper", action="append", default=[], help="Only these papers.")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=9, help="run_tests calls per measurement")
    parser.add_argument("--episodes", type=int, default=4, help="open episodes (memory)")
    parser.add_argument("--skip-eval", action="store_true", help="Only latency and memory.")
    args = parser.parse_args()
    loaded = rcb_env.load(args.pset, papers=set(args.paper) or None)
    ready, totals = runnable(loaded)
    print(
        f"runnable set: {len(ready.papers)} papers, {len(ready.snippets)} snippets, "
        f"{sum(s.weight for s in ready.snippets)} lines (of {totals.snippets} snippets, "
        f"{totals.weight} lines); left out: "
        + (", ".join(u.paper for u in totals.unavailable) or "nothing"),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="rcb-bench-") as tmp:
        if not args.skip_eval:
            t_pub, passed, total = published(ready, Path(tmp) / "shared")
            print(
                f"published procedure      {t_pub:8.1f} s   {passed}/{total} pass (official rule)"
            )
            for warm in (False, True):
                t_ours, summary = ours(ready, Path(tmp) / "runs", args.jobs, warm)
                o = summary.overall
                rates = f"{o.scaled:.2f} / {o.plain:.2f}" if o else "-"
                label = f"rcb-env --jobs {args.jobs} {'warm' if warm else 'cold'}"
                print(
                    f"{label:24s} {t_ours:8.1f} s   oracle {rates} scaled / plain, "
                    f"{summary.infra_errors} infrastructure errors; "
                    f"{t_ours / t_pub:.2f}x of published (goal warm <= 0.25x)",
                    flush=True,
                )
        paper = torch_paper(ready)
        if paper is None:
            print("no runnable torch paper: no run_tests latency or memory measured")
            return
        n = args.repeat
        bare = p50(bare_runs(paper, Path(tmp) / "bare", n))
        print(f"\n{paper.id}: bare cold `python {paper.test_file}` p50 {bare:8.0f} ms")
        for warm in (False, True):
            times, path = run_tests_latency(paper, warm, n)
            print(
                f"{paper.id}: run_tests {'warm' if warm else 'cold'} ({path or '?'}) p50 "
                f"{p50(times):8.0f} ms = {p50(times) / bare:.2f}x of bare (goal warm <= 0.5x)",
                flush=True,
            )
        warm_mib, per_episode = memory(paper, args.episodes)
        print(
            f"\nmemory ({paper.id}, {args.episodes} open episodes): warm process {warm_mib:.0f} "
            f"MiB (PSS, one per paper environment); each episode adds {per_episode:.1f} MiB "
            f"beyond the tests' own use: {1024 / max(per_episode, 0.1):.0f} episodes per GiB "
            f"({1024 / max(per_episode + warm_mib / args.episodes, 0.1):.0f} per GiB counting "
            f"the warm process shared by {args.episodes})"
        )


if __name__ == "__main__":
    main()
