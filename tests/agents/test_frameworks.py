"""Agent frameworks working rcb-env episodes with their own loops (mini-swe-agent, the OpenAI
Agents SDK, smolagents), each the real package from PyPI driving the scripted model server
through the framework's own model client: the oracle's moves score the line weight, a wrong
answer 0, the environment's step budget truncates a framework that runs past it, every model
call is recorded with its tokens, and ``compare`` puts them beside the native tools agent."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from rcb_agents.models import ModelConfig
from rcb_agents.testing import Fault, Reply, ScriptedModelServer

from rcb_env import config
from rcb_env.grading import GradingConfig
from rcb_env.results import read_records
from rcb_env.results.compare import compare
from rcb_env.results.records import EpisodeRecord
from rcb_env.runner import BudgetConfig, EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import Pset, Snippet, bundled_root, load
from rcb_env.task.selection import select_snippets

pytestmark = pytest.mark.slow

FRAMEWORKS = ("mini-swe-agent", "openai-agents", "smolagents")
TASK = "adamw-warmup/bias correction"


def _tasks() -> Pset:
    return select_snippets(load(bundled_root()), (TASK,))


def _snippet() -> Snippet:
    return _tasks().snippets[0]


def _call(framework: str, tool: str, args: dict[str, Any]) -> Reply:
    """One model turn calling one of the episode's tools, as that framework's agent sees them:
    mini-swe-agent has only its bash tool (a shell command, or its submit command)."""
    if framework != "mini-swe-agent":
        return Reply(text=f"calling {tool}", tool_calls=((tool, args),))
    if tool == "submit":
        command = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    elif tool == "replace_in_file":
        code = (
            f"import pathlib; p = pathlib.Path({args['path']!r}); "
            f"p.write_text(p.read_text().replace({args['old']!r}, {args['new']!r}))"
        )
        command = f"python -c {shlex.quote(code)}"
    else:
        command = "ls"
    return Reply(text=f"running {tool}", tool_calls=(("bash", {"command": command}),))


def _closing(framework: str) -> list[Reply]:
    """What the model says once the episode is over: the Agents SDK asks once more (the model
    answers in text and its run ends); mini-swe-agent stops at its submit command and
    smolagents is stopped by the adapter, so neither asks again."""
    return [Reply(text="done")] if framework == "openai-agents" else []


def _oracle(framework: str) -> list[Reply]:
    s = _snippet()
    edit = {"path": s.file, "old": s.todo_body(), "new": s.reference_body}
    return [
        _call(framework, "replace_in_file", edit),
        _call(framework, "submit", {}),
        *_closing(framework),
    ]


def _cfg(agent: str, url: str, **budgets: Any) -> EvalConfig:
    return EvalConfig(
        agent=agent,
        model=ModelConfig(spec="openai:scripted", base_url=url),
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
        budgets=BudgetConfig(max_steps=budgets.get("max_steps", 50)),
    )


def _run(
    agent: str, script: Sequence[Reply | Fault], run: Path, **budgets: Any
) -> tuple[EpisodeRecord, int]:
    with ScriptedModelServer(script) as server:
        run_eval(_tasks(), _cfg(agent, server.openai_url, **budgets), run, infra_retries=0)
        requests = len(server.requests)
    (record,) = read_records(run / "episodes.jsonl")
    return record, requests


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_framework_scores_the_weight_with_the_oracles_moves_and_zero_with_a_wrong_answer(
    framework: str, tmp_path: Path, require_bwrap: None
) -> None:
    weight = _snippet().weight
    good, requests = _run(framework, _oracle(framework), tmp_path / "good")
    assert (good.status, good.passed, good.reward) == ("completed", True, float(weight))
    assert good.agent["framework"] == framework
    assert good.agent["version"]  # the installed release, in the record
    assert good.agent["error"] is None
    # every model call the framework made went through the recording proxy, with its tokens
    calls = len(_oracle(framework))
    assert len(good.model_calls) == requests == calls
    assert sum(c["usage"]["input_tokens"] + c["usage"]["output_tokens"]
               for c in good.model_calls) == good.tokens == calls * 120  # fmt: skip
    assert [c["step"] for c in good.model_calls][:2] == [1, 2]  # linked to the steps they made
    wrong, _ = _run(framework, [_call(framework, "submit", {}), *_closing(framework)],
                    tmp_path / "wrong")  # fmt: skip
    assert (wrong.status, wrong.passed, wrong.reward) == ("completed", False, 0.0)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_environment_truncates_a_framework_past_the_step_budget(
    framework: str, tmp_path: Path, require_bwrap: None
) -> None:
    script = [_call(framework, "list_files", {}) for _ in range(6)] + _closing(framework)
    record, _ = _run(framework, script, tmp_path / "run", max_steps=3)
    assert (record.status, record.reason) == ("truncated", "budget_steps")
    assert len(record.steps) == 3


def test_compare_puts_the_frameworks_beside_the_native_tools_agent(
    tmp_path: Path, require_bwrap: None
) -> None:
    from click.testing import CliRunner

    from rcb_env.cli import cli

    runs = []
    for agent in ("tools", *FRAMEWORKS):
        script = _oracle("openai-agents" if agent == "tools" else agent)
        _run(agent, script, tmp_path / agent)
        runs.append(tmp_path / agent)
    rows = compare(runs)  # same snippets, same budgets: comparable without --force
    assert [r.agent for r in rows] == [f"{a} (openai:scripted)" for a in ("tools", *FRAMEWORKS)]
    assert all(r.summary.overall is not None and r.summary.overall.scaled == 100.0 for r in rows)
    assert all(r.tokens > 0 for r in rows)
    result = CliRunner().invoke(cli, ["compare", *map(str, runs)])
    assert result.exit_code == 0, result.output
    for name in FRAMEWORKS:
        assert name in result.output


def test_a_framework_stopped_by_a_failing_model_endpoint_is_not_scored(
    tmp_path: Path, require_bwrap: None
) -> None:
    """The endpoint answers 500 (the SDK's own retries off): the framework fails, the proxy saw
    the endpoint fail, and the episode is an infrastructure error, never a reward of 0."""
    record, _ = _run("openai-agents", [Fault(status=500)] * 3, tmp_path / "run")
    assert record.status == "infra_error"
    assert record.infra_error is not None
    assert "model endpoint failed" in record.infra_error.message
    assert record.model_calls
    assert record.model_calls[0]["error"] == "HTTP 500"
