"""How big the HTML report of a large evaluation gets and how long it takes to open.

Three runs x 212 snippets (636 episodes, the size of ResearchCodeBench x 3 agents), each episode
as a tools agent leaves it: 8 steps with observations of a few thousand characters, a patch, a
grading with per-test results, model calls, and a task statement that carries a 120,000-character
paper. The report is built, then opened in headless Chromium (Debian's, as the tests use it):
the time from navigation to the page having drawn its leaderboard, plots, matrix and list,
printed beside the same browser opening an empty page in this run (the machine is shared and
noisy: the ratio is the comparable number). Goal: under 3 s to open.

Run: make bench-report   (or .venv/bin/python -m benchmarks.bench_report --episodes 636)
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rcb_env.results import report
from rcb_env.results.records import EpisodeRecord, RecordLog, StepRecord, write_json_atomic
from tests import browser

PAPER = "\\section{Method}\n" + ("We propose a method whose update rule is stated below. " * 2200)


def _text(rng: random.Random, n: int) -> str:
    words = ("tensor", "shape", "loss", "grad", "step", "self.m", "return", "def", "import", "=")
    return " ".join(rng.choice(words) for _ in range(n // 6))


def _steps(rng: random.Random) -> list[dict[str, object]]:
    tools = ["read_file", "search", "run_command", "run_tests"]
    return [
        StepRecord(
            index=i + 1,
            action={"tool": rng.choice(tools), "path": "model.py"},
            observation=_text(rng, rng.randint(1500, 6000)),
            reward=0.0,
            duration_s=0.3,
        ).model_dump()
        for i in range(8)
    ]


def _grade(rng: random.Random, sid: str, passed: bool) -> dict[str, object]:
    return {
        "snippet_id": sid,
        "outcome": "passed" if passed else "failed",
        "kind": "none" if passed else "test_failure",
        "detail": "tests",
        "official_pass": passed,
        "tests": [{"name": f"T.test_{i}", "status": "passed", "message": ""} for i in range(6)],
        "stdout": _text(rng, 2000),
        "stderr": _text(rng, 3000),
    }


def make_runs(root: Path, episodes: int, runs: int = 3) -> list[Path]:
    rng = random.Random(0)
    snippets = [(f"paper{p:02d}", f"snippet {s:02d}") for p in range(20) for s in range(11)]
    snippets = snippets[: episodes // runs]
    patch = "--- a/model.py\n+++ b/model.py\n@@ -1,3 +1,3 @@\n" + "\n".join(
        f"{'+' if i % 2 else '-'}    x = {i}" for i in range(40)
    )
    dirs = []
    for r in range(runs):
        d = root / f"agent-{r}"
        d.mkdir(parents=True)
        log = RecordLog(d / "episodes.jsonl").open()
        for paper, name in snippets:
            sid = f"{paper}/{name}"
            passed = rng.random() < 0.3 + 0.2 * r
            calls = [
                {"step": i, "model": f"model-{r}", "cost": 0.01, "latency_s": 2.0,
                 "usage": {"input_tokens": 9000, "output_tokens": 300}}
                for i in range(8)
            ]  # fmt: skip
            record = {
                "run_id": d.name, "episode_id": f"{name}-{r}", "snippet_id": sid,
                "paper_id": paper, "sample": 0, "weight": rng.randint(1, 20), "task_hash": "x",
                "agent": {"name": "tools", "model": f"model-{r}"}, "config": {},
                "status": "completed", "reason": "submit", "reward": float(passed),
                "passed": passed, "initial_observation": f"Task: implement {name}.\n\n{PAPER}",
                "steps": _steps(rng), "patch": patch, "grade": _grade(rng, sid, passed),
                "model_calls": calls, "tokens": 74400, "cost": 0.08, "started_at": 0.0,
                "duration_s": 60.0,
            }  # fmt: skip
            log.append(EpisodeRecord.model_validate(record))
        log.close()
        manifest = {
            "schema_version": "rcb-env/run/1", "run_id": d.name, "task_set_hash": "same",
            "config": {"agent": "tools", "budgets": {"max_steps": 50}},
            "tasks": [f"{p}/{n}" for p, n in snippets],
        }  # fmt: skip
        write_json_atomic(d / "run.json", manifest)
        dirs.append(d)
    return dirs


def open_time(driver: Any, page: Path) -> float:
    """Seconds from navigation start until the page has drawn everything (``data-ready``)."""
    driver.get(page.as_uri())
    while (
        driver.execute_script("return document.body && document.body.getAttribute('data-ready')")
        != "1"
    ):
        time.sleep(0.01)
    ms: float = driver.execute_script("return performance.now()")
    return ms / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=636)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dirs = make_runs(root / "runs", args.episodes)
        t0 = time.monotonic()
        page = report.write(dirs, root / "report.html")
        built = time.monotonic() - t0
        empty = root / "empty.html"
        empty.write_text("<!doctype html><html><body data-ready='1'></body></html>")
        records = sum((d / "episodes.jsonl").stat().st_size for d in dirs)
        with browser.browser() as driver:
            open_time(driver, empty)  # warm the browser
            base = statistics.median(open_time(driver, empty) for _ in range(args.repeat))
            opened = statistics.median(open_time(driver, page) for _ in range(args.repeat))
            t1 = time.monotonic()
            driver.execute_script("document.querySelector('#episode-list tbody tr').click()")
            while not driver.execute_script("return Boolean(document.getElementById('verdict'))"):
                time.sleep(0.01)
            episode = time.monotonic() - t1
            errors = browser.console_errors(driver)
        size = page_size(page)
    print(f"episodes: {args.episodes} ({len(dirs)} runs); records {records / 2**20:.1f} MiB")
    print(f"report: {size} built in {built:.1f} s")
    print(f"open in Chromium (median of {args.repeat}): report {opened:.2f} s, empty page "
          f"{base:.3f} s: ratio {opened / max(base, 1e-3):.1f}x; goal < 3 s: "
          f"{'met' if opened < 3 else 'NOT met'}")  # fmt: skip
    print(
        f"opening one episode (unpacked on click): {episode:.2f} s; console errors: {len(errors)}"
    )


def page_size(path: Path) -> str:
    return f"{path.stat().st_size / 2**20:.1f} MiB"


if __name__ == "__main__":
    main()
