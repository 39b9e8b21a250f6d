"""Trajectories: what an RL trainer takes from an episode (versioned, JSON-serialisable).

Per step: the action, the observation, whether the tool succeeded, the time the environment took,
and the model call whose answer it was (prompt and completion token ids, per-token logprobs,
finish reason, weight version, when the server gave them). At the end: reward (None when the
sample failed for infrastructure reasons: absent, never 0), passed, line weight, status, stop
reason, attempts, timings, the group it belongs to.

Token views. Re-tokenizing message text is the classic RL bug (chat templates are not
append-only), so rcb-env never does it: :attr:`Trajectory.turns` holds each model call's own
prompt and completion ids as the server returned them, and :attr:`Trajectory.flat` (one sequence
with a loss mask: 1 on model tokens, 0 on prompt and tool tokens) exists only when every turn's
prompt extends the previous turn's prompt plus completion, token for token.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rcb_env.episode.outcome import EpisodeStatus, StopReason
from rcb_env.errors import InfraError
from rcb_env.frozen import Frozen

SCHEMA = "rcb-env/trajectory/2"
"""Version 2: ``stop_reason`` is a :class:`~rcb_env.episode.outcome.StopReason`. A version 1
trajectory (``max_turns``, ``max_tokens``, ``timeout``) is read as version 2."""
OLD_SCHEMA = "rcb-env/trajectory/1"

#: Version 1's stop reasons that version 2 names as the episode's other stop reasons do.
OLD_STOPS: dict[str, StopReason] = {
    "max_turns": StopReason.BUDGET_MODEL_CALLS,
    "max_tokens": StopReason.BUDGET_OUTPUT_TOKENS,
    "timeout": StopReason.BUDGET_WALL_S,
}
TokenCoverage = Literal["full", "partial", "none"]


class ModelTurn(Frozen):
    """One model call as the trainer needs it."""

    prompt_ids: tuple[int, ...] | None = None
    """The exact prompt tokens the server saw (None: the server did not return them)."""
    completion_ids: tuple[int, ...] | None = None
    """The sampled tokens."""
    logprobs: tuple[float, ...] | None = None
    """One per completion token."""
    finish_reason: str | None = None
    weight_version: str | None = None
    """The policy version that sampled it (for asynchronous training)."""
    sampling: dict[str, Any] | None = None
    """The sampling settings it was drawn with (temperature, top_p...)."""
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0

    @property
    def has_tokens(self) -> bool:
        return self.prompt_ids is not None and self.completion_ids is not None


class TrajectoryStep(Frozen):
    index: int
    """1-based step number."""
    action: Any
    """The action as the model gave it (JSON-able)."""
    observation: str
    tool_ok: bool
    """The tool ran without an error (an invalid call or a failed command is False)."""
    env_s: float
    """Seconds the environment took (sandbox, grading at submit)."""
    call: int | None = None
    """Index in :attr:`Trajectory.calls` of the model call whose answer this step was."""


class Timings(Frozen):
    setup_s: float = 0.0
    """Sandbox creation and reset."""
    model_s: float = 0.0
    env_s: float = 0.0
    """Tool steps in the sandbox (grading excluded)."""
    grading_s: float = 0.0
    total_s: float = 0.0


class FlatTokens(Frozen):
    """The whole conversation as one token sequence (only when turns extend each other)."""

    ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    """1 on tokens the model sampled, 0 on prompt, tool and other environment tokens."""
    logprobs: tuple[float, ...]
    """The sampling logprob of model tokens, 0.0 elsewhere."""


class Trajectory(Frozen):
    schema_version: str = SCHEMA
    task_id: str
    """``<paper>/<snippet>``."""
    paper_id: str
    group_id: str
    """Samples of the same task drawn together share it (group-relative advantages)."""
    sample: int
    weight: int
    """The snippet's line weight (the reward of a pass when rewards are line-weighted)."""
    policy_version: str | None = None
    messages: list[dict[str, Any]]
    """The conversation in OpenAI chat format, as sent (system, user, assistant with tool calls,
    tool results)."""
    tools: list[dict[str, Any]]
    """The tool schemas as sent."""
    steps: list[TrajectoryStep] = Field(default_factory=list)
    calls: list[ModelTurn] = Field(default_factory=list)
    status: EpisodeStatus
    """completed (submitted), truncated (a limit ended it) or infra_error (no reward)."""
    stop_reason: StopReason
    """Why it ended: ``submit``, ``budget_model_calls``, ``budget_output_tokens``,
    ``budget_wall_s``, ``context_length`` or ``infra_error``."""
    reward: float | None
    """None when the sample failed for infrastructure reasons on every attempt (not 0)."""
    passed: bool | None
    attempts: int = 1
    """Tries this sample took (an infrastructure failure is retried in a fresh sandbox)."""
    interrupted: int = 0
    """Earlier runs of this sample that were interrupted mid-episode (the process killed) and
    run again from the start (:class:`~rcb_env.rl.ledger.RolloutLedger`); they are never
    counted."""
    errors: list[InfraError] = Field(default_factory=list)
    """The infrastructure failures of the attempts that were discarded (and of the last one
    when no attempt succeeded)."""
    timings: Timings = Timings()
    tokens: TokenCoverage = "none"
    """Whether every model call came with token ids and logprobs."""
    flat: FlatTokens | None = None
    """Set only when every turn's prompt extends the previous prompt plus completion."""

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        """A version 1 trajectory as version 2 (a resumed run reads its old trajectories)."""
        if not isinstance(data, dict):
            return data
        stop = data.get("stop_reason")
        if isinstance(stop, str) and stop in OLD_STOPS:
            data = {**data, "stop_reason": OLD_STOPS[stop]}
        if data.get("schema_version") == OLD_SCHEMA:
            data = {**data, "schema_version": SCHEMA}
        return data

    @property
    def scored(self) -> bool:
        return self.reward is not None


def token_views(
    calls: list[ModelTurn],
) -> tuple[Literal["full", "partial", "none"], FlatTokens | None]:
    """Whether the calls carry tokens, and the flat view when the turns extend each other."""
    with_tokens = [c for c in calls if c.has_tokens]
    if not calls or not with_tokens:
        return "none", None
    if len(with_tokens) < len(calls):
        return "partial", None
    ids: list[int] = []
    mask: list[int] = []
    lps: list[float] = []
    for c in calls:
        prompt = list(c.prompt_ids or ())
        completion = list(c.completion_ids or ())
        logprobs = list(c.logprobs or ())
        if len(logprobs) != len(completion):
            return "full", None  # cannot align logprobs with tokens: no flat view
        if prompt[: len(ids)] != ids:
            return "full", None  # the template rewrote history: per-turn rows only
        new = prompt[len(ids) :]
        ids += new + completion
        mask += [0] * len(new) + [1] * len(completion)
        lps += [0.0] * len(new) + logprobs
    return "full", FlatTokens(ids=tuple(ids), loss_mask=tuple(mask), logprobs=tuple(lps))
