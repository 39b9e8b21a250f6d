"""A run's spending ceiling (``--max-run-cost``/``--max-run-tokens``): the tools agent against
the scripted model server on a bundled task (the plain-Python test-strength canary, 2 snippets x
3 samples), stopped at the ceiling, then resumed with higher ones until it finishes; nothing
finished is run again and the totals add up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rcb_agents.testing import Reply, ScriptedModelServer

from rcb_env import config
from rcb_env.cli import cli
from rcb_env.results import read_records
from rcb_env.results.summary import summarize_run
from rcb_env.task import bundled_root, load

SAMPLES = 3
#: One model call per episode (submit what the workspace holds): 100 + 20 tokens, and at
#: gpt-4.1's prices (2 and 8 USD per 1e6) 0.00036 USD.
CALL_TOKENS, CALL_COST = 120, 0.00036


def _eval(url: str, run: Path, *ceiling: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            "--agent",
            "tools",
            "--model",
            "openai:gpt-4.1",
            "--base-url",
            url,
            "--pset",
            str(bundled_root() / "strength-canary"),
            "--samples",
            str(SAMPLES),
            "--sandbox",
            "bwrap",
            "--resume",
            str(run),
            *ceiling,
        ],
        env={"RCB_TASK_PYTHON": str(config.task_python())},
    )
    return result.exit_code, result.output


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_run_stops_at_its_ceiling_and_resumes_with_a_higher_one(
    tmp_path: Path, require_bwrap: None
) -> None:
    episodes = SAMPLES * len(load(bundled_root() / "strength-canary").snippets)
    assert episodes == 6
    run = tmp_path / "run"
    submit = Reply(tool_calls=(("submit", {}),))
    with ScriptedModelServer([submit] * 3 * episodes) as server:
        # 120, 240, 360 tokens: the third episode reaches 300; no fourth starts
        code, output = _eval(server.openai_url, run, "--max-run-tokens", "300")
        assert code == 6, output
        assert "stopped at its ceiling with 3 episode(s) not run" in output
        assert len(read_records(run / "episodes.jsonl")) == 3
        stopped = json.loads((run / "run.json").read_text())["stopped"]
        assert stopped["tokens"] == 3 * CALL_TOKENS
        assert (stopped["pending"], stopped["in_flight"]) == (3, "finished")
        assert stopped["ceiling"] == {"max_cost": None, "max_tokens": 300}
        summary = summarize_run(run)
        assert summary.stopped is not None
        assert summary.stopped.pending == 3
        assert summary.episodes == 3

        # The same ceiling again: already reached, nothing starts.
        code, output = _eval(server.openai_url, run, "--max-run-tokens", "300")
        assert code == 6, output
        assert len(read_records(run / "episodes.jsonl")) == 3

        # A cost ceiling: 0.00108 spent; the 5th episode brings 0.0018 >= 0.0017.
        code, output = _eval(server.openai_url, run, "--max-run-cost", "0.0017")
        assert code == 6, output
        assert len(read_records(run / "episodes.jsonl")) == 5
        assert summarize_run(run).stopped is not None

        # No ceiling: the last one runs, and the run no longer says it stopped.
        code, output = _eval(server.openai_url, run)
        assert code == 0, output
        assert len(server.requests) == episodes  # one model call per episode, none repeated
    records = read_records(run / "episodes.jsonl")
    keys = [(r.snippet_id, r.sample) for r in records]
    assert len(keys) == len(set(keys)) == episodes
    assert sum(r.tokens for r in records) == episodes * CALL_TOKENS
    assert sum(r.cost for r in records) == pytest.approx(episodes * CALL_COST)
    assert "stopped" not in json.loads((run / "run.json").read_text())
    summary = summarize_run(run)
    assert summary.stopped is None
    assert summary.episodes == episodes
