"""rcb-env for TRL's ``GRPOTrainer(environment_factory=...)``.

TRL's contract (experimental in TRL): the factory returns one environment per rollout; its
``reset(**row)`` starts the task named by the dataset row and returns the text appended to the
prompt; its public methods are the tools (type-hinted, with Google-style docstrings, rendered to
JSON schemas by ``transformers.utils.get_json_schema``; rcb-env writes them from the
environment's own tool schemas, :func:`rcb_env.tools.actions.tool_specs`, never by hand);
``get_reward()`` scores the rollout from the environment's state. The reward is the
environment's (line weight on a pass, 0 on a fail) and ``None`` when the episode could not be
scored (an infrastructure failure), which TRL leaves out of the reward instead of counting a 0.

Failures are data: a sandbox that cannot be created makes ``reset()`` return a text saying the
task could not start, every tool then answers that the episode has ended, and ``get_reward()``
returns None; nothing raises out of ``train()``. Each such episode is counted
(:func:`rcb_env.rl.shared.unscored`) and logged in one line. ``on_failure="drop"`` (the
default) also gives None to the other rollouts of the same task in the batch (the group is left
out instead of being normalised over its scored part); ``"keep"`` leaves that to TRL.

Shared resources and lifetime: every environment of the process shares one sandbox factory per
sandbox setting (templates, warm grading: :mod:`rcb_env.rl.shared`). A submit starts its grading
on the process's grading pool and answers at once; the first ``get_reward()`` of a batch starts
the grading of every rollout of the batch that never submitted, so TRL's serial reward loop
waits for about the slowest grading. TRL never closes its environments: an environment ends its
episode when it is collected, and the shared resources are closed at the process's exit.

    from rcb_env.integrations.trl import environment_factory, dataset_rows
    trainer = GRPOTrainer(model=..., train_dataset=Dataset.from_list(dataset_rows()),
                          environment_factory=environment_factory(), ...)

On a remote ``rcb-env serve`` instead (the trainer's machine runs no sandbox):
``environment_factory=remote_environment_factory("http://cpu-node:8000/<token>")``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rcb_env.episode.config import BudgetConfig, EnvConfig, EpisodeConfig
from rcb_env.grading.grader import GradingConfig
from rcb_env.integrations.pull import Cohort, OnFailure, Session, load_tasks
from rcb_env.integrations.serve.remote import RemoteSession
from rcb_env.logs import get_logger
from rcb_env.rl import shared
from rcb_env.sandbox import SandboxConfig
from rcb_env.task.difficulty import DifficultyTable
from rcb_env.tools.actions import ToolSpec, tool_specs

log = get_logger(__name__)

#: The logger of TRL's trainer (its warning on a rollout without reward quotes the whole prompt).
TRL_LOGGER = "trl.trainer.grpo_trainer"
_NONE_WARNING = "All reward functions returned None"


class ShortUnscoredWarning(logging.Filter):
    """Shortens TRL's warning about a rollout without a reward to one line (it quotes the whole
    prompt, which holds the task statement; rcb-env logs why the episode was not scored)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and _NONE_WARNING in record.msg:
            record.msg = (
                "All reward functions returned None for a rollout: rcb-env could not score it "
                "(an infrastructure failure, logged by rcb-env); it is left out of its group's "
                "statistics"
            )
            record.args = ()
        return True


def quiet_unscored_warning() -> None:
    """Install :class:`ShortUnscoredWarning` on TRL's trainer logger (idempotent)."""
    logger = logging.getLogger(TRL_LOGGER)
    if not any(isinstance(f, ShortUnscoredWarning) for f in logger.filters):
        logger.addFilter(ShortUnscoredWarning())


quiet_unscored_warning()

#: The cohort of environments built without one (``RcbEnvironment(...)`` passed to TRL directly):
#: a trainer's rollouts are graded together and their groups dropped on a failure, as with
#: :func:`environment_factory`.
PROCESS_COHORT = Cohort("drop")


class RcbEnvironment:
    """One rcb-env episode per rollout; the episode's tools as methods."""

    def __init__(
        self,
        pset: str | None = None,
        *,
        config: EpisodeConfig | None = None,
        max_turns: int | None = None,
        cohort: Cohort | None = None,
        sandbox: SandboxConfig | None = None,
        grading: GradingConfig | None = None,
        env: EnvConfig | None = None,
        budgets: BudgetConfig | None = None,
    ) -> None:
        """``config``: the episode's settings, sandbox, grading and budgets, as
        :class:`~rcb_env.integrations.pull.Session` takes it (default: the paper's outline in
        the first observation, ``read_paper`` for a section; 30 tool calls, no wall-time
        limit); ``max_turns``, when given: the tool calls per episode (the budgets'
        ``max_steps``); ``cohort``: the environments whose rewards are graded together (one
        per :func:`environment_factory`; default: the process's, :data:`PROCESS_COHORT`).
        Deprecated, accepted for one release: ``sandbox``, ``grading``, ``env`` and
        ``budgets`` apart (as ``Session`` maps them)."""
        self._session = Session(
            pset,
            config=config,
            max_turns=max_turns,
            background=True,
            cohort=cohort if cohort is not None else PROCESS_COHORT,
            sandbox=sandbox,
            grading=grading,
            env=env,
            budgets=budgets,
        )

    def __repr__(self) -> str:  # short: TRL quotes its environments in its warnings
        outcome = self._session.outcome
        state = "running" if outcome is None else outcome.status.value
        return f"RcbEnvironment(task={self._session.task_id!r}, {state})"

    # reserved -----------------------------------------------------------------------------
    def reset(self, **row: Any) -> str:
        """Start the task of a dataset row (its ``task_id`` column).

        Raises:
            ConfigError: the row names no task of the selection (bad input, not a failure of
                the infrastructure).
        """
        return self._session.start(str(row["task_id"]))

    def get_reward(self) -> float | None:
        """The episode's reward (graded as it stands if never submitted); None if unscored."""
        try:
            return self._session.reward()
        except Exception as exc:  # never out of train(): a rollout without a reward
            total = shared.count_unscored("grading")
            log.error(
                f"rcb-env: episode of {self._session.task_id} not scored (unexpected "
                f"{type(exc).__name__}: {str(exc)[:200]}); {total} unscored in this process"
            )
            return None

    # tools: generated from the environment's own schemas (below the class), one method each

    if TYPE_CHECKING:  # the generated tool methods, called by name

        def __getattr__(self, name: str) -> Callable[..., str]: ...

    def _close(self) -> None:
        """Release the episode's sandboxes (private: TRL exposes every public method as a
        tool)."""
        self._session.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to release
            self._session.close()


class RemoteRcbEnvironment:
    """One episode per rollout on a remote ``rcb-env serve`` (the server holds the sandboxes,
    its selection, budgets and records); the same tools as :class:`RcbEnvironment`. An episode
    its server lost, or recorded as an infrastructure failure, has the reward None (counted,
    stage ``server``); a reset beyond the server's episode cap waits for a slot."""

    def __init__(self, url: str, *, timeout_s: float = 600.0) -> None:
        """``url``: the server's base URL (its token as the path prefix or the URL's
        password); ``timeout_s``: the longest wait for one answer (above the server's grading
        timeout)."""
        self._session = RemoteSession(url, timeout_s=timeout_s)

    def __repr__(self) -> str:  # short: TRL quotes its environments in its warnings
        return f"RemoteRcbEnvironment(task={self._session.task_id!r}, {self._session.status})"

    def reset(self, **row: Any) -> str:
        """Start the task of a dataset row (its ``task_id`` column) on the server.

        Raises:
            ConfigError: the server serves no such task.
        """
        return self._session.start(str(row["task_id"]))

    def get_reward(self) -> float | None:
        """The episode's reward (submitted as it stands if the model never did); None if
        unscored."""
        return self._session.reward()

    if TYPE_CHECKING:  # the generated tool methods, called by name

        def __getattr__(self, name: str) -> Callable[..., str]: ...

    def _close(self) -> None:
        self._session.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to release
            self._session.close()


_PYTHON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}


def _tool_method(spec: ToolSpec) -> Callable[..., str]:
    """One tool of the environment as a method TRL can render and call: its signature, type
    hints and Google-style docstring written from the tool's spec (what
    ``transformers.utils.get_json_schema`` reads), its call the environment's step."""
    props: dict[str, Any] = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", []))
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints: dict[str, Any] = {}
    docs = []
    for name in sorted(props, key=lambda n: n not in required):  # the required ones first
        prop = props[name]
        hints[name] = _PYTHON_TYPES[prop["type"]]
        default = inspect.Parameter.empty if name in required else prop.get("default")
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(name, kind, default=default, annotation=hints[name]))
        docs.append(f"    {name}: {' '.join(str(prop.get('description', name)).split())}")
    signature = inspect.Signature(params, return_annotation=str)

    def method(self: RcbEnvironment | RemoteRcbEnvironment, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        arguments = {k: v for k, v in bound.arguments.items() if k != "self" and v is not None}
        return self._session.call(spec.name, arguments)

    method.__name__ = method.__qualname__ = spec.name
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = {**hints, "return": str}
    args_block = "\n\nArgs:\n" + "\n".join(docs) if docs else ""
    method.__doc__ = f"{spec.description}{args_block}\n\nReturns:\n    The tool's observation."
    return method


for _spec in tool_specs():
    setattr(RcbEnvironment, _spec.name, _tool_method(_spec))
    setattr(RemoteRcbEnvironment, _spec.name, _tool_method(_spec))


def environment_factory(
    pset: str | None = None,
    *,
    config: EpisodeConfig | None = None,
    max_turns: int | None = None,
    on_failure: OnFailure = "drop",
    sandbox: SandboxConfig | None = None,
    grading: GradingConfig | None = None,
    env: EnvConfig | None = None,
    budgets: BudgetConfig | None = None,
) -> Callable[[], RcbEnvironment]:
    """What ``GRPOTrainer(environment_factory=...)`` takes: a fresh environment per call (the
    episode config, as :class:`RcbEnvironment` takes it; ``sandbox``, ``grading``, ``env`` and
    ``budgets`` apart are deprecated, accepted for one release), all of one cohort (their
    rewards graded together; ``on_failure``: what an unscored rollout does to its group)."""
    return functools.partial(
        RcbEnvironment,
        pset,
        config=config,
        max_turns=max_turns,
        cohort=Cohort(on_failure),
        sandbox=sandbox,
        grading=grading,
        env=env,
        budgets=budgets,
    )


def remote_environment_factory(
    url: str, *, timeout_s: float = 600.0
) -> Callable[[], RemoteRcbEnvironment]:
    """What ``GRPOTrainer(environment_factory=...)`` takes for episodes on the remote
    ``rcb-env serve`` at ``url`` (its token as the path prefix or the URL's password)."""
    return functools.partial(RemoteRcbEnvironment, url, timeout_s=timeout_s)


def dataset_rows(
    pset: str | None = None,
    *,
    system: str | None = None,
    difficulty: DifficultyTable | None = None,
) -> list[dict[str, Any]]:
    """One training row per snippet: a conversational ``prompt`` and the ``task_id`` that
    ``reset`` starts (the task statement is appended to the prompt by TRL). The system prompt
    is the tool-calling agents' own, from the snippet's statement
    (:func:`rcb_env.agent.tools_system_prompt`), unless ``system`` is given.

    Each row also carries what a curriculum orders or filters by: ``weight`` (the line weight,
    the reward on a pass) and ``depth`` (nesting), and with ``difficulty``
    (:func:`rcb_env.task.difficulty.difficulty_table`) ``solve_rate``, the published solve rate
    (0 to 1; None when unknown), e.g. ``sorted(rows, key=lambda r: -r["solve_rate"])`` for
    the easiest first. A synthesised set's rows carry its manifest's record too
    (``synth_level``, ``synth_mutation_score``, ``synth_rule``, where it came from:
    :func:`rcb_env.synth.manifest.export_metadata`)."""
    from rcb_env.agent import tools_system_prompt
    from rcb_env.synth.manifest import export_metadata
    from rcb_env.task.source import source_for

    tasks = load_tasks(pset)
    rows = []
    for paper in tasks.papers:
        source = source_for(paper)
        for s in paper.snippets:
            statement = source.statement(paper, s).model_dump(mode="json")
            row: dict[str, Any] = {
                "prompt": [
                    {"role": "system", "content": system or tools_system_prompt(statement)},
                    {"role": "user", "content": f"Task {s.id}:\n"},
                ],
                "task_id": s.id,
                "weight": s.weight,
                "depth": s.depth,
                **export_metadata(paper, s.id),
            }
            if difficulty is not None:
                known = difficulty.get(s.id)
                row["solve_rate"] = None if known is None else known.solve_rate()
            rows.append(row)
    return rows
