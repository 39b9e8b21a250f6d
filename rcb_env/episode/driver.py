"""The one episode driver: an episode from start to outcome, behind every front door.

:class:`Episode` owns everything between "run this snippet" and its outcome: the start (with
the infrastructure-failure boundary: a sandbox that cannot be created is an outcome, never an
exception out of a trainer's or client's call), the steps and their records, every budget
(steps, wall time, tokens, cost, model calls: its
:class:`~rcb_env.episode.config.EpisodeConfig`'s budgets, counted in one place, the
:class:`~rcb_env.episode.wrappers.Budgets` wrapper), the finish and its grading, and the
outcome. It serves both shapes of caller:

- *push*: :meth:`Episode.run` asks an :class:`~rcb_env.agent.Agent` for each next action
  (``rcb-env eval``; an MCP client or an agent framework, through
  :class:`~rcb_env.integrations.bridge.EpisodeBridge`), or runs an agent that is a program of
  its own in the sandbox until it exits (:class:`~rcb_env.agent.ProgramAgent`: an agent CLI);
- *pull*: the caller calls :meth:`Episode.start`, then :meth:`Episode.step` with each action
  it has, then :meth:`Episode.stop` if it did not submit (the trainer adapters, RL rollouts).

A configuration error (an unknown task) still raises; everything the infrastructure does wrong
becomes the typed outcome (``status="infra_error"``, not scored).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from typing import Any

from pydantic import BaseModel

from rcb_env.agent import Agent, MeteredAgent, OutOfBudget, ProgramAgent
from rcb_env.episode.config import BudgetConfig, EnvConfig, EpisodeConfig
from rcb_env.episode.env import RcbEnv
from rcb_env.episode.outcome import EpisodeOutcome, StepRecord, StopReason
from rcb_env.episode.wrappers import Budgets
from rcb_env.errors import InfraError, Stage, infra_error
from rcb_env.grading.grader import GradingConfig
from rcb_env.sandbox import SandboxFactory
from rcb_env.sandbox.program import ProgramRunner
from rcb_env.task.models import Paper, Snippet
from rcb_env.tools.actions import tool_specs

#: What a step after the end gets back (nothing runs).
ENDED = "The episode has ended (submitted or out of budget); no more tools can run."


Step = tuple[str, float, bool, bool, dict[str, Any]]
"""What a step returns: Gymnasium's (observation, reward, terminated, truncated, info)."""


def jsonable(action: Any) -> Any:
    """An action as it is recorded."""
    if isinstance(action, BaseModel):
        return action.model_dump(mode="json")
    try:
        json.dumps(action)
    except (TypeError, ValueError):
        return repr(action)
    return action


class Episode:
    """One episode of ``snippet``: start, steps, budgets, finish, outcome (see the module)."""

    def __init__(
        self,
        paper: Paper,
        snippet: Snippet,
        *,
        config: EpisodeConfig | None = None,
        factory: SandboxFactory | None = None,
        env: EnvConfig | None = None,
        grading: GradingConfig | None = None,
        budgets: BudgetConfig | None = None,
        episode_id: str | None = None,
        environment: RcbEnv | None = None,
        grade_at_limit: bool = True,
    ) -> None:
        """``config``: the episode's settings, sandbox, grading and budgets (default:
        ``EpisodeConfig()``). ``factory``: where its sandbox comes from (the caller's; default:
        one of the episode's own for ``config.sandbox``, closed with it). ``environment``: an
        environment of the caller's to reset for this episode (one sandbox reused by several
        episodes, each starting from its reset); the caller closes it. Default: a new one,
        closed with the episode. ``grade_at_limit=False``: a step that reaches a budget is not
        graded in the step; :meth:`exhausted` says which, and the caller calls :meth:`stop`
        (in background). Deprecated, accepted for one release: ``env``, ``grading`` and
        ``budgets`` apart (:meth:`EpisodeConfig.of
        <rcb_env.episode.config.EpisodeConfig.of>`)."""
        self.paper = paper
        self.snippet = snippet
        self.factory = factory
        self.config = EpisodeConfig.of(config, env=env, grading=grading, budgets=budgets)
        """The episode's configuration (its four parts)."""
        self.episode_id = episode_id or f"{snippet.slug[:40]}-{secrets.token_hex(4)}"
        self.steps: list[StepRecord] = []
        """Every step taken, as recorded."""
        self.initial = ""
        """The first observation (the task statement)."""
        self.outcome: EpisodeOutcome | None = None
        """How it ended (None while it runs)."""
        self.stage: Stage = "sandbox"
        """Where the episode is (what an infrastructure failure is attributed to)."""
        self.started_at = time.time()
        self._t0 = time.monotonic()
        self.model_calls: list[Any] = []
        """A metered agent's model calls (:meth:`run`), each with the step it became."""
        self.setup_s = 0.0
        """How long the start took (the sandbox, the task statement)."""
        self._given = environment
        self._grade_at_limit = grade_at_limit
        self._inner: RcbEnv | None = None
        self._env: Budgets | None = None
        self._start: tuple[str, dict[str, Any]] | None = None

    # state ------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.outcome is not None

    @property
    def env(self) -> RcbEnv | None:
        """The Gymnasium environment underneath (None before :meth:`start` or if it failed)."""
        return self._inner

    @property
    def tokens(self) -> int:
        return self._env.tokens if self._env is not None else 0

    @property
    def cost(self) -> float:
        return self._env.cost if self._env is not None else 0.0

    @property
    def duration_s(self) -> float:
        return time.monotonic() - self._t0

    def remaining(self) -> dict[str, float | None]:
        """What is left of each budget (``None``: unlimited)."""
        if self._env is None:
            return dict.fromkeys(("steps", "wall_s", "tokens", "cost", "model_calls"))
        return self._env.remaining()

    # pull -------------------------------------------------------------------------------------
    def start(self) -> tuple[str, dict[str, Any]]:
        """The task statement and its info. If the sandbox (or anything else of the
        infrastructure) cannot be set up, the episode ends here: the observation says so and
        :attr:`outcome` holds the failure.

        Raises:
            Exception: anything that is not the infrastructure's failure (a programming or
                configuration error).
        """
        self.stage = "sandbox"
        self._t0 = time.monotonic()
        try:
            self._inner = self._given or RcbEnv(
                self.paper, self.snippet, self.config, factory=self.factory
            )
            self._env = Budgets.of(
                self._inner, self.config.budgets, grade_at_limit=self._grade_at_limit
            )
            obs, info = self._env.reset(options={"episode_id": self.episode_id})
        except Exception as exc:
            text, *_, end = self._failed(exc)
            self._start = (text, end)
            return self._start
        self.initial = obs
        self.setup_s = time.monotonic() - self._t0
        self._start = (obs, info)
        return obs, info

    def step(self, action: Any) -> Step:
        """Run one action (a typed action, a dict or a JSON string); its observation. The step
        that reaches a budget is executed, then the workspace is graded and the episode ends
        (``truncated``). After the end nothing runs: :data:`ENDED`."""
        if self.done or self._env is None:
            return ENDED, 0.0, False, True, self._end_info()
        self.stage = "sandbox"
        s0 = time.monotonic()
        try:
            obs, reward, terminated, truncated, info = self._env.step(action)
        except Exception as exc:
            return self._failed(exc)
        self.steps.append(
            StepRecord(
                index=len(self.steps) + 1,
                action=jsonable(action),
                observation=obs,
                reward=reward,
                duration_s=round(time.monotonic() - s0, 4),
            )
        )
        if terminated or truncated:
            assert self._inner is not None
            assert self._inner.outcome is not None
            self.outcome = self._inner.outcome
        return obs, reward, terminated, truncated, info

    def charge(self, tokens: int, cost: float = 0.0, *, model_calls: int = 0) -> None:
        """Count model tokens (and their cost) and model calls spent on this episode."""
        if self._env is not None:
            self._env.charge_tokens(tokens, cost)
            self._env.count_model_call(model_calls)

    def exhausted(self) -> str | None:
        """The first budget that ran out, if any (``steps``, ``wall_s``, ``tokens``, ``cost``)."""
        return self._env.exhausted() if self._env is not None else None

    def stop(self, reason: StopReason | str = StopReason.BUDGET_STEPS) -> Step:
        """End an episode the caller did not submit: grade the workspace as it stands
        (``truncated``, with ``reason``). Does nothing after the end."""
        if self.done or self._inner is None:
            return ENDED, 0.0, False, True, self._end_info()
        self.stage = "sandbox"
        try:
            result = self._inner.finish(reason=reason)
        except Exception as exc:
            return self._failed(exc)
        self.outcome = self._inner.outcome
        return result

    def fail(self, error: InfraError) -> None:
        """End the episode as the infrastructure's failure (an agent or a model endpoint that
        broke: never scored)."""
        if not self.done:
            self.outcome = EpisodeOutcome.failed(error)

    def close(self) -> None:
        """Release the sandbox (the factory, and an environment given, are the caller's)."""
        if self._given is not None:
            return
        if self._env is not None:
            self._env.close()
        elif self._inner is not None:
            self._inner.close()

    def reward(self) -> float | None:
        """The reward once ended; None while it runs or when it was not scored."""
        if self.outcome is None or not self.outcome.scored:
            return None
        return self.outcome.reward

    # push -------------------------------------------------------------------------------------
    def run(self, agent: Agent) -> EpisodeOutcome:
        """Drive the whole episode with ``agent`` (start unless :meth:`start` ran already, its
        actions until the end, its ``end``); the outcome. An agent's crash or a model
        endpoint's failure is an infrastructure outcome; the model calls of a metered agent are
        charged to the budgets and kept in :attr:`model_calls`, each linked to the step its
        answer became. Their number is counted by the budget (``max_model_calls``, which the
        agent reads in ``info["budgets"]`` before it calls again). An agent that is a program
        of its own (:class:`~rcb_env.agent.ProgramAgent`, an agent CLI) is run in the sandbox
        instead of asked for actions (:meth:`_work`)."""
        metered: MeteredAgent | None = (
            agent if hasattr(agent, "spent") and hasattr(agent, "drain_calls") else None  # type: ignore[assignment]
        )
        charged = (0, 0.0)

        def drain(step: int) -> None:
            if metered is not None:
                calls = metered.drain_calls()
                self.charge(0, model_calls=len(calls))  # the budget's count (max_model_calls)
                for c in calls:
                    data = jsonable(c)
                    self.model_calls.append(
                        {**data, "step": step} if isinstance(data, dict) else data
                    )

        def charge() -> None:
            nonlocal charged
            if metered is not None:
                tokens, cost = metered.spent()
                self.charge(tokens - charged[0], cost - charged[1])
                charged = (tokens, cost)

        obs, info = self._start if self._start is not None else self.start()
        if isinstance(agent, ProgramAgent):
            return self._work(agent, obs, info, drain, charge)
        try:
            if not self.done:
                self.stage = "agent"
                agent.start(obs, info, tool_specs())
                drain(0)
            while not self.done:
                self.stage = "agent"
                try:
                    action = agent.act(obs, info)
                except OutOfBudget as out:
                    drain(len(self.steps))
                    final, _r, _t, _tr, info = self.stop(out.reason)
                    obs = f"[budget exhausted: {out.reason.removeprefix('budget_')}] {final}"
                    break
                drain(len(self.steps) + 1)
                charge()
                obs, _reward, _terminated, _truncated, info = self.step(action)
            self.stage = "agent"
            agent.end({**info, "observation": obs})  # the last observation, for relays
            drain(len(self.steps))
        except Exception as exc:  # the agent's side: what broke, and where
            error = infra_error(exc, self.stage)
            if error is None and self.stage == "agent":  # an agent's crash must not end a run
                error = InfraError(stage="agent", type=type(exc).__name__, message=str(exc)[:2000])
            if error is None:
                raise
            self.outcome = EpisodeOutcome.failed(error)
            with contextlib.suppress(Exception):  # an agent that relays the end (MCP) is told
                agent.end(
                    {"status": "infra_error", "outcome": self.outcome, "observation": error.message}
                )
        drain(len(self.steps))  # an agent that crashed mid-call
        charge()  # calls made after the last step (a framework's closing turn)
        assert self.outcome is not None
        return self.outcome

    def _work(
        self,
        agent: ProgramAgent,
        obs: str,
        info: dict[str, Any],
        drain: Any,
        charge: Any,
    ) -> EpisodeOutcome:
        """:meth:`run` for an agent that is a program in the sandbox: it works until it exits
        or a budget ends it, then the workspace is graded as it stands: ``completed`` when it
        says it is done (``submit``), else ``truncated`` with the budget's reason or
        ``agent_stopped``; an endpoint's or the sandbox's failure is an infrastructure
        outcome."""
        if not self.done:
            assert self._inner is not None
            assert self._inner.sandbox is not None
            runner = ProgramRunner(self._inner.sandbox, self.remaining()["wall_s"])
            self.stage = "agent"
            try:
                reason = StopReason(agent.work(obs, info, runner))
            except Exception as exc:
                drain(0)
                charge()
                error = infra_error(exc, "agent")
                if error is None:
                    error = InfraError(
                        stage="agent", type=type(exc).__name__, message=str(exc)[:2000]
                    )
                self.outcome = EpisodeOutcome.failed(error)
            else:
                drain(0)
                charge()
                obs, _r, _t, _tr, info = self.stop(reason)
        with contextlib.suppress(Exception):
            agent.end({**info, "observation": obs})
        assert self.outcome is not None
        return self.outcome

    # helpers ----------------------------------------------------------------------------------
    def _failed(self, exc: Exception) -> Step:
        """The infrastructure failed (at ``self.stage``): the episode ends unscored; the
        observation is the failure's message.

        Raises:
            Exception: ``exc`` itself when it is not an infrastructure failure.
        """
        error = infra_error(exc, self.stage)
        if error is None:
            raise exc
        self.outcome = EpisodeOutcome.failed(error)
        return error.message, 0.0, False, True, self._end_info()

    def _end_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "snippet_id": self.snippet.id,
            "paper_id": self.paper.id,
            "episode_id": self.episode_id,
        }
        if self.outcome is not None:
            info["outcome"] = self.outcome
            info.update(self.outcome.model_dump(mode="json", exclude={"reward"}))
        return info


__all__ = ["ENDED", "BudgetConfig", "Episode", "Step", "jsonable"]
