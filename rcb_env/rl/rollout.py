"""Rollouts for RL loops: an async environment, one episode with the caller's policy, groups.

- :class:`AsyncRcbEnv`: ``RcbEnv``'s reset/step/finish/close as coroutines; the blocking sandbox
  and grading work runs in worker threads, so an asyncio trainer's loop never blocks.
- :func:`rollout`: one episode driven by a :class:`~rcb_env.rl.policy.Policy`, returned as a
  typed :class:`~rcb_env.rl.trajectory.Trajectory`. An infrastructure failure is retried in a
  fresh sandbox; when the retries run out the sample has no reward (absent, not 0).
- :func:`rollout_group`: ``k`` samples of one task concurrently from one prepared template, each
  in its own sandbox (``mode="fresh"``), or one sandbox reset between samples with a check that
  the reset workspace is pristine (``mode="reuse"``). A group with an unscored sample is
  incomplete and left out of training by default.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field

from rcb_env._common import Frozen
from rcb_env.episode.env import EnvConfig, RcbEnv
from rcb_env.episode.outcome import EpisodeOutcome, StopReason
from rcb_env.errors import InfraError, InfrastructureError, infra_error
from rcb_env.grading.grader import GradingConfig
from rcb_env.rl.policy import ContextLengthError, Policy, PolicyOutput
from rcb_env.rl.trajectory import (
    ModelTurn,
    RolloutStop,
    Timings,
    Trajectory,
    TrajectoryStep,
    token_views,
)
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task.models import Paper, Snippet
from rcb_env.tools.actions import tool_specs

T = TypeVar("T")

SYSTEM = (
    "You are a careful research engineer working in a sandboxed copy of a paper's repository. "
    "Code has been removed from one place and must be written back. Use the tools to read the "
    "paper and the code, implement it, run the tests if useful, and call submit when you are "
    "done. Work only through tool calls."
)
NUDGE = "Continue with a tool call; call submit when you are done."


def openai_tools() -> list[dict[str, Any]]:
    """The episode's tools as OpenAI function-tool schemas."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tool_specs()
    ]


class AsyncRcbEnv:
    """:class:`RcbEnv` for asyncio: same semantics, blocking work off the event loop."""

    def __init__(self, env: RcbEnv, executor: Executor | None = None) -> None:
        self.env = env
        self.executor = executor
        """Threads for the blocking work (None: asyncio's default pool, about cores + 4 threads;
        a group passes one thread per sample so that none waits for a thread)."""
        self.ready: tuple[str, dict[str, Any]] | None = None
        """A reset already done (by a group's pristine check): the next rollout starts there."""

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def reset(self, **kwargs: Any) -> tuple[str, dict[str, Any]]:
        return await self._run(functools.partial(self.env.reset, **kwargs))

    async def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return await self._run(functools.partial(self.env.step, action))

    async def finish(
        self, reason: StopReason = StopReason.SUBMIT
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return await self._run(functools.partial(self.env.finish, None, reason=reason))

    async def close(self) -> None:
        await self._run(self.env.close)


class RolloutConfig(Frozen):
    max_turns: int = 30
    """Model calls per attempt; reaching it grades the workspace as it stands (``max_turns``)."""
    max_wall_s: float | None = None
    """Seconds per attempt; reaching it grades the workspace as it stands (``timeout``)."""
    retries: int = 1
    """Fresh-sandbox attempts after an infrastructure failure (0: none)."""
    env: EnvConfig = EnvConfig()
    grading: GradingConfig = GradingConfig()
    policy_version: str | None = None


class _Attempt(Frozen):
    messages: list[dict[str, Any]]
    steps: list[TrajectoryStep]
    calls: list[ModelTurn]
    stop: RolloutStop
    outcome: EpisodeOutcome | None
    error: InfraError | None
    timings: Timings


def _action_of(call: dict[str, Any]) -> tuple[str, dict[str, Any] | str]:
    fn = call.get("function") or {}
    name = str(fn.get("name", ""))
    raw = fn.get("arguments") or "{}"
    try:
        args = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (json.JSONDecodeError, TypeError, ValueError):
        return name, str(raw)
    return name, args if isinstance(args, dict) else str(raw)


async def _attempt(
    env: AsyncRcbEnv,
    policy: Policy,
    cfg: RolloutConfig,
    tools: list[dict[str, Any]],
    episode_id: str,
) -> _Attempt:
    messages: list[dict[str, Any]] = []
    steps: list[TrajectoryStep] = []
    calls: list[ModelTurn] = []
    t = {"setup": 0.0, "model": 0.0, "env": 0.0, "grading": 0.0}
    start = time.monotonic()
    stop: RolloutStop = "max_turns"
    ended = False
    info: dict[str, Any] = {}
    try:
        t0 = time.monotonic()
        if env.ready is not None:
            (obs, info), env.ready = env.ready, None
        else:
            obs, info = await env.reset(options={"episode_id": episode_id})
        t["setup"] = time.monotonic() - t0
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": obs}]
        for _turn in range(cfg.max_turns):
            if cfg.max_wall_s is not None and time.monotonic() - start >= cfg.max_wall_s:
                stop = "timeout"
                break
            t0 = time.monotonic()
            try:
                out: PolicyOutput = await policy(messages, tools)
            except ContextLengthError:
                stop = "context_length"
                break
            latency = time.monotonic() - t0
            t["model"] += latency
            calls.append(
                ModelTurn(
                    prompt_ids=out.prompt_ids,
                    completion_ids=out.completion_ids,
                    logprobs=out.logprobs,
                    finish_reason=out.finish_reason,
                    weight_version=out.weight_version or cfg.policy_version,
                    input_tokens=out.input_tokens,
                    output_tokens=out.output_tokens,
                    latency_s=round(latency, 4),
                )
            )
            message = {k: v for k, v in out.message.items() if v is not None}
            message["role"] = "assistant"
            messages.append(message)
            tool_calls = list(out.message.get("tool_calls") or [])
            if not tool_calls:
                if out.finish_reason == "length":
                    stop = "max_tokens"
                    break
                messages.append({"role": "user", "content": NUDGE})
                continue
            for call in tool_calls:
                name, args = _action_of(call)
                action: Any = {"tool": name, **args} if isinstance(args, dict) else args
                t0 = time.monotonic()
                obs, _reward, terminated, truncated, info = await env.step(action)
                took = time.monotonic() - t0
                if name == "submit":
                    t["grading"] += took
                else:
                    t["env"] += took
                steps.append(
                    TrajectoryStep(
                        index=len(steps) + 1,
                        action={"tool": name, "arguments": args},
                        observation=obs,
                        tool_ok=bool(info.get("tool_ok", not info.get("action_error", False))),
                        env_s=round(took, 4),
                        call=len(calls) - 1,
                    )
                )
                messages.append(
                    {"role": "tool", "tool_call_id": str(call.get("id", "")), "content": obs}
                )
                if terminated or truncated:
                    ended = True
                    stop = "submit" if terminated else "infra_error"
                    break
            if ended:
                break
        if not ended:
            t0 = time.monotonic()
            reason = StopReason.BUDGET_WALL_S if stop == "timeout" else StopReason.BUDGET_STEPS
            await env.finish(reason)
            t["grading"] += time.monotonic() - t0
        outcome = env.env.outcome
        error = outcome.infra_error if outcome is not None else None
        if error is not None:
            stop = "infra_error"
    except Exception as exc:  # the one boundary: an infrastructure failure is recorded
        error = infra_error(exc, "sandbox")
        if error is None:
            raise
        outcome, stop = None, "infra_error"
    timings = Timings(
        setup_s=round(t["setup"], 4),
        model_s=round(t["model"], 4),
        env_s=round(t["env"], 4),
        grading_s=round(t["grading"], 4),
        total_s=round(time.monotonic() - start, 4),
    )
    return _Attempt(
        messages=messages,
        steps=steps,
        calls=calls,
        stop=stop,
        outcome=outcome,
        error=error,
        timings=timings,
    )


async def rollout(
    paper: Paper,
    snippet: Snippet,
    policy: Policy,
    *,
    config: RolloutConfig | None = None,
    factory: SandboxFactory | None = None,
    sandbox: SandboxConfig | None = None,
    group_id: str | None = None,
    sample: int = 0,
    env_maker: Callable[[], Awaitable[AsyncRcbEnv]] | None = None,
    executor: Executor | None = None,
) -> Trajectory:
    """One episode of ``snippet`` driven by ``policy``. Infrastructure failures are retried in a
    fresh sandbox (``config.retries``); when none succeeds, the trajectory has no reward.

    ``factory`` (shared by a group: one template) or ``sandbox`` (a factory of its own) says
    where the sandboxes come from; ``env_maker`` overrides both (``rollout_group``'s reuse mode).
    """
    cfg = config or RolloutConfig()
    tools = openai_tools()
    own = factory is None and env_maker is None
    fac = factory or (SandboxFactory(sandbox) if env_maker is None else None)
    errors: list[InfraError] = []
    group = group_id or f"{snippet.slug[:32]}-{secrets.token_hex(4)}"
    attempt: _Attempt | None = None
    try:
        for n in range(cfg.retries + 1):
            if env_maker is not None:
                env = await env_maker()
                close = False
            else:
                assert fac is not None
                env = AsyncRcbEnv(
                    RcbEnv(paper, snippet, cfg.env, grading_config=cfg.grading, factory=fac),
                    executor,
                )
                close = True
            try:
                attempt = await _attempt(env, policy, cfg, tools, f"{group}-s{sample}-a{n}")
            finally:
                if close:
                    await env.close()
            if attempt.error is None:
                break
            errors.append(attempt.error)
    finally:
        if own and fac is not None:
            await asyncio.to_thread(fac.close)
    assert attempt is not None
    outcome = attempt.outcome
    scored = attempt.error is None and outcome is not None
    tokens, flat = token_views(attempt.calls)
    status: Literal["completed", "truncated", "infra_error"] = (
        "infra_error" if not scored else ("completed" if attempt.stop == "submit" else "truncated")
    )
    return Trajectory(
        task_id=snippet.id,
        paper_id=paper.id,
        group_id=group,
        sample=sample,
        weight=snippet.weight,
        policy_version=cfg.policy_version,
        messages=attempt.messages,
        tools=tools,
        steps=attempt.steps,
        calls=attempt.calls,
        status=status,
        stop_reason=attempt.stop,
        reward=outcome.reward if scored and outcome is not None else None,
        passed=outcome.passed if scored and outcome is not None else None,
        attempts=len(errors) + (1 if scored else 0),
        errors=errors,
        timings=attempt.timings,
        tokens=tokens,
        flat=flat,
    )


class Group(Frozen):
    """``k`` samples of one task drawn together."""

    group_id: str
    task_id: str
    trajectories: list[Trajectory]
    mode: Literal["fresh", "reuse"]
    templates_prepared: int
    """How many times the task's masked template was prepared for this group (1)."""
    pristine_checks: list[bool] = Field(default_factory=list)
    """Reuse mode: for each sample, whether the reset workspace matched the template."""

    @property
    def complete(self) -> bool:
        """Every sample has a reward: only complete groups go into training by default."""
        return all(t.scored for t in self.trajectories)

    def advantages(self) -> list[float | None]:
        """Group-relative advantages (reward minus the mean of the scored samples); None for
        unscored samples, which are left out of the baseline."""
        scored = [t.reward for t in self.trajectories if t.reward is not None]
        if not scored:
            return [None] * len(self.trajectories)
        mean = sum(scored) / len(scored)
        return [None if t.reward is None else t.reward - mean for t in self.trajectories]


def tree_digest(root: Path) -> str:
    """SHA-256 over a folder's files (paths and bytes), to check a reset workspace."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name == ".rcb-template-complete":
                continue
            path = Path(dirpath) / name
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


async def rollout_group(
    paper: Paper,
    snippet: Snippet,
    policy: Policy,
    k: int,
    *,
    config: RolloutConfig | None = None,
    sandbox: SandboxConfig | None = None,
    factory: SandboxFactory | None = None,
    mode: Literal["fresh", "reuse"] = "fresh",
    group_id: str | None = None,
) -> Group:
    """``k`` samples of ``snippet``: concurrently, each in its own sandbox from one template
    (``fresh``), or one after another in one sandbox reset between samples (``reuse``), each
    reset checked against the template."""
    cfg = config or RolloutConfig()
    group = group_id or f"{snippet.slug[:32]}-{secrets.token_hex(4)}"
    fac = factory or SandboxFactory(sandbox)
    before = fac.preparations
    checks: list[bool] = []
    pool = ThreadPoolExecutor(max_workers=max(1, k), thread_name_prefix="rcb-group")
    try:
        if mode == "fresh":
            results = await asyncio.gather(
                *(
                    rollout(
                        paper,
                        snippet,
                        policy,
                        config=cfg,
                        factory=fac,
                        group_id=group,
                        sample=i,
                        executor=pool,
                    )
                    for i in range(k)
                ),
                return_exceptions=True,  # every sample finishes before anything is raised
            )
            for r in results:
                if isinstance(r, BaseException):
                    raise r
            trajectories = [r for r in results if isinstance(r, Trajectory)]
        else:
            shared = AsyncRcbEnv(
                RcbEnv(paper, snippet, cfg.env, grading_config=cfg.grading, factory=fac), pool
            )
            expected = await asyncio.to_thread(tree_digest, fac.template(paper, snippet))

            async def checked() -> AsyncRcbEnv:
                # Each sample starts from a reset of the one sandbox: check it is pristine.
                shared.ready = await shared.reset(options={"episode_id": f"{group}-reset"})
                sb = shared.env.sandbox
                assert sb is not None
                got = await asyncio.to_thread(tree_digest, sb.workspace)
                checks.append(got == expected)
                if got != expected:
                    raise RuntimeError("the reset workspace differs from the template")
                return shared

            trajectories = []
            try:
                for i in range(k):
                    trajectories.append(
                        await rollout(
                            paper,
                            snippet,
                            policy,
                            config=cfg,
                            group_id=group,
                            sample=i,
                            env_maker=checked,
                        )
                    )
            finally:
                await shared.close()
    finally:
        if factory is None:
            await asyncio.to_thread(fac.close)
        pool.shutdown(wait=True)
    return Group(
        group_id=group,
        task_id=snippet.id,
        trajectories=trajectories,
        mode=mode,
        templates_prepared=fac.preparations - before,
        pristine_checks=checks,
    )


__all__ = [
    "SYSTEM",
    "AsyncRcbEnv",
    "Group",
    "InfrastructureError",
    "RolloutConfig",
    "openai_tools",
    "rollout",
    "rollout_group",
    "tree_digest",
]
