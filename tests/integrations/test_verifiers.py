"""rcb-env through verifiers' own eval path: its ``run_eval`` loads the taskset package
``rcb_verifiers`` by id, runs each rollout in its ``null`` harness (its in-house chat program,
in a subprocess runtime) against the scripted model server through its interception proxy; the
harness works the episode through rcb-env's MCP server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from rcb_agents.testing import Reply, ScriptedModelServer

from rcb_env import config
from rcb_env.results import read_records
from rcb_env.task import bundled_root, load

pytestmark = pytest.mark.slow

TARGET = ("adamw-warmup", "bias correction")


@pytest.fixture
def offline_harness(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """verifiers' harness program prepared from the wheels the install downloaded, with uv
    from this venv; every connection but loopback goes to a dead proxy, so a download fails."""
    from rcb_env.integrations.verifiers import offline_harness_env  # imports verifiers: seconds

    wheels = config.rcb_home() / "wheels" / "verifiers-harness"
    if not (wheels / ".rcb-stamp").exists():
        pytest.fail(f"{wheels} is missing: run scripts/install.sh")
    for key, value in offline_harness_env(wheels).items():
        monkeypatch.setenv(key, value)
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(proxy, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SCRIPTED_KEY", "unused")
    monkeypatch.chdir(tmp_path)  # verifiers writes its outputs/ under the working folder


def _eval(url: str, tmp_path: Path, records: Path, **taskset: Any) -> list[Any]:
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    cfg = EvalConfig.model_validate(
        {
            "env": {
                "taskset": {
                    "id": "rcb_verifiers",
                    "sandbox": "bwrap",
                    "task_python": str(config.task_python()),
                    "grading_timeout_s": 60,
                    "records": str(records),
                    **taskset,
                },
                "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}},
            },
            "model": "scripted",
            "client": {"base_url": url, "api_key_var": "SCRIPTED_KEY"},
            "push": False,
            "rich": None,
            "output_dir": str(tmp_path / "outputs"),
            "max_concurrent": 1,
        }
    )
    episodes: list[Any] = asyncio.run(run_eval(cfg))
    return episodes


def test_verifiers_eval_path_scores_the_oracle_to_the_weight_and_the_null_to_zero(
    offline_harness: None, tmp_path: Path, require_bwrap: None
) -> None:
    snippet = load(bundled_root()).paper(TARGET[0]).snippet(TARGET[1])
    edit = {"path": snippet.file, "old": snippet.todo_body(), "new": snippet.reference_body}
    # the harness names each tool after its server: rcb_<tool>
    oracle = [
        Reply(tool_calls=(("rcb_replace_in_file", edit),)),
        Reply(tool_calls=(("rcb_submit", {}),)),
        Reply(text="done"),
    ]
    null = [Reply(tool_calls=(("rcb_submit", {}),)), Reply(text="done")]
    rewards: dict[str, list[Any]] = {}
    for name, script in (("oracle", oracle), ("null", null)):
        with ScriptedModelServer(script) as server:
            episodes = _eval(server.openai_url, tmp_path / name, tmp_path / name / "records",
                             snippets=[snippet.id])  # fmt: skip
            tools = [t["function"]["name"] for t in server.requests[0][1]["tools"]]
        assert len(episodes) == 1
        (trace,) = episodes[0].traces
        assert not trace.errors, trace.errors
        rewards[name] = [trace.rewards["rcb_reward"].score, trace.metrics["passed"]]
        assert trace.info["rcb"]["weight"] == snippet.weight
        (record,) = read_records(tmp_path / name / "records" / "episodes.jsonl")
        assert record.reward == rewards[name][0]
        assert record.agent["client"] == "verifiers"
        assert "the tests" in record.steps[-1].observation
    assert rewards == {"oracle": [float(snippet.weight), 1.0], "null": [0.0, 0.0]}
    assert sorted(tools) == sorted(f"rcb_{t}" for t in (
        "list_files", "read_file", "search", "replace_in_file", "write_file", "run_command",
        "run_tests", "read_paper", "submit"))  # fmt: skip


def test_the_taskset_yields_every_runnable_snippet_keyed_by_id(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rcb_env.integrations.verifiers import RcbTaskset, RcbTasksetConfig

    monkeypatch.delenv("RCB_PUBLISHED_RESULTS", raising=False)
    tasks = list(RcbTaskset(RcbTasksetConfig(id="rcb_verifiers")))
    snippets = load(bundled_root()).snippets
    assert [t.key for t in tasks] == [s.id for s in snippets]
    assert [t.data.weight for t in tasks] == [s.weight for s in snippets]
    assert [t.data.depth for t in tasks] == [s.depth for s in snippets]
    assert [t.data.idx for t in tasks] == list(range(len(snippets)))
    assert {t.data.solve_rate for t in tasks} == {None}
    # with the paper's results file: each task's published solve rate, for curricula
    first = snippets[0]
    paper, name = first.id.split("/", 1)
    samples = [{"passed": p, "snippet_code_line_count": first.weight} for p in (True, False)]
    stats = tmp_path / "overall_stats.json"
    stats.write_text(json.dumps({"results": {paper: {"results": {
        "M": {"results": {name: samples}}}}}}))  # fmt: skip
    rated = list(RcbTaskset(RcbTasksetConfig(id="rcb_verifiers", published=str(stats))))
    assert rated[0].data.solve_rate == 0.5
    assert {t.data.solve_rate for t in rated[1:]} == {None}


def test_an_unstartable_sandbox_is_a_failed_verifiers_episode_never_a_zero(
    offline_harness: None, tmp_path: Path
) -> None:
    """Through verifiers' own eval path, on a backend (registered here) whose sandboxes cannot
    be created: verifiers gets a failed episode with an error and no reward (never a 0), and
    the record is an infrastructure one."""
    from rcb_env.sandbox.backend import register_backend
    from tests.episode.test_driver import _Unstartable

    register_backend(_Unstartable)
    snippet = load(bundled_root()).paper(TARGET[0]).snippet(TARGET[1])
    with ScriptedModelServer([Reply(tool_calls=(("rcb_submit", {}),)), Reply(text="done")]) as s:
        episodes = _eval(s.openai_url, tmp_path, tmp_path / "records", snippets=[snippet.id],
                         sandbox=_Unstartable.name)  # fmt: skip
    (episode,) = episodes
    assert not episode.ok  # verifiers' failed episode: retried or left out, never scored 0
    assert any("could not be scored" in e.message for e in episode.errors), episode.errors
    assert not any("rcb_reward" in t.rewards for t in getattr(episode, "traces", []))
    (record,) = read_records(tmp_path / "records" / "episodes.jsonl")
    assert record.status == "infra_error"
    assert record.infra_error is not None
    assert record.infra_error.stage == "sandbox"
