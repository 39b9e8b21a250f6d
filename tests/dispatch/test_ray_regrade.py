"""A regrading's gradings as Ray jobs (local mode, real Ray processes) give the verdicts a
regrading here gives; a run that reaches its spending ceiling hands no further job to Ray.
The module starts its own Ray and shuts it down (never `ray stop`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from rcb_agents.models import ModelConfig, RetryPolicy
from rcb_agents.testing import Reply, ScriptedModelServer

from rcb_env import config
from rcb_env.dispatch.ray import connect, disconnect
from rcb_env.grading import GradingConfig
from rcb_env.results import read_records
from rcb_env.results.records import final_records
from rcb_env.results.regrade import verdict_changes
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.runner.dispatchers import OnRay
from rcb_env.runner.eval import RunCeiling
from rcb_env.runner.regrade import regrade_run, stored_run
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import bundled_root, load

pytestmark = [pytest.mark.slow, pytest.mark.bwrap]


@pytest.fixture(scope="module")
def one_slot() -> Iterator[None]:
    """One local Ray with one sandbox slot for the module's tests (each run joins it)."""
    own = connect("local", jobs=1)
    try:
        yield
    finally:
        disconnect(own)


def _cfg(agent: str) -> EvalConfig:
    return EvalConfig(
        agent=agent,
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
    )


def test_a_regrading_on_ray_gives_the_verdicts_of_one_here(
    tmp_path: Path, require_bwrap: None, one_slot: None
) -> None:
    pset = load(bundled_root() / "strength-canary")
    old = tmp_path / "old"
    run_eval(pset, _cfg("oracle"), old)
    sandbox = _cfg("oracle").sandbox
    regrade_run(stored_run(old), pset, tmp_path / "here", sandbox=sandbox)
    regrade_run(stored_run(old), pset, tmp_path / "ray", sandbox=sandbox, ray="local")
    assert ray.is_initialized()  # the module's Ray, joined, not shut down

    def verdicts(run: Path) -> dict[tuple[str, int], bool | None]:
        records = final_records(read_records(run / "episodes.jsonl"))
        return {k: r.passed for k, r in records.items()}

    assert verdicts(tmp_path / "ray") == verdicts(tmp_path / "here") == verdicts(old)
    assert len(verdicts(old)) == 2
    assert verdict_changes(tmp_path / "ray").unchanged == 2


def test_a_run_at_its_ceiling_hands_no_further_job_to_ray(
    tmp_path: Path, require_bwrap: None, one_slot: None
) -> None:
    pset = load(bundled_root() / "strength-canary")
    run = tmp_path / "run"
    submit = Reply(tool_calls=(("submit", {}),))  # one call of 120 tokens per episode
    with ScriptedModelServer([submit] * 4) as server:
        cfg = _cfg("tools").model_copy(
            update={"model": ModelConfig(spec="openai:gpt-4.1", base_url=server.openai_url,
                                         retry=RetryPolicy(attempts=1, scale=0)).model_dump()}
        )  # fmt: skip
        # one sandbox slot: the second job waits for the first, whose 120 tokens reach 100
        run_eval(pset, cfg, run, dispatcher=OnRay("local", jobs=1),
                 ceiling=RunCeiling(max_tokens=100))  # fmt: skip
    assert len(read_records(run / "episodes.jsonl")) == 1
    stopped = json.loads((run / "run.json").read_text())["stopped"]
    assert (stopped["pending"], stopped["tokens"]) == (1, 120)
