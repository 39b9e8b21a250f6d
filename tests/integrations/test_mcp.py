"""Episodes through the MCP server, driven by clients of the official ``mcp`` SDK: over stdio
(``rcb-env mcp serve``), over streamable HTTP (``eval --agent mcp:<command>``), and in process.
The server side is graded, budgeted and recorded as a native episode."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from rcb_env import config, tool_specs
from rcb_env.grading import GradingConfig
from rcb_env.integrations.bridge import ENDED, EpisodeBridge
from rcb_env.results import read_records
from rcb_env.results.records import EpisodeRecord
from rcb_env.runner import BudgetConfig, EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task import Paper, Pset, Snippet, bundled_root, load

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "mcp_scripted_agent.py"
TARGET = ("adamw-warmup", "bias correction")


def _task() -> tuple[Paper, Snippet]:
    paper = load(bundled_root()).paper(TARGET[0])
    return paper, paper.snippet(TARGET[1])


def _only(paper: Paper, snippet: Snippet) -> Pset:
    pset = load(bundled_root())
    return pset.model_copy(update={"papers": (paper.model_copy(update={"snippets": (snippet,)}),)})


def _oracle(snippet: Snippet) -> list[dict[str, Any]]:
    edit = {"path": snippet.file, "old": snippet.todo_body(), "new": snippet.reference_body}
    return [
        {"tool": "read_file", "arguments": {"path": snippet.file}},
        {"tool": "replace_in_file", "arguments": edit},
        {"tool": "submit"},
        {"tool": "list_files"},  # after the end: a clear error
    ]


def _cfg(agent: str, **budgets: Any) -> EvalConfig:
    return EvalConfig(
        agent=agent,
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
        budgets=BudgetConfig(**budgets),
    )


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _command(plan: list[dict[str, Any]], tmp_path: Path, name: str) -> tuple[str, Path]:
    (tmp_path / f"{name}.json").write_text(json.dumps(plan))
    log = tmp_path / f"{name}.jsonl"
    command = f"{sys.executable} {AGENT} --plan {tmp_path / name}.json --log {log}"
    return command, log


def _connected_as_native(event: dict[str, Any], record: EpisodeRecord) -> None:
    """What the client saw on connecting: our tools with their schemas, the statement."""
    specs = {t.name: t.parameters for t in tool_specs()}
    assert event["tools"] == specs
    assert event["resources"] == ["rcb://task"]
    assert event["instructions"] == event["task"] == record.initial_observation
    assert "bias correction" in event["task"]


def test_an_sdk_client_over_stdio_works_an_oracle_episode_to_the_line_weight(
    tmp_path: Path, require_bwrap: None
) -> None:
    _paper, snippet = _task()
    (tmp_path / "plan.json").write_text(json.dumps(_oracle(snippet)))
    log, runs = tmp_path / "seen.jsonl", tmp_path / "runs"
    server = [sys.executable, "-m", "rcb_env", "mcp", "serve", "--paper", TARGET[0],
              "--snippet", TARGET[1], "--sandbox", "bwrap", "--runs-dir", str(runs)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(AGENT), "--plan", str(tmp_path / "plan.json"), "--log", str(log),
         "--stdio", "--", *server],
        capture_output=True, text=True, timeout=180, check=False,
        env={**__import__("os").environ, "RCB_TASK_PYTHON": str(config.task_python())},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = runs.iterdir()
    (record,) = read_records(run / "episodes.jsonl")
    events = _events(log)
    _connected_as_native(events[0], record)
    calls = events[1:]
    assert [c["is_error"] for c in calls] == [False, False, False, True]
    assert "the tests passed" in calls[2]["text"]
    assert calls[3]["text"] == ENDED.format(how="submit")
    assert (record.status, record.passed, record.reward) == ("completed", True, snippet.weight)
    assert [s.action["tool"] for s in record.steps] == ["read_file", "replace_in_file", "submit"]
    assert record.agent["name"] == "mcp"
    assert json.loads((run / "run.json").read_text())["config"]["agent"] == "mcp"


def test_eval_runs_an_external_mcp_agent_per_episode_over_http(
    tmp_path: Path, require_bwrap: None
) -> None:
    """``--agent mcp:<command>``: oracle plan -> the weight, null plan (submit at once) -> 0."""
    paper, snippet = _task()
    oracle, oracle_log = _command(_oracle(snippet), tmp_path, "oracle")
    null, _null_log = _command([{"tool": "submit"}], tmp_path, "null")
    for command, run in ((oracle, "a"), (null, "b")):
        run_eval(_only(paper, snippet), _cfg(f"mcp:{command}"), tmp_path / run)
    (good,) = read_records(tmp_path / "a" / "episodes.jsonl")
    (bad,) = read_records(tmp_path / "b" / "episodes.jsonl")
    assert (good.reward, good.passed) == (snippet.weight, True)
    assert (bad.reward, bad.passed, bad.status) == (0.0, False, "completed")
    _connected_as_native(_events(oracle_log)[0], good)
    assert _events(oracle_log)[-1]["is_error"] is True  # the call after the end
    assert good.agent["command"] == oracle
    assert good.agent["exit_code"] == 0


def test_the_environment_truncates_a_client_past_the_step_budget(
    tmp_path: Path, require_bwrap: None
) -> None:
    paper, snippet = _task()
    command, log = _command([{"tool": "list_files", "repeat": 6}], tmp_path, "loop")
    run_eval(_only(paper, snippet), _cfg(f"mcp:{command}", max_steps=3), tmp_path / "run")
    (record,) = read_records(tmp_path / "run" / "episodes.jsonl")
    assert (record.status, record.reason) == ("truncated", "budget_steps")
    assert len(record.steps) == 3
    calls = _events(log)[1:]
    assert [c["is_error"] for c in calls] == [False] * 3 + [True] * 3
    assert "[budget exhausted: steps]" in calls[2]["text"]
    assert calls[3]["text"] == ENDED.format(how="budget_steps")


def test_a_client_quiet_past_the_wall_budget_is_graded_as_it_stands(
    tmp_path: Path, require_bwrap: None
) -> None:
    paper, snippet = _task()
    edit = {"path": snippet.file, "old": snippet.todo_body(), "new": snippet.reference_body}
    # 8 s leave the client its start (it imports the SDK) and its edit on a busy machine (3 s
    # were too few under a full test run); it wakes 9.5 s after its edit: past the budget, and
    # within the 10 s the server gives a client to see the end, however soon the edit came.
    plan: list[dict[str, Any]] = [
        {"tool": "replace_in_file", "arguments": edit},
        {"sleep": 9.5},
        {"tool": "submit"},
    ]
    command, log = _command(plan, tmp_path, "slow")
    run_eval(_only(paper, snippet), _cfg(f"mcp:{command}", max_wall_s=8.0), tmp_path / "run")
    (record,) = read_records(tmp_path / "run" / "episodes.jsonl")
    # truncated by the wall budget while the client slept; its edit was graded
    assert (record.status, record.reason) == ("truncated", "budget_wall_s")
    assert (record.passed, record.reward) == (True, snippet.weight)
    assert _events(log)[-1] == {
        "event": "call", "tool": "submit", "is_error": True,
        "text": ENDED.format(how="budget_wall_s"),
    }  # fmt: skip


def test_a_client_that_leaves_without_submitting_is_graded_as_it_stands(
    tmp_path: Path, require_bwrap: None
) -> None:
    paper, snippet = _task()
    edit = {"path": snippet.file, "old": snippet.todo_body(), "new": snippet.reference_body}
    command, _log = _command([{"tool": "replace_in_file", "arguments": edit}], tmp_path, "leave")
    run_eval(_only(paper, snippet), _cfg(f"mcp:{command}"), tmp_path / "run")
    (record,) = read_records(tmp_path / "run" / "episodes.jsonl")
    assert (record.passed, record.reward) == (True, snippet.weight)
    assert record.agent["exit_code"] == 0


def test_reward_hack_bodies_submitted_through_the_mcp_server_score_zero(
    require_bwrap: None,
) -> None:
    """One attack of each kind (tests/attacks.py), submitted by an in-process SDK client."""
    import anyio
    from mcp.client.client import Client

    from rcb_env.integrations.mcp_server import build_server
    from rcb_env.runner.eval import run_episode
    from rcb_env.validation.hacks import TARGET
    from tests.attacks import FRONT_DOOR as ATTACKS

    paper = load(bundled_root()).paper(TARGET[0])
    snippet = paper.snippet(TARGET[1])
    cfg = _cfg("mcp").model_copy(
        update={"grading": GradingConfig(python=config.task_python(), timeout_s=20)}
    )
    factory = SandboxFactory(cfg.sandbox)

    async def submit(bridge: EpisodeBridge, body: str) -> str:
        async with Client(build_server(bridge)) as client:
            result = await client.call_tool("submit", {"body": body})
            return "".join(getattr(c, "text", "") for c in result.content)

    def attack(body: str) -> tuple[str, float | None]:
        bridge = EpisodeBridge()
        out: list[EpisodeRecord] = []
        runner = threading.Thread(
            target=lambda: out.append(run_episode(paper, snippet, 0, bridge, cfg, factory, "h"))
        )
        runner.start()
        bridge.ready.wait(60)
        text = anyio.run(submit, bridge, body)
        runner.join(120)
        (record,) = out
        assert "[episode ended: submit]" in text
        return record.status, record.reward

    from concurrent.futures import ThreadPoolExecutor

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:  # two episodes at a time (2 cores)
            scored = dict(zip(ATTACKS, pool.map(attack, ATTACKS.values()), strict=True))
    finally:
        factory.close()
    assert len(scored) == len(ATTACKS)
    assert all(reward == 0.0 for _status, reward in scored.values()), scored


def test_an_external_agents_model_calls_are_recorded_through_the_proxy(
    tmp_path: Path, require_bwrap: None
) -> None:
    """``--agent mcp:<command> --model ...``: the command (another process, its own openai
    client) calls the model through the recording proxy rcb-env puts in front of the endpoint,
    so the record has every call with its tokens."""
    from rcb_agents.models import ModelConfig
    from rcb_agents.testing import Reply, ScriptedModelServer

    paper, snippet = _task()
    edit = {"path": snippet.file, "old": snippet.todo_body(), "new": snippet.reference_body}
    script = [
        Reply(tool_calls=(("replace_in_file", edit),)),
        Reply(tool_calls=(("submit", {}),)),
        Reply(text="done"),
    ]
    command = f"{sys.executable} {ROOT / 'examples' / 'mcp_model_agent.py'}"
    with ScriptedModelServer(script) as server:
        cfg = _cfg(f"mcp:{command}").model_copy(
            update={"model": ModelConfig(spec="openai:scripted", base_url=server.openai_url)
                    .model_dump(mode="json")}
        )  # fmt: skip
        run_eval(_only(paper, snippet), cfg, tmp_path / "run")
        requests = len(server.requests)
    (record,) = read_records(tmp_path / "run" / "episodes.jsonl")
    assert (record.passed, record.reward) == (True, snippet.weight)
    assert requests == 3
    assert len(record.model_calls) == 3
    assert record.tokens == 3 * 120
    assert record.agent["model"] == "openai:scripted"
