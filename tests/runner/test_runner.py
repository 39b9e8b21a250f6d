"""Runs: records, the paper's metrics, resume, SIGKILL safety, agents by name or import path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rcb_env import config
from rcb_env.cli import cli
from rcb_env.errors import ConfigError
from rcb_env.grading import GradingConfig
from rcb_env.results import read_records, summarize
from rcb_env.results.records import EpisodeRecord, InfraError, RecordLog
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig, scratch
from rcb_env.task import load
from rcb_env.tools.actions import ReplaceInFile, Submit, ToolSpec
from tests.conftest import math_files, write_paper, write_pset


def _rec(snippet: str, sample: int, weight: int, passed: bool | None, **kw: Any) -> EpisodeRecord:
    base: dict[str, Any] = {
        "run_id": "r",
        "episode_id": f"{snippet}-{sample}",
        "snippet_id": snippet,
        "paper_id": snippet.split("/", maxsplit=1)[0],
        "sample": sample,
        "weight": weight,
        "task_hash": "h",
        "agent": {"name": "t"},
        "config": {},
        "status": "completed",
        "reason": "submit",
        "reward": float(weight if passed else 0),
        "passed": passed,
        "initial_observation": "",
        "steps": [],
        "started_at": 0.0,
        "duration_s": 0.0,
    }
    base.update(kw)
    return EpisodeRecord.model_validate(base)


def test_summary_formulas_by_hand() -> None:
    records = [
        # sample 0: A/x (w3) pass, A/y (w1) fail, B/z (w6) pass -> scaled 9/10, plain 2/3
        _rec("A/x", 0, 3, True),
        _rec("A/y", 0, 1, False),
        _rec("B/z", 0, 6, True),
        # sample 1: A/x fail, A/y pass, B/z pass -> scaled 7/10, plain 2/3
        _rec("A/x", 1, 3, False),
        _rec("A/y", 1, 1, True),
        _rec("B/z", 1, 6, True),
    ]
    s = summarize(records)
    assert s.overall is not None
    assert s.overall.scaled == pytest.approx(80.0)
    assert s.overall.scaled_std == pytest.approx(10.0)  # population std of 90 and 70
    assert s.overall.plain == pytest.approx(200 / 3)
    assert s.overall.plain_std == pytest.approx(0.0)
    assert s.per_paper["A"].scaled == pytest.approx((75.0 + 25.0) / 2)
    assert s.per_paper["B"].scaled == pytest.approx(100.0)
    assert s.samples == 2


def test_infra_errors_are_excluded_and_counted_and_superseded() -> None:
    infra = InfraError(stage="sandbox", type="SandboxError", message="boom")
    records = [
        _rec("A/x", 0, 3, True),
        _rec("A/y", 0, 1, None, status="infra_error", reason="infra_error", infra_error=infra),
    ]
    s = summarize(records)
    assert s.overall is not None
    assert (s.overall.scaled, s.overall.snippets, s.infra_errors) == (100.0, 1, 1)
    assert s.infra_by_cause == {"sandbox: SandboxError": 1}
    s2 = summarize([*records, _rec("A/y", 0, 1, False)])  # re-run supersedes the failure
    assert s2.overall is not None
    assert (s2.overall.scaled, s2.infra_errors) == (75.0, 0)


def test_record_log_cuts_a_torn_tail_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    good = _rec("A/x", 0, 3, True)
    path.write_text(good.model_dump_json() + "\n" + '{"schema_version": "rcb-env/epi')
    log = RecordLog(path).open()
    log.append(_rec("A/y", 0, 1, False))
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert [r.snippet_id for r in read_records(path)] == ["A/x", "A/y"]


def _small_pset(root: Path, papers: int = 2) -> Path:
    entries = [write_paper(root, f"p{i}", math_files()) for i in range(papers)]
    return write_pset(root, entries)


def _cfg(agent: str) -> EvalConfig:
    return EvalConfig(
        agent=agent,
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
    )


class EditingAgent:
    """Bring-your-own agent used by path: solves 'variance' by editing, gives up elsewhere."""

    name = "editing"

    def start(self, observation: str, info: dict[str, Any], tools: list[ToolSpec]) -> None:
        self.plan: list[Any] = [Submit()]
        if info["snippet_id"].endswith("/variance"):
            body = "    m = mean(xs)\n    return sum((x - m) ** 2 for x in xs) / len(xs)\n"
            self.plan.insert(0, ReplaceInFile(path=info["file"], old=info["todo_block"], new=body))

    def act(self, observation: str, info: dict[str, Any]) -> Any:
        return self.plan.pop(0)

    def end(self, info: dict[str, Any]) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


@pytest.mark.bwrap
@pytest.mark.slow
def test_bring_your_own_agent_and_resume_semantics(tmp_path: Path, require_bwrap: None) -> None:
    pset = load(_small_pset(tmp_path / "pset"))
    run_dir = tmp_path / "run"
    cfg = _cfg("tests.runner.test_runner:EditingAgent")
    s = run_eval(pset, cfg, run_dir, jobs=2)
    assert s.overall is not None
    assert s.overall.passed == 2  # variance in both papers
    assert s.overall.scaled == pytest.approx(100 * 4 / 18)  # weights: mean 4, total 3, variance 2
    before = read_records(run_dir / "episodes.jsonl")
    assert len(before) == 6
    # resuming a complete run does nothing
    run_eval(pset, cfg, run_dir, resume=True)
    assert len(read_records(run_dir / "episodes.jsonl")) == 6
    with pytest.raises(ConfigError, match="already holds a run"):
        run_eval(pset, cfg, run_dir)
    with pytest.raises(ConfigError, match="config differs"):
        run_eval(pset, _cfg("null"), run_dir, resume=True)
    r = before[0]
    assert r.schema_version == "rcb-env/episode/1"
    assert r.steps
    assert r.initial_observation.startswith("Task:")
    assert r.task_hash


@pytest.mark.bwrap
@pytest.mark.slow
def test_infra_failed_episodes_are_rerun_on_resume(tmp_path: Path, require_bwrap: None) -> None:
    pset = load(_small_pset(tmp_path / "pset", papers=1))
    run_dir = tmp_path / "run"
    broken = EvalConfig(
        agent="oracle",
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=tmp_path / "missing-python", timeout_s=60),
    )
    s = run_eval(pset, broken, run_dir, infra_retries=1, retry_delay_s=0)
    assert s.infra_errors == 3
    assert s.overall is None  # nothing scored: never counted as 0
    assert len(read_records(run_dir / "episodes.jsonl")) == 6  # one retry round, failed again
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["config"] = _cfg("oracle").model_dump(mode="json")  # the operator fixed the python
    (run_dir / "run.json").write_text(json.dumps(manifest))
    s = run_eval(pset, _cfg("oracle"), run_dir, resume=True)
    assert s.infra_errors == 0
    assert s.overall is not None
    assert s.overall.scaled == 100.0
    assert len(read_records(run_dir / "episodes.jsonl")) == 9  # 6 infra + 3 re-runs


def _cli_eval(*args: str) -> list[str]:
    return [sys.executable, "-m", "rcb_env", "eval", *args]


@pytest.mark.bwrap
@pytest.mark.slow
def test_sigkill_at_random_points_then_resume_loses_and_repeats_nothing(
    tmp_path: Path, require_bwrap: None
) -> None:
    root = _small_pset(tmp_path / "pset", papers=3)
    env = {**os.environ, "RCB_TASK_PYTHON": str(config.task_python())}
    reference = tmp_path / "uninterrupted"
    subprocess.run(
        _cli_eval(
            "--agent", "oracle", "--pset", str(root), "--samples", "2", "--resume", str(reference)
        ),
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    expected = summarize(read_records(reference / "episodes.jsonl"))
    run_dir = tmp_path / "killed"
    kills = 0
    for threshold in (1, 4, 9, 13):
        proc = subprocess.Popen(
            _cli_eval(
                "--agent",
                "oracle",
                "--pset",
                str(root),
                "--samples",
                "2",
                "--jobs",
                "2",
                "--resume",
                str(run_dir),
            ),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        records = run_dir / "episodes.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            n = records.read_bytes().count(b"\n") if records.exists() else 0
            if n >= threshold:
                proc.send_signal(signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.02)
        proc.wait()
    assert kills >= 2
    subprocess.run(
        _cli_eval(
            "--agent", "oracle", "--pset", str(root), "--samples", "2", "--resume", str(run_dir)
        ),
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    final = read_records(run_dir / "episodes.jsonl")
    keys = [(r.snippet_id, r.sample) for r in final]
    assert len(keys) == len(set(keys)) == 18  # 3 papers x 3 snippets x 2 samples, none twice
    lines = (run_dir / "episodes.jsonl").read_bytes().splitlines()
    assert len(lines) == 18  # no torn or duplicate line left behind
    assert summarize(final) == expected
    # The resumed run swept what the killed ones left on tmpfs.
    leftovers = [
        d
        for d in config.scratch_dir().iterdir()
        if d.name.startswith(tuple(scratch.PREFIXES))
        and (d / scratch.OWNER_FILE).exists()
        and not scratch._alive((d / scratch.OWNER_FILE).read_text())
    ]
    assert leftovers == []


@pytest.mark.bwrap
@pytest.mark.slow
def test_cli_eval_oracle_and_null_on_the_bundled_tasks(tmp_path: Path, require_bwrap: None) -> None:
    runner = CliRunner()
    out = {}
    for agent in ("oracle", "null"):
        run_dir = tmp_path / agent
        result = runner.invoke(
            cli, ["eval", "--agent", agent, "--jobs", "2", "--resume", str(run_dir)]
        )
        assert result.exit_code == 0, result.output
        s = summarize(read_records(run_dir / "episodes.jsonl"))
        assert s.overall is not None
        assert s.infra_errors == 0
        out[agent] = (round(s.overall.scaled, 2), round(s.overall.plain, 2))
        summary = runner.invoke(cli, ["summary", str(run_dir)])
        assert summary.exit_code == 0
        assert "overall" in summary.output
    assert out == {"oracle": (100.0, 100.0), "null": (0.0, 0.0)}


def test_unknown_agent_is_a_config_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            "--agent",
            "nope.module:Thing",
            "--pset",
            str(_small_pset(tmp_path, 1)),
            "--sandbox",
            "local",
            "--resume",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code != 0
    assert "cannot import nope.module" in str(result.exception) + result.output


@pytest.mark.bwrap
@pytest.mark.slow
def test_cli_eval_exits_3_and_says_how_to_resume_when_episodes_could_not_be_scored(
    tmp_path: Path, require_bwrap: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RCB_TASK_PYTHON", str(tmp_path / "no-such-python"))
    run_dir = tmp_path / "run"
    pset = _small_pset(tmp_path / "pset", papers=1)
    args = ["eval", "--agent", "oracle", "--pset", str(pset), "--resume", str(run_dir)]
    result = CliRunner().invoke(cli, [*args, "--infra-retries", "1", "--retry-delay", "0"])
    assert result.exit_code == 3, result.output
    assert "3 episode(s) could not be scored" in result.output
    assert f"--resume {run_dir}" in result.output.replace("\n", "")
    records = read_records(run_dir / "episodes.jsonl")
    assert len(records) == 6  # one retry round, still broken
    assert {r.status for r in records} == {"infra_error"}
