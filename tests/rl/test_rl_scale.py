"""RL at trainer scale: failures are data (through the real ``trl.GRPOTrainer`` and SkyRL-Gym, on
a sandbox backend registered with ``register_backend`` that fails the creations it is told to),
the episode config the adapters default to, the process-wide shared warm grading, and gradings
of a batch that overlap. Real bwrap sandboxes, real grading; the model is a tiny randomly
initialised Qwen2 built offline (``examples/grpo_tiny.py``)."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from rcb_env import config
from rcb_env.episode.env import EnvConfig
from rcb_env.errors import SandboxError
from rcb_env.grading import GradingConfig
from rcb_env.integrations.pull import COULD_NOT_START, FAILED
from rcb_env.rl import shared
from rcb_env.sandbox import SandboxConfig, register_backend, unregister_backend
from rcb_env.sandbox.backends.bwrap import BwrapBackend
from rcb_env.sandbox.base import Sandbox
from rcb_env.task.models import Paper

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TASK = "adamw-warmup/bias correction"
OTHER = "rmsnorm-swiglu/root mean square"


class FlakyBackend(BwrapBackend):
    """bwrap, except that the creations its class is told to fail raise a sandbox error (a full
    disk, a bad node)."""

    name = "flaky-test"
    plan: ClassVar[list[bool]] = []
    """One entry per coming creation: True fails it (empty: every creation succeeds)."""

    def create(self, template: Path, paper: Paper) -> Sandbox:
        if FlakyBackend.plan and FlakyBackend.plan.pop(0):
            raise SandboxError("could not create the sandbox: no space left on device (test)")
        return super().create(template, paper)


@pytest.fixture(autouse=True, scope="module")
def _flaky_registered() -> Iterator[None]:
    """Registered for this module's tests only: a backend left in the registry would change
    what every later test in the worker sees (the list of backends, their options)."""
    register_backend(FlakyBackend)
    yield
    unregister_backend(FlakyBackend.name)


def _flaky() -> SandboxConfig:
    return SandboxConfig(backend="flaky-test", python=config.task_python())


def _grading() -> GradingConfig:
    return GradingConfig(python=config.task_python(), timeout_s=120)


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grpo_tiny", EXAMPLES / "grpo_tiny.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["grpo_tiny"] = module
    spec.loader.exec_module(module)
    return module


def test_the_example_plays_its_trained_model_on_another_pset(require_bwrap: None) -> None:
    """``examples/grpo_tiny.py``'s evaluation: the model (here untrained) as rcb-env's rollout
    policy on tasks of a pset named by path, each graded as the workspace stands (the tiny
    model writes nothing: 0, scored)."""
    from rcb_env.episode import BudgetConfig, EpisodeConfig
    from rcb_env.task import bundled_root

    example = _example()
    episode = EpisodeConfig(
        env=EnvConfig(paper_in_prompt="outline"),
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=_grading(),
        budgets=BudgetConfig(max_steps=2, max_model_calls=2, max_wall_s=None),
    )
    rewards = example.evaluate(example.tiny_model(), str(bundled_root()), [TASK], episode)
    assert rewards == [(TASK, 0.0)]


def test_grpo_trainer_survives_failed_sandboxes_and_drops_their_groups(
    require_bwrap: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rcb_env.integrations.trl import RcbEnvironment

    made: list[Any] = []
    rewards: list[tuple[str, float | None]] = []

    class Recorded(RcbEnvironment):
        def get_reward(self) -> float | None:
            value = super().get_reward()
            rewards.append((self._session.task_id, value))
            return value

    def factory() -> RcbEnvironment:  # built directly: the process's cohort ("drop")
        env = Recorded(
            sandbox=_flaky(),
            grading=_grading(),
            env=EnvConfig(paper_in_prompt="outline"),
            max_turns=4,
        )
        made.append(env)
        return env

    before = shared.unscored().get("sandbox", 0)
    # TRL probes one instance first (no reset); the step's 4 rollouts: 2 tasks x 2 samples.
    # The first creation of the step fails: its group (2 rollouts of one task) is dropped.
    FlakyBackend.plan = [True]
    caplog.set_level(logging.WARNING)
    history = _example().train(
        tmp_path,
        steps=1,
        task_ids=[TASK, OTHER],
        environment_factory=factory,
        generations=2,
        prompts=2,
    )
    FlakyBackend.plan = []
    assert any("loss" in h for h in history)  # train() ran its step to the end
    sessions = [e._session for e in made if e._session.episode is not None]
    assert len(sessions) == 4
    failed = [s for s in sessions if s.outcome is not None and not s.outcome.scored]
    assert len(failed) == 1
    assert shared.unscored().get("sandbox", 0) == before + 1  # counted once
    # every scored rollout stopped without a tool call: graded as it stands, not "budget_steps"
    reasons = {s.outcome.reason.value for s in sessions if s.outcome and s.outcome.scored}
    assert reasons == {"agent_stopped"}
    # its whole group has no reward; the other group is scored (0: nothing was written)
    lost = failed[0].task_id
    by_task = {s.task_id for s in sessions}
    assert by_task == {TASK, OTHER}
    kept = OTHER if lost == TASK else TASK
    assert sorted(rewards, key=str) == sorted([(lost, None)] * 2 + [(kept, 0.0)] * 2, key=str)
    # the warning TRL prints for a rollout without reward does not quote the prompt
    unscored = [r.getMessage() for r in caplog.records if "returned None" in r.getMessage()]
    assert unscored, [r.getMessage() for r in caplog.records]
    assert all(len(m) < 300 and "Paper" not in m for m in unscored)
    one_line = [r.getMessage() for r in caplog.records if "not scored" in r.getMessage()]
    assert any("no space left on device" in m and "\n" not in m for m in one_line)


def test_trl_environment_failed_start_is_data(require_bwrap: None) -> None:
    from rcb_env.integrations.trl import RcbEnvironment

    env = RcbEnvironment(sandbox=_flaky(), grading=_grading())
    FlakyBackend.plan = [True]
    try:
        text = env.reset(task_id=TASK)
        assert text.startswith(COULD_NOT_START.split("{")[0] + TASK)
        assert "no space left on device" in text
        assert env.read_file("x.py") == FAILED.format(stage="sandbox")
        assert env.get_reward() is None
        # the same environment starts the next task normally, with the outline as its paper
        text = env.reset(task_id=TASK)
        assert "outline only; use read_paper" in text
        assert "Section" in env.read_paper() or env.read_paper()
    finally:
        FlakyBackend.plan = []
        env._close()


def test_skyrl_env_failed_init_is_unscored_and_reads_its_config(require_bwrap: None) -> None:
    import skyrl_gym

    from rcb_env.integrations.skyrl import ENV_ID, register

    register()
    env_config = {
        "pset": None,
        "sandbox": "flaky-test",
        "python": str(config.task_python()),
        "max_turns": 2,
        "grading_timeout_s": 120,
    }
    FlakyBackend.plan = [True]
    before = sum(shared.unscored().values())
    env = skyrl_gym.make(ENV_ID, env_config=env_config, extras={"task_id": TASK})
    try:
        prompt, _meta = env.init([{"role": "system", "content": "solve it"}])  # no raise
        assert "could not start" in prompt[-1]["content"]
        out = env.step('<tool_call>{"name": "list_files", "arguments": {}}</tool_call>')
        assert out["done"]
        assert out["metadata"]["scored"] is False
        assert out["metadata"]["stop_reason"] == "infra_error"
        assert sum(shared.unscored().values()) == before + 1
    finally:
        FlakyBackend.plan = []
        env.close()
    env = skyrl_gym.make(ENV_ID, env_config=env_config, extras={"task_id": TASK})
    try:
        prompt, _meta = env.init([])
        assert "outline only; use read_paper" in prompt[-1]["content"]  # the training default
        assert env.max_turns == 2  # from env_config
        out = env.step("I will not call a tool.")
        out = env.step("Nor now.")
        assert out["done"]
        assert out["metadata"]["scored"] is True
    finally:
        env.close()


def test_many_environments_share_one_warm_process_and_grade_concurrently(
    require_bwrap: None,
) -> None:
    from rcb_env.integrations.trl import environment_factory

    shared.close_shared()  # a fresh process's state
    factory = environment_factory(
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=_grading(),
        on_failure="keep",
    )
    envs = [factory() for _ in range(6)]
    try:
        for env in envs:
            env.reset(task_id=TASK)
        envs[0].submit()  # graded in background from here on
        assert envs[0].list_files() != ""  # answered at once: the episode has ended
        t0 = time.monotonic()
        first = envs[0].get_reward()
        # the first reward of the batch started every other rollout's grading
        assert all(e._session._grading is not None for e in envs)
        rewards = [first] + [e.get_reward() for e in envs[1:]]
        took = time.monotonic() - t0
        assert rewards == [0.0] * 6
        outcomes = [e._session.outcome for e in envs[1:]]
        assert {o.reason.value for o in outcomes if o is not None} == {"agent_stopped"}
        # six environments grading one paper hold one warm process, not six
        assert shared.warm_processes() == 1
        # a second batch: every grading warm
        for env in envs:
            env.reset(task_id=TASK)
        t1 = time.monotonic()
        assert [e.get_reward() for e in envs] == [0.0] * 6
        assert shared.warm_processes() == 1
        assert not math.isnan(took)
        assert time.monotonic() - t1 < took + 30
    finally:
        for env in envs:
            env._close()
        shared.close_shared()


_KILLED_ROLLOUT = """
import asyncio, json, sys, time
from pathlib import Path
from rcb_env import config
from rcb_env.grading import GradingConfig
from rcb_env.rl import PolicyOutput, RolloutConfig, rollout
from rcb_env.rl.ledger import RolloutLedger
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import bundled_root, load

run, marker = Path(sys.argv[1]), Path(sys.argv[2])
paper = load(bundled_root()).paper("adamw-warmup")
snippet = paper.snippet("bias correction")

async def policy(messages, tools):
    if len(messages) > 2:  # the second turn: the first tool call ran; now the process is killed
        marker.write_text("mid-episode")
        time.sleep(600)
    call = {"id": "c0", "type": "function",
            "function": {"name": "list_files", "arguments": "{}"}}
    return PolicyOutput(message={"role": "assistant", "content": None, "tool_calls": [call]})

async def main():
    ledger = RolloutLedger(run)
    cfg = RolloutConfig(grading=GradingConfig(python=config.task_python(), timeout_s=60))
    sb = SandboxConfig(backend="bwrap", python=config.task_python())
    await ledger.run("g1", 0, lambda: rollout(paper, snippet, policy, config=cfg, sandbox=sb,
                                              group_id="g1", sample=0))

asyncio.run(main())
"""


def test_a_killed_rollout_is_recorded_interrupted_run_again_and_counted_once(
    require_bwrap: None, tmp_path: Path
) -> None:
    import asyncio
    import os
    import signal
    import subprocess

    from rcb_env.rl import PolicyOutput, RolloutConfig, rollout
    from rcb_env.rl.export import read_trajectories
    from rcb_env.rl.ledger import RolloutLedger
    from rcb_env.task import bundled_root, load

    run, marker = tmp_path / "run", tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_ROLLOUT, str(run), str(marker)],
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), proc.stderr.read() if proc.stderr else ""
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the process group this test started
        proc.wait()
    assert read_trajectories(run / "trajectories.jsonl") == []  # killed before it finished

    paper = load(bundled_root()).paper("adamw-warmup")
    snippet = paper.snippet("bias correction")
    turns = [
        ("replace_in_file",
         {"path": snippet.file, "old": snippet.todo_body(), "new": snippet.reference_body}),
        ("submit", {}),
    ]  # fmt: skip
    asked: list[int] = []

    async def policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        n = len(asked)
        asked.append(n)
        name, args = turns[min(n, 1)]
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
        # each turn sampled by another version of the weights (asynchronous training)
        return PolicyOutput(
            message={"role": "assistant", "content": None, "tool_calls": [call]},
            weight_version=f"step-{10 + n}",
        )

    cfg = RolloutConfig(grading=_grading(), policy_version="step-9", sampling={"temperature": 0.7})
    sb = SandboxConfig(backend="bwrap", python=config.task_python())

    def again() -> Any:
        return rollout(paper, snippet, policy, config=cfg, sandbox=sb, group_id="g1", sample=0)

    ledger = RolloutLedger(run)
    assert ledger.interrupted == {"g1/s0": 1}
    t = asyncio.run(ledger.run("g1", 0, again))
    ledger.close()
    assert (t.reward, t.interrupted) == (2.0, 1)
    assert [c.weight_version for c in t.calls] == ["step-10", "step-11"]
    assert all(c.sampling == {"temperature": 0.7} for c in t.calls)
    # a third process: the rollout is done, nothing runs, nothing is counted again
    ledger = RolloutLedger(run)
    asked.clear()
    assert asyncio.run(ledger.run("g1", 0, again)) == t
    ledger.close()
    assert asked == []
    assert ledger.interrupted == {"g1/s0": 1}
    assert len(read_trajectories(run / "trajectories.jsonl")) == 1
