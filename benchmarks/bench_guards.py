"""The cost of the reward-integrity guards: warm (or cold) grading of every bundled snippet's
reference and null body with today's runner, policy and warm process, against the runner and
warm process of a baseline commit (before the vault, the module-wide watch and the class
checks), interleaved in one run.

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
from rcb_env.sandbox.warm import host as warm_host
from rcb_env.task import bundled_root, load


def _file_at(revision: str, relative: str, folder: Path) -> Path:
    """``relative`` as it was at ``revision`` (from git), written into ``folder``."""
    text = subprocess.run(
        ["git", "show", f"{revision}:{relative}"], capture_output=True, text=True, check=True
    ).stdout
    path = folder / Path(relative).name
    path.write_text(text)
    return path


def _runner_at(revision: str, folder: Path) -> Path:
    """The test runner as it was at ``revision``."""
    return _file_at(revision, "rcb_env/grading/_runner.py", folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="3d3f853")
    parser.add_argument("--grading", choices=("warm", "cold"), default="warm")
    args = parser.parse_args()
    pset = load(bundled_root())
    today, today_warm = grader_module.SHIPPED["runner"], warm_host.SOURCE
    with tempfile.TemporaryDirectory() as tmp:
        baseline = _runner_at(args.baseline, Path(tmp))
        baseline_warm = _file_at(args.baseline, "rcb_env/sandbox/warm/in_sandbox.py", Path(tmp))
        config = SandboxConfig(backend="bwrap", warm_grading=args.grading == "warm")
        # Each its own factory: its warm processes run its own warm process's source.
        factories = {baseline: SandboxFactory(config), today: SandboxFactory(config)}
        try:
            graders = {
                (runner, p.id): Grader(GradingConfig(), executor=f.grading_executor(p))
                for runner, f in factories.items()
                for p in pset.papers
            }
            bodies = [
                (p, s, body)
                for p in pset.papers
                for s in p.snippets
                for body in (s.reference_body, s.todo_body())
            ]

            def once(runner: Path) -> float:
                grader_module.SHIPPED["runner"] = runner
                warm_host.SOURCE = baseline_warm if runner == baseline else today_warm
                start = time.perf_counter()
                for p, s, body in bodies:
                    graders[(runner, p.id)].grade(p, s, body)
                return time.perf_counter() - start

            once(baseline)  # warm processes up, imports cached
            once(today)
            times: dict[str, list[float]] = {"baseline": [], "today": []}
            for _ in range(args.rounds):
                times["baseline"].append(once(baseline))
                times["today"].append(once(today))
        finally:
            grader_module.SHIPPED["runner"], warm_host.SOURCE = today, today_warm
            for f in factories.values():
                f.close()
    base = statistics.median(times["baseline"])
    now = statistics.median(times["today"])
    print(f"{len(bodies)} gradings ({args.grading}), median of {args.rounds} rounds")
    print(f"baseline runner and warm process ({args.baseline}): {base:.2f} s")
    print(f"today's runner, policy, warm process: {now:.2f} s")
    print(f"ratio: {now / base:.2f}x (goal: at most 1.2x)")


if __name__ == "__main__":
    main()
