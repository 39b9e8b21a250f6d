"""Episode latencies on the bundled tasks, measured in one run (ratios are what to compare).

- reset: ``env.reset()`` on a warm environment (fresh workspace copy, shell stopped)
- tool step: non-test tools (list, read, search, replace) and a shell command (``true``)
- grading: a reference graded by rcb-env (fresh copy, runner, bwrap) vs the bare test file run
  in place (``python paper2code_test.py`` in an already prepared folder)
- eval: ``rcb-env eval --agent oracle`` over all bundled snippets at --jobs 1 and --jobs 2

Run by hand: ``.venv/bin/python -m benchmarks.bench_episode [--repeat 30]``. Goals (issue 3):
reset <= 20 ms p50, non-test step <= 5 ms p50, grading <= 1.1x bare.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._timing import p50, timed
from rcb_env import EnvConfig, RcbEnv, SandboxConfig, SandboxFactory, config
from rcb_env.grading import Grader, GradingConfig
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.task import Paper, Snippet, bundled_root, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    n = args.repeat
    pset = load(bundled_root())
    python = config.task_python()
    factory = SandboxFactory(SandboxConfig(backend="bwrap", python=python))
    grading = GradingConfig(python=python)
    paper = pset.paper("adamw-warmup")
    env = RcbEnv(
        paper,
        paper.snippet("bias correction"),
        EnvConfig(),
        grading_config=grading,
        factory=factory,
    )
    env.reset()
    print(f"bwrap backend, task python {python}, {n} repetitions\n")

    reset = timed(env.reset, n)
    print(f"reset                      p50 {p50(reset):7.2f} ms   (goal <= 20)")
    same = "import numpy as np"
    actions: dict[str, dict[str, Any]] = {
        "list_files": {"tool": "list_files"},
        "read_file": {"tool": "read_file", "path": "optim.py"},
        "search": {"tool": "search", "pattern": "beta"},
        "replace_in_file": {
            "tool": "replace_in_file",
            "path": "optim.py",
            "old": same,
            "new": same,
        },
        "run_command true": {"tool": "run_command", "command": "true"},
    }
    env.step({"tool": "run_command", "command": "true"})  # start the shell once
    for name, action in actions.items():

        def step(a: dict[str, Any] = action) -> None:
            env.step(a)

        ts = timed(step, n)
        goal = "(goal <= 5)" if name != "run_command true" else ""
        print(f"step {name:21s} p50 {p50(ts):7.2f} ms   {goal}")
    env.close()

    print()
    grader = Grader(grading, executor=factory.grading_executor(pset.papers[0]))
    for p in pset.papers:
        first = p.snippets[0]

        def ours_once(p: Paper = p, s: Snippet = first) -> None:
            grader.grade(p, s, s.reference_body)

        ours = timed(ours_once, max(3, n // 3))
        with tempfile.TemporaryDirectory(dir=config.scratch_dir()) as tmp:
            folder = Path(tmp) / p.id
            shutil.copytree(p.root, folder)

            def bare_once(f: Path = folder, test: str = p.test_file) -> None:
                subprocess.run([str(python), test], cwd=f, capture_output=True, check=True)

            bare = timed(bare_once, max(3, n // 3))
        print(
            f"grading {p.id:17s} p50 {p50(ours):7.1f} ms   bare test p50 {p50(bare):7.1f} ms   "
            f"ratio {p50(ours) / p50(bare):4.2f}x (goal <= 1.1)"
        )

    print()
    cfg = EvalConfig(
        agent="oracle", sandbox=SandboxConfig(backend="bwrap", python=python), grading=grading
    )
    walls = {}
    for jobs in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            summary = run_eval(pset, cfg, Path(tmp) / "run", jobs=jobs)
            walls[jobs] = time.perf_counter() - t
            assert summary.overall is not None
            assert summary.overall.scaled == 100.0
    print(
        f"eval oracle --jobs 1 {walls[1]:6.2f} s   --jobs 2 {walls[2]:6.2f} s   "
        f"speed-up {walls[1] / walls[2]:4.2f}x"
    )
    factory.close()


if __name__ == "__main__":
    main()
