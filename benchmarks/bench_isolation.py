"""What closing the cross-run channels costs warm grading: the same gradings with this tree and
with a baseline revision (default: the commit before the fix), in one run, alternating.

Each side runs in its own process with its own ``rcb_env`` (the baseline from a temporary git
worktree), grades every selected snippet's oracle and null bodies warm in bwrap, ``--jobs`` at a
time, and reports its wall time; the script prints the ratio this tree / baseline per round and
over all rounds (medians). The machine is shared and noisy: only ratios measured in the same run
mean anything.

Run by hand (not in CI), after ``rcb-env get``/``setup`` for a named benchmark:

    .venv/bin/python -m benchmarks.bench_isolation --pset researchcodebench --jobs 2
    .venv/bin/python -m benchmarks.bench_isolation --pset tasks --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The last commit before the issue "Two holes in grading on the default path" was fixed.
BASELINE = "67a1f14"


def side(pset_name: str, papers: list[str], jobs: int) -> dict[str, object]:
    """Grade in this process (whichever ``rcb_env`` it imports): oracle and null bodies warm."""
    import rcb_env
    from rcb_env.grading import Grader, GradingConfig
    from rcb_env.sandbox import SandboxConfig, SandboxFactory

    pset = rcb_env.load(pset_name)
    from rcb_env.task import environments as envs

    chosen = [
        p
        for p in pset.papers
        if (not papers or p.id in papers) and envs.availability(p).status == "ready"
    ]
    factory = SandboxFactory(SandboxConfig(backend="bwrap"))
    cases = [
        (p, s, body)
        for p in chosen
        for s in p.snippets
        for body in (s.reference_body, s.todo_body())
    ]
    graders = {p.id: Grader(GradingConfig(), executor=factory.grading_executor(p)) for p in chosen}
    start = time.monotonic()
    try:
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            results = list(pool.map(lambda c: graders[c[0].id].grade(*c), cases))
    finally:
        factory.close()
    seconds = time.monotonic() - start
    return {
        "rcb_env": str(Path(rcb_env.__file__).parent),
        "seconds": round(seconds, 2),
        "gradings": len(results),
        "passed": sum(r.passed for r in results),
        "infra": sum(r.is_infra_error for r in results),
        "warm": sum(r.grading_path == "warm" for r in results),
    }


def _run_side(tree: Path, args: argparse.Namespace) -> dict[str, object]:
    # Run as a script from the tree's folder: the script's own folder comes first on sys.path
    # (no rcb_env there), then PYTHONPATH, the tree's rcb_env, before the installed one.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, str(Path(__file__).resolve()), "--side", "--pset", args.pset]
    argv += ["--jobs", str(args.jobs), *(["--papers", args.papers] if args.papers else [])]
    run = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"the side in {tree} failed:\n{run.stderr[-3000:]}")
    result: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    if Path(str(result["rcb_env"])).parent != tree.resolve():
        raise SystemExit(f"the side in {tree} imported {result['rcb_env']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pset", default="tasks")
    parser.add_argument("--papers", default="", help="comma-separated paper ids (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", default=BASELINE, help="git revision to compare with")
    parser.add_argument(
        "--first",
        choices=["baseline", "this"],
        default="baseline",
        help="which side runs first in round 1 (the order alternates from then on)",
    )
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    papers = [p for p in args.papers.split(",") if p]
    if args.side:
        print(json.dumps(side(args.pset, papers, args.jobs)))
        return
    with tempfile.TemporaryDirectory(prefix="rcb-bench-baseline-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.baseline],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        try:
            ratios = []
            for n in range(args.rounds):
                order = [("baseline", base), ("this tree", REPO)]
                if (n % 2 == 1) != (args.first == "this"):
                    order.reverse()
                got = {name: _run_side(tree, args) for name, tree in order}
                ratio = float(got["this tree"]["seconds"]) / float(got["baseline"]["seconds"])  # type: ignore[arg-type]
                ratios.append(ratio)
                for name, r in got.items():
                    print(f"round {n + 1} {name:>9}: {json.dumps(r)}")
                print(f"round {n + 1} ratio this tree / baseline: {ratio:.2f}x")
            print(
                f"median ratio over {args.rounds} round(s), {args.pset}, --jobs {args.jobs}: "
                f"{statistics.median(ratios):.2f}x (goal: at most 1.20x)"
            )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False
            )


if __name__ == "__main__":
    main()
