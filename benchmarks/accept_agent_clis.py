"""The agent CLIs' acceptance run (``make acceptance-agent-clis``; not in ``make test``): for each
CLI, ``rcb-env eval --pset researchcodebench --agent CLI --model PROVIDER:rcb-scripted --base-url
URL --jobs 2`` against a scripted model server of ours that plays the CLI's own tools
(:mod:`rcb_agents.testing.cli_oracle`): once with the reference body, once with a wrong one.
Each episode's agent also looks for the real key from inside with its own shell (the key is the
host's, held by the run's proxy). Expected: every runnable snippet passes with its line weight
with the reference body, none with the wrong one, no infrastructure error, the key never found
inside. Prints one JSON line per run and exits 1 if any expectation fails.

    python -m benchmarks.accept_agent_clis [--agent claude-code --agent codex --agent tools]
        [--mode oracle --mode wrong] [--pset researchcodebench] [--jobs 2] [--sandbox docker]
        [--report FILE]

``--agent tools`` is rcb-env's own tools agent played by the same scripted model (its
``write_file`` and ``submit``), so that the CLIs' runs have a tools-agent run beside them: with
more than one agent, ``rcb-env compare`` of the runs of each mode is printed (the paired
intervals against the first agent), and ``--report`` writes ``rcb-env report`` of all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rcb_agents.clis import CLIS

from rcb_env.results.records import final_records, read_records

KEY = "sk-acceptance-real-key-0b5e"


#: rcb-env's own agent, played by the same scripted model (chat completions with its tools).
TOOLS = "tools"


def run(  # noqa: PLR0913 (one run's settings)
    agent: str, mode: str, pset: str, jobs: int, runs: Path, sandbox: str | None = None
) -> dict[str, Any]:
    """One eval of ``agent`` against the scripted server in ``mode``; its numbers."""
    provider, version = (
        ("openai", "rcb-env") if agent == TOOLS else (CLIS[agent].provider, CLIS[agent].version)
    )
    report = runs / f"{agent}-{mode}-server.json"
    runs.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "rcb_agents.testing.cli_oracle", "--pset", pset, "--mode", mode,
         "--api-key", KEY, "--spy", "--report", str(report)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        url = json.loads(server.stdout.readline())["url"]
        runs_dir = runs / f"{agent}-{mode}"
        env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY}
        rcb = Path(sys.executable).with_name("rcb-env")
        t0 = time.monotonic()
        subprocess.run(
            [str(rcb), "eval", "--pset", pset, "--agent", agent,
             "--model", f"{provider}:rcb-scripted", "--base-url", url,
             "--jobs", str(jobs), "--runs-dir", str(runs_dir),
             *(["--sandbox", sandbox] if sandbox else [])],
            env=env, check=False,
        )  # fmt: skip
        wall = time.monotonic() - t0
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    [records_file] = sorted(runs_dir.glob("*/episodes.jsonl"))[-1:]
    records = list(final_records(read_records(records_file)).values())
    served = json.loads(report.read_text())
    scored = [r for r in records if r.status.value != "infra_error"]
    return {
        "agent": agent,
        "version": version,
        "sandbox": sandbox or "default",
        "mode": mode,
        "episodes": len(records),
        "passed": sum(bool(r.passed) for r in scored),
        "passed_with_weight": sum(bool(r.passed) and r.reward == r.weight for r in scored),
        "weight_passed": sum(r.weight for r in scored if r.passed),
        "weight_total": sum(r.weight for r in records),
        "passed_ids": sorted(r.snippet_id for r in scored if r.passed) if mode == "wrong" else [],
        "infra_errors": len(records) - len(scored),
        "reasons": _count(r.reason.value for r in records),
        "crashed": sum(bool(r.agent.get("crashed")) for r in records),
        "model_calls": sum(len(r.model_calls) for r in records),
        "key_spied": served["spied"],
        "key_found_inside": served["key_found_inside"],
        "unknown_requests": served["unknown"],
        "wall_s": round(wall, 1),
        "run": str(records_file.parent),
    }


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts


def verdict(result: dict[str, Any]) -> list[str]:
    """What the run got wrong (empty: accepted)."""
    problems = []
    n = result["episodes"]
    if result["mode"] == "oracle" and result["passed_with_weight"] != n:
        problems.append(f"{n - result['passed_with_weight']} of {n} did not pass with weight")
    if result["mode"] == "wrong" and result["passed"]:
        problems.append(f"{result['passed']} passed with a wrong body")
    if result["infra_errors"]:
        problems.append(f"{result['infra_errors']} infrastructure errors")
    if result["key_found_inside"]:
        problems.append(f"the key was found inside {result['key_found_inside']} times")
    if result["key_spied"] != n - result["infra_errors"]:
        problems.append(f"only {result['key_spied']} of {n} episodes looked for the key")
    return problems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="append", choices=[*sorted(CLIS), TOOLS])
    parser.add_argument("--mode", action="append", choices=("oracle", "wrong"))
    parser.add_argument("--pset", default="researchcodebench")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--runs", type=Path, default=Path("runs/accept-agent-clis"))
    parser.add_argument("--sandbox", default=None, help="bwrap (default) or docker")
    parser.add_argument("--report", type=Path, default=None, help="rcb-env report of the runs")
    args = parser.parse_args(argv)
    failed = False
    agents = args.agent or ["claude-code", "codex"]
    modes = args.mode or ["oracle", "wrong"]
    done: dict[str, list[str]] = {mode: [] for mode in modes}
    for agent in agents:
        for mode in modes:
            result = run(agent, mode, args.pset, args.jobs, args.runs, args.sandbox)
            result["problems"] = verdict(result)
            failed |= bool(result["problems"])
            done[mode].append(result["run"])
            print(json.dumps(result), flush=True)
    rcb = str(Path(sys.executable).with_name("rcb-env"))
    for mode, run_dirs in done.items():
        if len(run_dirs) > 1:
            print(f"# rcb-env compare of the {mode} runs ({', '.join(agents)})", flush=True)
            failed |= subprocess.run([rcb, "compare", *run_dirs], check=False).returncode != 0
    if args.report is not None:
        every = [d for run_dirs in done.values() for d in run_dirs]
        cmd = [rcb, "report", *every, "-o", str(args.report), "--title", "agent CLIs"]
        failed |= subprocess.run(cmd, check=False).returncode != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
