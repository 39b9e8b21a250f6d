"""The cost of the reward-integrity guards: warm (or cold) grading of every bundled snippet's
reference and null body with today's runner and policy, against the runner of a baseline commit
(before the vault, the module-wide watch and the class checks), interleaved in one run.

Run by hand (not in CI): ``.venv/bin/python -m benchmarks.bench_guards [--rounds 3]
[--baseline 3d3f853] [--grading warm|cold]``. The machine is shared and noisy: only the ratio
of the two, measured in the same run, means anything (goal: at most 1.2x).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rcb_env.grading import grader as grader_module
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task import bundled_root, load


def _runner_at(revision: str, folder: Path) -> Path:
    """The test runner as it was at ``revision`` (from git)."""
    text = subprocess.run(
        ["git", "show", f"{revision}:rcb_env/grading/_runner.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = folder / "_runner.py"
    path.write_text(text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="3d3f853")
    parser.add_argument("--grading", choices=("warm", "cold"), default="warm")
    args = parser.parse_args()
    pset = load(bundled_root())
    today = grader_module.RUNNER_SOURCE
    with tempfile.TemporaryDirectory() as tmp:
        baseline = _runner_at(args.baseline, Path(tmp))
        factory = SandboxFactory(
            SandboxConfig(backend="bwrap", warm_grading=args.grading == "warm")
        )
        try:
            graders = {
                p.id: Grader(GradingConfig(), executor=factory.grading_executor(p))
                for p in pset.papers
            }
            bodies = [
                (p, s, body)
                for p in pset.papers
                for s in p.snippets
                for body in (s.reference_body, s.todo_body())
            ]

            def once(runner: Path) -> float:
                grader_module.RUNNER_SOURCE = runner
                start = time.perf_counter()
                for p, s, body in bodies:
                    graders[p.id].grade(p, s, body)
                return time.perf_counter() - start

            once(today)  # warm processes up, imports cached
            times: dict[str, list[float]] = {"baseline": [], "today": []}
            for _ in range(args.rounds):
                times["baseline"].append(once(baseline))
                times["today"].append(once(today))
        finally:
            grader_module.RUNNER_SOURCE = today
            factory.close()
    base = statistics.median(times["baseline"])
    now = statistics.median(times["today"])
    print(f"{len(bodies)} gradings ({args.grading}), median of {args.rounds} rounds")
    print(f"baseline runner ({args.baseline}): {base:.2f} s")
    print(f"today's runner and policy:        {now:.2f} s")
    print(f"ratio: {now / base:.2f}x (goal: at most 1.2x)")


if __name__ == "__main__":
    main()
