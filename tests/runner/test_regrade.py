"""``rcb-env regrade``: a stored run graded again after a bundled task's test changed gives the
verdicts a fresh run gives, names why each changed, keeps infrastructure failures apart, and
resumes after being killed without losing or repeating a grading."""

from __future__ import annotations

import json
import os
import shutil
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
from rcb_env.episode.outcome import EpisodeStatus, StopReason
from rcb_env.errors import ConfigError, InfraError
from rcb_env.grading import GradingConfig
from rcb_env.results import read_records
from rcb_env.results.records import RecordLog, final_records
from rcb_env.results.regrade import (
    GRADER_CHANGED,
    NO_PATCH,
    REGRADE,
    REMASKED,
    TEST_CHANGED,
    UNEXPLAINED,
    UNRECORDED,
    verdict,
    verdict_changes,
)
from rcb_env.results.summary import summarize_run
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.runner.regrade import PATCHED, patched_file, regrade_run, stored_run
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import bundled_root, load
from rcb_env.tools.actions import ReplaceInFile, Submit, ToolSpec

WEAK = "        self.assertAlmostEqual(affine(2.0, 3.0, 0.0), 6.0)\n"
STRONG = WEAK + "        self.assertAlmostEqual(affine(2.0, 3.0, 1.0), 7.0)\n"
AFFINE = "weighted-stats/affine map"
MEAN = "weighted-stats/weighted mean"


BODIES = {
    "weighted mean": "    return sum(values) / len(values)\n",
    "affine map": "    y = x * scale\n    return y - offset\n",
}


class SignFlipAgent:
    """Wrong on 'weighted mean' under any test; right on 'affine map' only under its weak test
    (the sign of the offset flipped, which an offset of zero cannot see)."""

    name = "sign-flip"

    def start(self, observation: str, info: dict[str, Any], tools: list[ToolSpec]) -> None:
        body = BODIES[info["snippet_id"].split("/", 1)[1]]
        self.plan: list[Any] = [
            ReplaceInFile(path=info["file"], old=info["todo_block"], new=body),
            Submit(),
        ]

    def act(self, observation: str, info: dict[str, Any]) -> Any:
        return self.plan.pop(0)

    def end(self, info: dict[str, Any]) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def _cfg(samples: int = 1) -> EvalConfig:
    return EvalConfig(
        agent="tests.runner.test_regrade:SignFlipAgent",
        samples=samples,
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
    )


def _canary(dest: Path) -> Path:
    """A copy of the bundled test-strength canary (its 'affine map' test is weak)."""
    shutil.copytree(bundled_root() / "strength-canary", dest)
    return dest


def _strengthen(pset: Path) -> None:
    test = pset / "weighted-stats" / "paper2code_test.py"
    text = test.read_text()
    assert WEAK in text
    test.write_text(text.replace(WEAK, STRONG))


def _verdicts(run: Path) -> dict[tuple[str, int], str]:
    return {k: verdict(r) for k, r in final_records(read_records(run / "episodes.jsonl")).items()}


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"RCB_TASK_PYTHON": str(config.task_python())})


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_changed_test_regraded_gives_a_fresh_runs_verdicts_and_says_why(
    tmp_path: Path, require_bwrap: None
) -> None:
    root = _canary(tmp_path / "pset")
    old = tmp_path / "old"
    run_eval(load(root), _cfg(), old)
    assert _verdicts(old) == {(MEAN, 0): "failed", (AFFINE, 0): "passed"}
    # An episode the infrastructure failed: no patch to grade again.
    first = read_records(old / "episodes.jsonl")[0]
    lost = first.model_copy(
        update={"sample": 1, "status": EpisodeStatus.INFRA_ERROR, "reason": StopReason.INFRA_ERROR,
                "passed": None, "reward": 0.0, "grade": None, "body": None, "patch": "",
                "infra_error": InfraError(stage="sandbox", type="x", message="engine died")}
    )  # fmt: skip
    log = RecordLog(old / "episodes.jsonl").open()
    log.append(lost)
    log.close()

    _strengthen(root)
    new = tmp_path / "new"
    result = _invoke("regrade", str(old), "--sandbox", "bwrap", "--resume", str(new))
    assert result.exit_code == 0, result.output
    assert "Verdicts that changed" in result.output
    assert TEST_CHANGED in result.output

    fresh = tmp_path / "fresh"
    run_eval(load(root), _cfg(), fresh)
    assert _verdicts(fresh) == {(MEAN, 0): "failed", (AFFINE, 0): "failed"}
    regraded = _verdicts(new)
    assert {k: v for k, v in regraded.items() if k[1] == 0} == _verdicts(fresh)
    assert regraded[(lost.snippet_id, 1)] == "infra_error"  # copied as it was, still excluded

    changes = verdict_changes(new)
    assert changes.regraded == 2
    assert changes.unchanged == 1
    assert [(c.snippet_id, c.old, c.new, c.reasons) for c in changes.changed] == [
        (AFFINE, "passed", "failed", (TEST_CHANGED,))
    ]
    assert [(c.snippet_id, c.sample, c.reasons) for c in changes.not_regraded] == [
        (lost.snippet_id, 1, (NO_PATCH,))
    ]
    manifest = json.loads((new / "run.json").read_text())
    prov = manifest[REGRADE]
    assert prov["of"] == str(old.resolve())
    assert prov["run_id"] == json.loads((old / "run.json").read_text())["run_id"]
    assert prov["grader_old"] == prov["grader_new"] == manifest["grader"]
    affine = prov["tasks"][AFFINE]
    assert affine["old"] == affine["new"]
    assert affine["test_old"] != affine["test_new"]

    # The regraded run is a run: summary, compare (same tasks, budgets, grading) and report.
    summary = summarize_run(new)
    assert summary.overall is not None
    assert (summary.overall.passed, summary.infra_errors) == (0, 1)
    compared = _invoke("compare", str(old), str(new))
    assert compared.exit_code == 0, compared.output
    report = _invoke("report", str(old), str(new), "-o", str(tmp_path / "r.html"))
    assert report.exit_code == 0, report.output

    # Resuming a finished regrading grades nothing; --json has the same changes.
    lines = (new / "episodes.jsonl").read_bytes()
    again = _invoke("regrade", str(old), "--sandbox", "bwrap", "--resume", str(new), "--json")
    assert again.exit_code == 0, again.output
    assert (new / "episodes.jsonl").read_bytes() == lines
    doc = json.loads(again.output)
    assert [c["snippet_id"] for c in doc["changes"]["changed"]] == [AFFINE]
    assert doc["summary"]["infra_errors"] == 1

    _check_reasons(new, manifest)
    _check_remasked(root, old, new, tmp_path / "moved", regraded)


def _check_reasons(new: Path, manifest: dict[str, Any]) -> None:
    """Why, as the provenance says: the grader too, or nothing that was recorded."""
    prov = manifest[REGRADE]
    affine = prov["tasks"][AFFINE]
    prov["grader_old"] = "0.0.1+000000000000"
    (new / "run.json").write_text(json.dumps(manifest))
    (change,) = verdict_changes(new).changed
    assert change.reasons[0] == TEST_CHANGED
    assert change.reasons[1].startswith(GRADER_CHANGED)
    prov["grader_old"] = prov["grader_new"]
    affine["test_old"] = affine["test_new"]
    (new / "run.json").write_text(json.dumps(manifest))
    assert verdict_changes(new).changed[0].reasons == (UNEXPLAINED,)
    affine["test_old"] = None
    (new / "run.json").write_text(json.dumps(manifest))
    assert verdict_changes(new).changed[0].reasons == (UNRECORDED,)


def _check_remasked(
    root: Path, old: Path, new: Path, moved: Path, regraded: dict[tuple[str, int], str]
) -> None:
    """A re-masked snippet (its file gained a line above it): the stored patch is applied to
    the new masked file, and a regrading names both changes."""
    stats = root / "weighted-stats" / "stats.py"
    stats.write_text("# a line added above every snippet\n" + stats.read_text())
    regrade_run(stored_run(old), load(root), moved, sandbox=_cfg().sandbox)
    prov2 = json.loads((moved / "run.json").read_text())[REGRADE]
    assert prov2["tasks"][AFFINE]["old"] != prov2["tasks"][AFFINE]["new"]
    assert prov2["bodies"] == {f"{AFFINE}#0": PATCHED, f"{MEAN}#0": PATCHED}
    (change,) = verdict_changes(moved).changed
    assert change.reasons == (TEST_CHANGED, REMASKED, PATCHED)
    bodies = {r.snippet_id: r.body for r in read_records(moved / "episodes.jsonl")}
    assert bodies[AFFINE] == BODIES["affine map"]
    assert _verdicts(moved) == regraded

    # A folder that holds another run is refused, and so is a regrading of another run.
    with pytest.raises(ConfigError, match="already holds a run"):
        regrade_run(stored_run(old), load(root), moved, sandbox=_cfg().sandbox)
    with pytest.raises(ConfigError, match="not a regrading of"):
        regrade_run(stored_run(new), load(root), moved, sandbox=_cfg().sandbox, resume=True)


def test_what_is_no_stored_run_is_refused_with_why(tmp_path: Path) -> None:
    empty = _invoke("regrade", str(tmp_path))  # a ConfigError: `rcb-env` exits 4 with it
    assert isinstance(empty.exception, ConfigError)
    assert "is not a run folder" in str(empty.exception)
    (tmp_path / "episodes.jsonl").write_text("")
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r", "config": {"agent": "x",
                                                   "bogus": 1}}))  # fmt: skip
    broken = _invoke("regrade", str(tmp_path))
    assert isinstance(broken.exception, ConfigError)
    assert "cannot read: bogus" in str(broken.exception)
    assert not (tmp_path / "runs").exists()


def test_a_stored_patch_is_applied_where_its_lines_stand() -> None:
    before = "a\nb\n# TODO\nc\n"
    patch = "--- a/f.py\n+++ b/f.py\n@@ -1,4 +1,4 @@\n a\n b\n-# TODO\n+x = 1\n c\n"
    assert patched_file(patch, "f.py", "top\n" + before) == "top\na\nb\nx = 1\nc\n"
    assert patched_file(patch, "g.py", before) is None  # no hunk for that file
    assert patched_file(patch, "f.py", "a\nB\n# TODO\nc\n") is None  # its lines are gone
    assert patched_file("", "f.py", before) is None


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_regrading_killed_by_pid_resumes_without_losing_or_repeating(
    tmp_path: Path, require_bwrap: None
) -> None:
    root = _canary(tmp_path / "pset")
    old = tmp_path / "old"
    run_eval(load(root), _cfg(samples=4), old, jobs=2)
    expected = _verdicts(old)
    assert len(expected) == 8
    new = tmp_path / "new"
    records = new / "episodes.jsonl"
    argv = [sys.executable, "-m", "rcb_env", "regrade", str(old), "--sandbox", "bwrap",
            "--grading", "cold", "--resume", str(new)]  # fmt: skip
    env = {**os.environ, "RCB_TASK_PYTHON": str(config.task_python())}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, killed_at = time.monotonic() + 120, 0
    while time.monotonic() < deadline and proc.poll() is None:
        killed_at = records.read_bytes().count(b"\n") if records.exists() else 0
        if killed_at >= 3:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the regrading ended before it could be killed"
    kept = records.read_bytes().count(b"\n")
    assert 3 <= kept < 8
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = records.read_bytes().splitlines()
    final = read_records(records)
    keys = [(r.snippet_id, r.sample) for r in final]
    assert len(lines) == len(keys) == len(set(keys)) == 8  # none lost, none twice
    assert _verdicts(new) == expected  # same tests: the same verdicts
