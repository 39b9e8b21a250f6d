"""rcb-env as an inspect_ai task (rcb_env.integrations.inspect): the real ``inspect eval`` command
(in the inspect venv ``scripts/install.sh`` makes: inspect's OpenAI provider needs openai >= 3.4,
rcb-env's verifiers extra pins openai < 3) playing bundled snippets with inspect's ``react``
agent against our scripted OpenAI-compatible server on 127.0.0.1, real bwrap episodes and real
grading. Nothing patches inspect or the SDK."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rcb_agents.testing import Reply, ScriptedModelServer

from rcb_env.task import bundled_root, load

REPO = Path(__file__).resolve().parents[2]
#: one that passes with its reference, one answered wrongly
SNIPPETS = ("adamw-warmup/bias correction", "scaled-attention/stabilise")


@pytest.fixture(scope="session")
def inspect_cli() -> Path:
    """The inspect venv's ``inspect``; skips without it on a developer's machine, FAILS in CI."""
    given = os.environ.get("RCB_INSPECT_BIN")
    path = Path(given) if given else Path(sys.prefix) / "inspect" / "bin" / "inspect"
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the inspect venv (scripts/install.sh) is required in CI: {path}")
        pytest.skip(f"inspect venv not installed: {path}")
    return path


@pytest.mark.slow
def test_inspect_eval_plays_snippets_and_rcb_env_grades_them(
    tmp_path: Path, inspect_cli: Path, require_bwrap: None
) -> None:
    pset = load(bundled_root())
    by_id = {s.id: s for p in pset.papers for s in p.snippets}
    # the task's samples come in the benchmark's order; one sample at a time (--max-samples 1),
    # so the scripted server's replies go to them in that order
    order = [sid for sid in by_id if sid in SNIPPETS]
    good, wrong = SNIPPETS
    script = []
    for sid in order:
        body = by_id[sid].reference_body if sid == good else "    return 0\n"
        script += [Reply(tool_calls=(("submit", {"body": body}),)), Reply(text="Done.")]
    logs = tmp_path / "logs"
    with ScriptedModelServer(script) as server:
        run = subprocess.run(
            [
                str(inspect_cli),
                "eval",
                str(REPO / "rcb_env" / "integrations" / "inspect.py") + "@rcb",
                "--model",
                "openai/gpt-4.1",
                "--model-base-url",
                server.openai_url,
                "-T",
                "snippets=" + ",".join(order),
                "--max-samples",
                "1",
                "--log-dir",
                str(logs),
                "--log-format",
                "json",
                "--display",
                "plain",
            ],
            env={**os.environ, "OPENAI_API_KEY": "test", "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        requests = list(server.requests)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (path,) = logs.glob("*.json")
    from inspect_ai.log import read_eval_log  # 1 s to import: only where it is read

    log = read_eval_log(str(path))
    assert log.status == "success"
    scores = {str(s.id): (s.scores or {})["rcb_scorer"] for s in log.samples or []}
    meta = {sid: score.metadata or {} for sid, score in scores.items()}
    assert set(scores) == set(SNIPPETS)
    assert scores[good].value == 1.0
    assert meta[good]["reward"] == float(by_id[good].weight)
    verdict = meta[good]["verdict"]
    assert verdict["outcome"] == "passed"
    assert verdict["tests"]
    assert all(t["status"] == "passed" for t in verdict["tests"])
    assert scores[wrong].value == 0.0
    assert meta[wrong]["reward"] == 0.0
    assert meta[wrong]["verdict"]["outcome"] == "failed"
    assert any(t["status"] != "passed" for t in meta[wrong]["verdict"]["tests"])
    # the model saw rcb-env's statement and rcb-env's tools through inspect
    assert len(requests) == 4
    first = requests[0][1]
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"read_file", "replace_in_file", "run_tests", "submit"} <= names
    assert "Task: implement one missing block" in str(first["messages"])
    metrics = log.results.scores[0].metrics if log.results else {}
    weights = sum(by_id[s].weight for s in SNIPPETS)
    assert metrics["scaled"].value == pytest.approx(100.0 * by_id[good].weight / weights)
