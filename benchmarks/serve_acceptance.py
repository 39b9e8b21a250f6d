"""Acceptance of ``rcb-env serve`` (issue 38): the oracle played through OpenEnv's own client
(openenv-core from ``.venv/openenv``, unchanged) against ``rcb-env serve --pset
researchcodebench``, on every runnable published snippet: each must score its line weight, a
wrong body (one that raises) 0 on every snippet of the ``verified`` subset (tests solid: a few
others' tests never run the snippet, so any body passes them; those are listed), with 0
infrastructure errors; then the server's run folder is read as an eval run (``summarize_run``).

Run: ``make serve-acceptance`` (after ``rcb-env get/setup researchcodebench``; not part of
``make test``). Options: ``--jobs`` clients at once (2), ``--limit`` the first N tasks, ``--task``
only these.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._serve import CLIENT, OPENENV_PYTHON, start, stop
from rcb_env.results.summary import summarize_run
from rcb_env.runner.episode import EvalConfig
from rcb_env.runner.eval import runnable
from rcb_env.task import load
from rcb_env.task.selection import load_subset, select_subset


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pset", default="researchcodebench")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--task", action="append", default=[], help="Only this task (repeatable).")
    parser.add_argument("--runs-dir", default="runs/serve-acceptance")
    args = parser.parse_args()

    ready, _totals = runnable(load(args.pset), EvalConfig(agent="openenv"))
    snippets = sorted(ready.snippets, key=lambda s: s.id)
    if args.task:
        snippets = [s for s in snippets if s.id in args.task]
    if args.limit:
        snippets = snippets[: args.limit]
    answers = {s.id: [s.reference_body, s.weight] for s in snippets}
    proc, url = start(
        *("--pset", args.pset, "--runs-dir", args.runs_dir),
        *("--max-episodes", str(2 * args.jobs), "--sandbox", "bwrap"),
    )
    t0 = time.monotonic()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(answers, f)
            f.flush()
            run = subprocess.run(
                [str(OPENENV_PYTHON), str(CLIENT), "oracle", url, f.name, str(args.jobs)],
                capture_output=True,
                text=True,
                check=False,
            )
    finally:
        code = stop(proc)
    wall = time.monotonic() - t0
    if run.returncode != 0:
        sys.stderr.write(run.stderr[-5000:])
        return 1
    rows = json.loads(run.stdout)["rows"]
    verified = {s.id for s in select_subset(ready, load_subset("verified")).snippets}
    bad = [
        r
        for r in rows
        if "error" in r
        or r["reward"] != r["weight"]
        or (r["wrong_reward"] != 0.0 and r["task"] in verified)
        or r["status"] != "completed"
        or r["wrong_status"] != "completed"
    ]
    weak = [r["task"] for r in rows if r not in bad and r["wrong_reward"] != 0.0]
    for r in bad:
        print("FAILED", json.dumps(r))
    run_dir = max(Path(args.runs_dir).iterdir(), key=lambda p: p.stat().st_mtime)
    summary = summarize_run(run_dir)
    weight = sum(r["weight"] for r in rows)
    scored = sum(r.get("reward") or 0 for r in rows)
    print(
        json.dumps(
            {
                "snippets": len(rows),
                "weight": weight,
                "oracle_reward_sum": scored,
                "failed": len(bad),
                "wrong_body_zero": sum(1 for r in rows if r.get("wrong_reward") == 0.0),
                "wrong_body_passed_outside_verified": weak,
                "infra_errors": summary.infra_errors,
                "episodes_recorded": summary.episodes,
                "server_exit": code,
                "wall_s": round(wall, 1),
                "run_dir": str(run_dir),
            }
        )
    )
    return 0 if not bad and summary.infra_errors == 0 and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
