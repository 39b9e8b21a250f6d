"""What grading a stored run again costs beside running it, measured in one run (the ratio is
what to compare): ``eval --agent oracle`` over the bundled snippets (the baseline: a workspace
sandbox, the agent's steps and the grading per episode), then ``regrade`` of that run (the
grading alone, in a fresh pristine copy each), warm and cold, and a resumed regrading that has
nothing left to grade.

Run by hand: ``.venv/bin/python -m benchmarks.bench_regrade [--jobs 2]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rcb_env import SandboxConfig, config
from rcb_env.grading import GradingConfig
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.runner.regrade import regrade_run, stored_run
from rcb_env.task import bundled_root, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    pset = load(bundled_root())
    python = config.task_python()
    sandbox = SandboxConfig(backend="bwrap", python=python)
    cfg = EvalConfig(agent="oracle", sandbox=sandbox, grading=GradingConfig(python=python))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        run_eval(pset, cfg, root / "eval", jobs=args.jobs)
        base = time.perf_counter() - t
        n = len(pset.snippets)
        print(f"bwrap, {n} snippets, --jobs {args.jobs}\n")
        print(f"eval --agent oracle (baseline)  {base:7.2f} s   1.00x")
        stored = stored_run(root / "eval")
        for warm in (True, False):
            name = "warm" if warm else "cold"
            t = time.perf_counter()
            regrade_run(stored, pset, root / name, jobs=args.jobs,
                        sandbox=sandbox.model_copy(update={"warm_grading": warm}))  # fmt: skip
            took = time.perf_counter() - t
            print(f"regrade, {name} grading          {took:7.2f} s   {took / base:.2f}x")
        t = time.perf_counter()
        regrade_run(stored, pset, root / "warm", jobs=args.jobs, sandbox=sandbox, resume=True)
        took = time.perf_counter() - t
        print(f"regrade --resume, nothing left   {took:7.2f} s   {took / base:.2f}x")


if __name__ == "__main__":
    main()
