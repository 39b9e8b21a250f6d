"""Run many episodes (snippets x samples) with N parallel workers, writing a record per finished
episode as it happens; resume a killed run without losing or repeating finished episodes."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from rcb_env import envs
from rcb_env.agent import Agent, AgentFactory, MeteredAgent, OutOfBudget, agent_factory
from rcb_env.episode.env import EnvConfig, RcbEnv
from rcb_env.episode.outcome import EpisodeOutcome
from rcb_env.episode.wrappers import Budgets
from rcb_env.errors import ConfigError, InfraError, Stage, infra_error
from rcb_env.grading.grader import GradingConfig
from rcb_env.grading.prewarm import Prewarmer
from rcb_env.logs import get_logger
from rcb_env.results.records import (
    EpisodeRecord,
    RecordLog,
    StepRecord,
    final_records,
    read_records,
    write_json_atomic,
)
from rcb_env.results.summary import Summary, Totals, Unavailable, summarize_run
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task.models import Paper, Pset, Snippet
from rcb_env.tools.actions import tool_specs

RUN_SCHEMA = "rcb-env/run/1"
RECORDS = "episodes.jsonl"
RUN_FILE = "run.json"
log = get_logger(__name__)


class BudgetConfig(BaseModel):
    """Per-episode limits, identical for every agent of a run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: int | None = 50
    max_wall_s: float | None = 1800.0
    max_tokens: int | None = None
    max_cost: float | None = None


class EvalConfig(BaseModel):
    """Everything that defines a run (and must match when resuming it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str
    """Built-in agent name (oracle, null, single-shot, tools) or ``package.module:Class``."""
    model: dict[str, Any] | None = None
    """For the LLM agents: which model, where, and how it is called (the agents' model settings,
    e.g. ``rcb_agents.models.ModelConfig``, as JSON)."""
    with_paper: bool = True
    """single-shot: include the paper (False is the paper's "without paper" ablation)."""
    samples: int = 1
    """Episodes per snippet."""
    env: EnvConfig = EnvConfig()
    sandbox: SandboxConfig = SandboxConfig()
    grading: GradingConfig = GradingConfig()
    budgets: BudgetConfig = BudgetConfig()

    @field_validator("model", mode="before")
    @classmethod
    def _model_as_json(cls, value: Any) -> Any:
        return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def task_hash(snippet: Snippet) -> str:
    spec = snippet.model_dump(mode="json")
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def make_agent_factory(cfg: EvalConfig, pset: Pset) -> AgentFactory:
    """The factory of ``cfg.agent`` (a built-in name or ``package.module:Class``).

    Raises:
        ConfigError: an unknown or broken spec.
    """
    return agent_factory(cfg.agent, pset, model=cfg.model, options={"with_paper": cfg.with_paper})


def _jsonable(action: Any) -> Any:
    if isinstance(action, BaseModel):
        return action.model_dump(mode="json")
    try:
        json.dumps(action)
    except (TypeError, ValueError):
        return repr(action)
    return action


def run_episode(
    paper: Paper,
    snippet: Snippet,
    sample: int,
    agent: Agent,
    cfg: EvalConfig,
    factory: SandboxFactory,
    run_id: str,
) -> EpisodeRecord:
    """One episode, start to record. Infrastructure failures become infra records."""
    episode_id = f"{snippet.slug[:40]}-s{sample}-{secrets.token_hex(4)}"
    started_at = time.time()
    t0 = time.monotonic()
    steps: list[StepRecord] = []
    initial = ""
    outcome: EpisodeOutcome | None = None
    inner = RcbEnv(paper, snippet, cfg.env, grading_config=cfg.grading, factory=factory)
    env = Budgets(inner, **cfg.budgets.model_dump())
    stage: Stage = "sandbox"
    metered = agent if isinstance(agent, MeteredAgent) else None
    charged = (0, 0.0)
    calls: list[Any] = []

    def drain(step: int) -> None:
        # Each model call is linked to the step its answer became (0: before the first step).
        if metered is not None:
            for c in metered.drain_calls():
                data = _jsonable(c)
                calls.append({**data, "step": step} if isinstance(data, dict) else data)

    try:
        obs, info = env.reset(options={"episode_id": episode_id})
        initial = obs
        stage = "agent"
        agent.start(obs, info, tool_specs())
        drain(0)
        terminated = truncated = False
        while not (terminated or truncated):
            stage = "agent"
            try:
                action = agent.act(obs, info)
            except OutOfBudget as out:
                drain(len(steps))
                stage = "sandbox"
                obs, _r, terminated, truncated, info = inner.finish(reason=out.reason)
                obs = f"[budget exhausted: {out.reason.removeprefix('budget_')}] {obs}"
                break
            drain(len(steps) + 1)
            if metered is not None:
                tokens, cost = metered.spent()
                env.charge_tokens(tokens - charged[0], cost - charged[1])
                charged = (tokens, cost)
            stage = "sandbox"
            s0 = time.monotonic()
            obs, reward, terminated, truncated, info = env.step(action)
            steps.append(
                StepRecord(
                    index=len(steps) + 1,
                    action=_jsonable(action),
                    observation=obs,
                    reward=reward,
                    duration_s=round(time.monotonic() - s0, 4),
                )
            )
        stage = "agent"
        agent.end({**info, "observation": obs})  # the last observation, for agents that relay it
        drain(len(steps))
        outcome = inner.outcome
    except Exception as exc:  # the one boundary: what broke, and where
        error = infra_error(exc, stage)
        if error is None and stage == "agent":  # an agent's own crash must not take the run down
            error = InfraError(stage="agent", type=type(exc).__name__, message=str(exc)[:2000])
        if error is None:
            raise
        outcome = EpisodeOutcome.failed(error)
        with contextlib.suppress(Exception):  # an agent that relays the end (MCP) is told
            agent.end({"status": "infra_error", "outcome": outcome, "observation": error.message})
    finally:
        env.close()
    if outcome is None:  # pragma: no cover - the loop only ends with an outcome
        raise RuntimeError("the episode ended without an outcome")
    drain(len(steps))  # an agent that crashed mid-call
    if metered is not None:  # calls made after the last step (a framework's closing turn)
        tokens, cost = metered.spent()
        env.charge_tokens(tokens - charged[0], cost - charged[1])
    record = EpisodeRecord.from_outcome(
        outcome,
        run_id=run_id,
        episode_id=episode_id,
        snippet_id=snippet.id,
        paper_id=paper.id,
        sample=sample,
        weight=snippet.weight,
        task_hash=task_hash(snippet),
        agent=agent.describe(),
        config=cfg.model_dump(mode="json", exclude={"agent"}),
        initial_observation=initial,
        steps=steps,
        model_calls=calls,
        tokens=env.tokens,
        cost=round(env.cost, 6),
        started_at=started_at,
        duration_s=round(time.monotonic() - t0, 3),
    )
    log.info(
        "episode",
        run_id=run_id,
        task_id=snippet.id,
        episode_id=episode_id,
        sample=sample,
        status=record.status,
        passed=record.passed,
    )
    return record


def new_run_dir(runs_root: Path) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return runs_root / f"{stamp}-{secrets.token_hex(3)}"


def runnable(pset: Pset, *, interpreter_given: bool = False) -> tuple[Pset, Totals]:
    """The papers that can run in this installation (:func:`rcb_env.envs.availability`), and
    the totals of the whole selection with what was left out and why."""
    ready, left_out = [], []
    for paper in pset.papers:
        a = envs.availability(paper, interpreter_given=interpreter_given)
        if a.status == "ready":
            kept = tuple(s for s in paper.snippets if not s.unavailable)
            left_out += [
                Unavailable(
                    paper=paper.id,
                    snippet=s.name,
                    reason=s.unavailable or "",
                    snippets=1,
                    weight=s.weight,
                )
                for s in paper.snippets
                if s.unavailable
            ]
            ready.append(paper if len(kept) == len(paper.snippets) else _only(paper, kept))
        else:
            left_out.append(
                Unavailable(
                    paper=paper.id,
                    reason=a.reason,
                    snippets=len(paper.snippets),
                    weight=paper.total_weight,
                )
            )
    return pset.model_copy(update={"papers": tuple(ready)}), _totals(pset, left_out)


def _only(paper: Paper, snippets: tuple[Snippet, ...]) -> Paper:
    """``paper`` with only ``snippets`` (the others cannot run here)."""
    return paper.model_copy(update={"snippets": snippets})


def _totals(pset: Pset, unavailable: list[Unavailable]) -> Totals:
    parts = tuple(
        Totals(
            name=part.name,
            snippets=sum(len(p.snippets) for p in pset.papers if p.id in part.papers),
            weight=sum(p.total_weight for p in pset.papers if p.id in part.papers),
            unavailable=tuple(u for u in unavailable if u.paper in part.papers),
            papers=part.papers,
        )
        for part in pset.parts
    )
    return Totals(
        name=pset.benchmark or (" + ".join(p.name for p in pset.parts) if parts else None),
        snippets=len(pset.snippets),
        weight=sum(s.weight for s in pset.snippets),
        unavailable=tuple(unavailable),
        parts=parts,
    )


def _brings_interpreter(cfg: EvalConfig) -> bool:
    """Does the run's configuration name the interpreter (so no task environment is needed)?"""
    return cfg.sandbox.backend == "docker" or (
        cfg.sandbox.python is not None and cfg.grading.python is not None
    )


def _manifest(run_id: str, cfg: EvalConfig, pset: Pset, totals: Totals) -> dict[str, Any]:
    tasks = sorted(f"{s.id}@{task_hash(s)}" for s in pset.snippets)
    return {
        "schema_version": RUN_SCHEMA,
        "run_id": run_id,
        "created": dt.datetime.now(dt.UTC).isoformat(),
        "pset": str(pset.root),
        "config": cfg.model_dump(mode="json"),
        "tasks": tasks,
        "task_set_hash": hashlib.sha256("\n".join(tasks).encode()).hexdigest()[:16],
        "benchmark": totals.model_dump(mode="json"),
    }


def run_eval(
    pset: Pset,
    cfg: EvalConfig,
    run_dir: Path,
    *,
    jobs: int = 1,
    resume: bool = False,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    infra_retries: int = 1,
    retry_delay_s: float = 5.0,
    make_agent: AgentFactory | None = None,
    only_ready: bool = True,
    ray_address: str | None = None,
    ray_warm: bool = False,
) -> Summary:
    """Run every (snippet, sample) not yet finished in ``run_dir`` and return the summary.

    Episodes that end in an infrastructure error are run again after the others, up to
    ``infra_retries`` more rounds, ``retry_delay_s`` x round apart (a restarted engine or a
    rate-limited model is often back by then). Their infra records stay in the log; the last
    record of each episode is the one that counts, and what still failed is excluded from the
    rates and counted.

    With ``only_ready`` (the default) only the papers that can run in this installation run
    (:func:`runnable`); the run records the whole selection's totals and what was left out, so
    that its summary gives rates over the runnable set and over the full benchmark.

    ``make_agent`` builds each episode's agent; by default ``cfg.agent`` is resolved by name
    (:func:`rcb_env.agent.agent_factory`).

    ``ray_address`` runs the episodes on a Ray cluster instead (``local``: a Ray instance on
    this machine with ``jobs`` sandbox slots; else a cluster's address): one Ray task per group
    of samples of a snippet, records streamed back and written here only
    (:mod:`rcb_env.runner.ray_runner`). ``ray_warm``: one long-lived worker per node holding
    its sandbox factory and caches, the groups of a paper routed to the same worker.

    Raises:
        ConfigError: resuming with a different agent, configuration or task set.
    """
    if only_ready:
        pset, totals = runnable(pset, interpreter_given=_brings_interpreter(cfg))
    else:
        totals = _totals(pset, [])
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = run_dir / RUN_FILE
    if resume and manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        new = _manifest(old["run_id"], cfg, pset, totals)
        for key in ("config", "task_set_hash"):
            if old.get(key) != new[key]:
                raise ConfigError(
                    f"cannot resume {run_dir}: its {key.replace('_', ' ')} differs from this "
                    "command's (same agent, settings and tasks are required)"
                )
        run_id = old["run_id"]
    else:
        if manifest_path.exists() and not resume:
            raise ConfigError(f"{run_dir} already holds a run; pass --resume to continue it")
        run_id = run_dir.name
        write_json_atomic(manifest_path, _manifest(run_id, cfg, pset, totals))

    records_path = run_dir / RECORDS
    done = {
        key
        for key, r in final_records(read_records(records_path)).items()
        if r.status != "infra_error"
    }
    todo = [
        (p, s, k)
        for k in range(cfg.samples)
        for p in pset.papers
        for s in p.snippets
        if (s.id, k) not in done
    ]
    if on_plan is not None:
        on_plan(len(todo))
    writer = RecordLog(records_path).open()
    failed: list[tuple[Paper, Snippet, int]] = []  # infrastructure errors of the last round

    def keep(record: EpisodeRecord, item: tuple[Paper, Snippet, int]) -> None:
        writer.append(record)
        if record.status == "infra_error":
            failed.append(item)
        if on_episode is not None:
            on_episode(record)

    dispatcher: Any = None
    factory: SandboxFactory | None = None
    prewarmer: Prewarmer | None = None
    if ray_address is not None:
        from rcb_env.runner.ray_runner import WATCHDOG_MARGIN_S, RayDispatcher

        # The driver's watchdog: a sample may take its wall budget, its grading and a margin.
        per_sample = (cfg.budgets.max_wall_s or 1800.0) + cfg.grading.timeout_s + WATCHDOG_MARGIN_S
        dispatcher = RayDispatcher(ray_address, jobs=jobs, deadline_s=per_sample, warm=ray_warm)
    else:
        new_agent = make_agent or make_agent_factory(cfg, pset)
        factory = SandboxFactory(cfg.sandbox)
        prewarmer = Prewarmer(factory.grading_executor, cfg.grading, [p for p, _, _ in todo])
    try:

        def work(item: tuple[Paper, Snippet, int]) -> None:
            paper, snippet, sample = item
            assert factory is not None
            if prewarmer is not None:
                prewarmer.starting(paper)
            keep(run_episode(paper, snippet, sample, new_agent(), cfg, factory, run_id), item)

        def run_all(items: list[tuple[Paper, Snippet, int]]) -> None:
            if dispatcher is not None:
                _run_on_ray(dispatcher, items, pset, cfg, run_id, keep)
                return
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                for future in [pool.submit(work, item) for item in items]:
                    future.result()

        run_all(todo)
        planned = len(todo)
        for round_ in range(1, infra_retries + 1):
            if not failed:
                break
            again = list(failed)
            failed.clear()
            planned += len(again)
            if on_plan is not None:
                on_plan(planned)
            log.warning(
                "retrying infrastructure failures", run_id=run_id, round=round_, episodes=len(again)
            )
            time.sleep(retry_delay_s * round_)
            run_all(again)
    finally:
        writer.close()
        if prewarmer is not None:
            prewarmer.close()
        if factory is not None:
            factory.close()
        if dispatcher is not None:
            dispatcher.close()
    return summarize_run(run_dir)


def _run_on_ray(
    dispatcher: Any,
    items: list[tuple[Paper, Snippet, int]],
    pset: Pset,
    cfg: EvalConfig,
    run_id: str,
    keep: Callable[[EpisodeRecord, tuple[Paper, Snippet, int]], None],
) -> None:
    """``items`` as one Ray task per snippet (its pending samples); records kept as they come."""
    from rcb_env.catalog import BENCHMARKS as BENCHMARK_NAMES
    from rcb_env.runner.ray_runner import encode_config, ship_tasks

    groups: dict[str, list[tuple[Paper, Snippet, int]]] = {}
    for item in items:
        groups.setdefault(item[1].id, []).append(item)
    lookup = {(p.id, s.name, k): (p, s, k) for p, s, k in items}
    # Where each paper's tasks are (a combined run has several benchmarks), and their trees for
    # nodes that lack them.
    parts = [(part.name, part.root, set(part.papers)) for part in pset.parts] or [
        (pset.benchmark or str(pset.root), pset.root, {p.id for p in pset.papers})
    ]
    located: dict[str, tuple[str, Any]] = {}
    for name, root, papers in parts:
        known = name if name in BENCHMARK_NAMES else str(root)
        tree = ship_tasks(pset.model_copy(update={"root": root}))
        for paper_id in papers:
            located[paper_id] = (known, [tree] if tree is not None else None)

    def on_record(record: EpisodeRecord) -> None:
        paper_id, _, name = record.snippet_id.partition("/")
        keep(record, lookup[(paper_id, name, record.sample)])

    def on_failure(paper_id: str, name: str, samples: list[int], why: str) -> None:
        for k in samples:
            paper, snippet, _ = lookup[(paper_id, name, k)]
            error = InfraError(stage="sandbox", type="ray", message=why)
            record = EpisodeRecord.from_outcome(
                EpisodeOutcome.failed(error),
                run_id=run_id,
                episode_id=f"{snippet.slug[:40]}-s{k}-ray",
                snippet_id=snippet.id,
                paper_id=paper.id,
                sample=k,
                weight=snippet.weight,
                task_hash=task_hash(snippet),
                agent={"name": cfg.agent},
                config=cfg.model_dump(mode="json", exclude={"agent"}),
                initial_observation="",
                steps=[],
                started_at=time.time(),
                duration_s=0.0,
            )
            keep(record, (paper, snippet, k))

    dispatcher.run(
        [
            (
                *located[members[0][0].id],
                members[0][0].id,
                members[0][1].name,
                task_hash(members[0][1]),
                [k for *_, k in members],
            )
            for members in groups.values()
        ],
        encode_config(cfg),
        run_id,
        on_record,
        on_failure,
    )
