"""The published harness's procedure vs ``rcb-env eval --agent oracle --jobs 2``, in one run, on
ResearchCodeBench's runnable set here.

1. "published": one plain ``python paper2code_test.py`` per snippet, sequentially, in one folder
   per paper (the file rewritten with the reference body each time), with the paper's
   interpreter; pass by the official rule (exit 0, no error words).
2. "rcb-env": ``run_eval`` with the oracle agent, bwrap, ``--jobs 2`` (fresh sandbox per episode,
   grading in a fresh pristine copy under our runner).

Needs ``rcb-env get researchcodebench`` and ``rcb-env setup researchcodebench`` first. Run by
hand or ``make bench-published`` (not part of ``make test``); ``--paper`` limits the set. The
machine is shared and noisy: only the ratio measured in the same run means anything.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import rcb_env
from rcb_env import envs
from rcb_env.grading.grader import OFFICIAL_ERROR_WORDS
from rcb_env.results.summary import Summary
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.runner.eval import runnable
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import annotations as ann
from rcb_env.task.models import Pset


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


def ours(pset: Pset, runs: Path, jobs: int) -> tuple[float, Summary]:
    start = time.perf_counter()
    cfg = EvalConfig(agent="oracle", sandbox=SandboxConfig(backend="bwrap"))
    summary = run_eval(pset, cfg, runs / f"oracle-jobs{jobs}", jobs=jobs)
    return time.perf_counter() - start, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pset", default="researchcodebench")
    parser.add_argument("--paper", action="append", default=[], help="Only these papers.")
    parser.add_argument("--jobs", type=int, default=2)
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
        t_pub, passed, total = published(ready, Path(tmp) / "shared")
        print(f"published procedure  {t_pub:8.1f} s   {passed}/{total} pass (official rule)")
        t_ours, summary = ours(ready, Path(tmp) / "runs", args.jobs)
        o = summary.overall
        rates = f"{o.scaled:.2f} / {o.plain:.2f}" if o else "-"
        print(
            f"rcb-env --jobs {args.jobs}      {t_ours:8.1f} s   oracle {rates} scaled / plain, "
            f"{summary.infra_errors} infrastructure errors"
        )
        print(f"ratio rcb-env / published: {t_ours / t_pub:.2f}x (next goal: <= 0.25x)")


if __name__ == "__main__":
    main()
