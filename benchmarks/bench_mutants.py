"""Grade the mutants of bundled snippets two ways in one run and print the wall-time ratio.

1. baseline: cold grading (a fresh interpreter per mutant), one at a time;
2. rcb-env's default: warm grading (each mutant forked from the paper's warm process), --jobs 2.

Both must give every mutant the same verdict (printed). Run by hand (not in CI):
``.venv/bin/python -m benchmarks.bench_mutants [--cap 6] [--sandbox bwrap]``. The machine is
shared and noisy, so only the ratio measured in the same run means anything.
"""

from __future__ import annotations

import argparse
import time

from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.sandbox import SandboxFactory, sandbox_config
from rcb_env.task import bundled_root, load
from rcb_env.validation.strength import StrengthReport, local_grading, score_mutants


def _run(sandbox: str, warm: bool, jobs: int, cap: int) -> tuple[float, StrengthReport]:
    pset = load(bundled_root(), papers={"rmsnorm-swiglu", "adamw-warmup"})
    factory = SandboxFactory(sandbox_config(sandbox, warm_grading=warm))
    grading = GradingConfig(timeout_s=120)
    try:
        start = time.perf_counter()
        report = score_mutants(
            pset,
            local_grading(lambda p: Grader(grading, executor=factory.grading_executor(p)), jobs),
            cap=cap,
        )
        return time.perf_counter() - start, report
    finally:
        factory.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cap", type=int, default=6)
    parser.add_argument("--sandbox", default="bwrap")
    args = parser.parse_args()
    cold_s, cold = _run(args.sandbox, warm=False, jobs=1, cap=args.cap)
    warm_s, warm = _run(args.sandbox, warm=True, jobs=2, cap=args.cap)
    n = sum(s.tried for s in warm.snippets)

    def verdicts(r: StrengthReport) -> list[tuple[str, int, int, int]]:
        return [(s.id, s.killed, s.survived, s.excluded) for s in r.snippets]

    print(f"{n} mutants of {len(warm.snippets)} bundled snippets on {args.sandbox}")
    print(f"  cold, one at a time: {cold_s:7.1f} s ({cold_s / n:.2f} s per mutant)")
    print(f"  warm, --jobs 2:      {warm_s:7.1f} s ({warm_s / n:.2f} s per mutant)")
    print(f"  speed-up: {cold_s / warm_s:.1f}x")
    print(
        f"  score {warm.total.score}; same verdicts both ways: {verdicts(cold) == verdicts(warm)}"
    )


if __name__ == "__main__":
    main()
