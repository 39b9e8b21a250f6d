"""Grade every bundled snippet's reference two ways in one run and print the wall-time ratio.

1. "official": the published harness's procedure, re-implemented here: sequentially, one shared
   folder per paper (tree copied over it each time), the file rewritten, ``python test.py``.
2. "rcb-env": our Grader (fresh tmpfs copy per grading, our runner, limits) at --jobs 1 and 2.

Run by hand (not in CI): ``.venv/bin/python -m benchmarks.bench_grading [--rounds 3]``.
The machine is shared and noisy, so only ratios measured in the same run mean anything.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rcb_env import config
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.guest.protocol import ERROR_WORDS as OFFICIAL_ERROR_WORDS
from rcb_env.sandbox.backends.local import LocalExecutor
from rcb_env.task import annotations as ann
from rcb_env.task import bundled_root, load
from rcb_env.task.models import Pset


def official(pset: Pset, python: Path, shared: Path) -> tuple[float, int]:
    start = time.perf_counter()
    passed = 0
    for paper in pset.papers:
        folder = shared / paper.id
        for s in paper.snippets:
            shutil.copytree(paper.root, folder, dirs_exist_ok=True)
            text = ann.insert(paper.file_text(s.file), s.span, s.reference_body)
            (folder / s.file).write_text(text)
            run = subprocess.run(
                [str(python), paper.test_file],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            output = run.stdout + run.stderr
            passed += run.returncode == 0 and not any(w in output for w in OFFICIAL_ERROR_WORDS)
    return time.perf_counter() - start, passed


def ours(pset: Pset, grader: Grader, jobs: int) -> tuple[float, int]:
    start = time.perf_counter()
    jobs_list = [(p, s) for p in pset.papers for s in p.snippets]
    with ThreadPoolExecutor(jobs) as pool:
        results = list(
            pool.map(lambda ps: grader.grade(ps[0], ps[1], ps[1].reference_body), jobs_list)
        )
    return time.perf_counter() - start, sum(r.passed for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    pset = load(bundled_root())
    python = config.task_python()
    # the official harness's way: the test file on the host, unsandboxed; ours the same
    grader = Grader(GradingConfig(python=python), executor=LocalExecutor())
    n = len(pset.snippets)
    times: dict[str, list[float]] = {"official": [], "rcb-env --jobs 1": [], "rcb-env --jobs 2": []}
    with tempfile.TemporaryDirectory(dir=config.scratch_dir()) as tmp:
        official(pset, python, Path(tmp))  # warm the page cache for every paper's imports
        for _ in range(args.rounds):
            t, ok = official(pset, python, Path(tmp))
            times["official"].append(t)
            assert ok == n, f"official rule passed {ok}/{n}"
            for jobs in (1, 2):
                t, ok = ours(pset, grader, jobs)
                times[f"rcb-env --jobs {jobs}"].append(t)
                assert ok == n, f"rcb-env passed {ok}/{n}"
    base = statistics.median(times["official"])
    print(f"{n} snippet references, {len(pset.papers)} papers, {args.rounds} round(s), {python}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:18s} median {med:7.2f} s  {med / n * 1000:7.1f} ms/snippet  "
            f"ratio to official {med / base:5.2f}x"
        )


if __name__ == "__main__":
    main()
