"""Run many episodes (snippets x samples) with N parallel workers, writing a record per finished
episode as it happens; resume a killed run without losing or repeating finished episodes."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rcb_env.agent import AgentFactory
from rcb_env.episode.outcome import EpisodeOutcome, EpisodeStatus
from rcb_env.errors import ConfigError, InfraError
from rcb_env.grading.prewarm import Prewarmer
from rcb_env.logs import get_logger
from rcb_env.results.records import (
    EpisodeRecord,
    RecordLog,
    final_records,
    read_records,
    write_json_atomic,
)
from rcb_env.results.summary import Summary, Totals, Unavailable, summarize_run
from rcb_env.retry import RetryPolicy
from rcb_env.runner.episode import (
    EvalConfig,
    make_agent_factory,
    names_interpreter,
    run_episode,
)
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.sandbox.backend import unavailable_on
from rcb_env.sandbox.registry import comparable
from rcb_env.task import environments as envs
from rcb_env.task.models import Paper, Pset, Snippet, task_hash

__all__ = [
    "RECORDS",
    "RUN_FILE",
    "EvalConfig",
    "make_agent_factory",
    "new_run_dir",
    "run_episode",
    "run_eval",
    "runnable",
]

RUN_SCHEMA = "rcb-env/run/1"
RECORDS = "episodes.jsonl"
RUN_FILE = "run.json"
log = get_logger(__name__)


def new_run_dir(runs_root: Path) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return runs_root / f"{stamp}-{secrets.token_hex(3)}"


def runnable(
    pset: Pset, *, interpreter_given: bool = False, sandbox: SandboxConfig | None = None
) -> tuple[Pset, Totals]:
    """The papers that can run in this installation
    (:func:`rcb_env.task.environments.availability`) and, given the run's ``sandbox``, on its
    backend (:meth:`Backend.unavailable`: e.g. a paper without its Docker image), and the
    totals of the whole selection with what was left out and why."""
    ready, left_out = [], []
    for paper in pset.papers:
        a = envs.availability(paper, interpreter_given=interpreter_given)
        if a.status == "ready" and sandbox is not None:
            reason = unavailable_on(sandbox, paper)
            if reason:
                a = a.model_copy(update={"status": "unavailable", "reason": reason})
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
    (:mod:`rcb_env.dispatch.ray`). ``ray_warm``: one long-lived worker per node holding
    its sandbox factory and caches, the groups of a paper routed to the same worker.

    Raises:
        ConfigError: resuming with a different agent, configuration or task set.
    """
    # The agent is resolved first: a name that does not resolve is an error before anything of
    # a run exists on the disk.
    new_agent = make_agent or make_agent_factory(cfg, pset)
    # On Ray the nodes' engines hold the images, not the driver's: each node checks its own.
    pset, run_id = _open_run(
        pset, cfg, run_dir, resume=resume, only_ready=only_ready, here=ray_address is None
    )
    todo = _pending(pset, cfg, run_dir / RECORDS)
    if on_plan is not None:
        on_plan(len(todo))
    episodes = _Episodes(
        pset, cfg, run_dir, run_id, jobs=jobs, on_episode=on_episode, new_agent=new_agent,
        ray_address=ray_address, ray_warm=ray_warm, planned=todo,
    )  # fmt: skip
    try:
        _run_rounds(episodes, todo, infra_retries, retry_delay_s, on_plan, run_id)
    finally:
        episodes.close()
    return summarize_run(run_dir)


Item = tuple[Paper, Snippet, int]
"""One episode of a run: its paper, its snippet, its sample number."""


def _open_run(
    pset: Pset, cfg: EvalConfig, run_dir: Path, *, resume: bool, only_ready: bool, here: bool
) -> tuple[Pset, str]:
    """The selection that runs here and the run's id: a new run's manifest written, or a
    resumed run's checked against this configuration and task set.

    Raises:
        ConfigError: resuming with a different agent, configuration or task set; or a new run
            in a folder that holds one.
    """
    if only_ready:
        sandbox = cfg.sandbox if here else None
        pset, totals = runnable(pset, interpreter_given=names_interpreter(cfg), sandbox=sandbox)
    else:
        totals = _totals(pset, [])
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = run_dir / RUN_FILE
    if resume and manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        new = _manifest(old["run_id"], cfg, pset, totals)
        for key in ("config", "task_set_hash"):
            if _comparable(key, old.get(key)) != _comparable(key, new[key]):
                raise ConfigError(
                    f"cannot resume {run_dir}: its {key.replace('_', ' ')} differs from this "
                    "command's (same agent, settings and tasks are required)"
                )
        return pset, str(old["run_id"])
    if manifest_path.exists() and not resume:
        raise ConfigError(f"{run_dir} already holds a run; pass --resume to continue it")
    write_json_atomic(manifest_path, _manifest(run_dir.name, cfg, pset, totals))
    return pset, run_dir.name


def _comparable(key: str, value: Any) -> Any:
    """A manifest's entry as a resumed run compares it: the config's sandbox with its
    backend's options complete (:func:`rcb_env.sandbox.registry.comparable`, which also reads
    a manifest of an older version)."""
    if key != "config" or not isinstance(value, dict):
        return value
    return {**value, "sandbox": comparable(value.get("sandbox") or {})}


def _pending(pset: Pset, cfg: EvalConfig, records_path: Path) -> list[Item]:
    """The episodes without a final record that counts (missing, or an infrastructure error)."""
    done = {
        key
        for key, r in final_records(read_records(records_path)).items()
        if r.status is not EpisodeStatus.INFRA_ERROR
    }
    return [
        (p, s, k)
        for k in range(cfg.samples)
        for p in pset.papers
        for s in p.snippets
        if (s.id, k) not in done
    ]


class _Episodes:
    """Where a run's episodes run (here, ``jobs`` at a time, or on Ray) and where their records
    go: every record appended as it comes, the infrastructure failures of the last round kept
    for the next."""

    def __init__(
        self,
        pset: Pset,
        cfg: EvalConfig,
        run_dir: Path,
        run_id: str,
        *,
        jobs: int,
        on_episode: Callable[[EpisodeRecord], None] | None,
        new_agent: AgentFactory,
        ray_address: str | None,
        ray_warm: bool,
        planned: list[Item],
    ) -> None:
        self.pset, self.cfg, self.run_id, self.jobs = pset, cfg, run_id, jobs
        self.on_episode = on_episode
        self.failed: list[Item] = []
        self.writer = RecordLog(run_dir / RECORDS).open()
        self.dispatcher: Any = None
        self.factory: SandboxFactory | None = None
        self.prewarmer: Prewarmer | None = None
        if ray_address is not None:
            from rcb_env.dispatch.ray import RayDispatcher

            self.dispatcher = RayDispatcher(ray_address, jobs=jobs, warm=ray_warm)
        else:
            self.new_agent = new_agent
            self.factory = SandboxFactory(cfg.sandbox)
            self.prewarmer = Prewarmer(
                self.factory.grading_executor, cfg.grading, [p for p, _, _ in planned]
            )

    def keep(self, record: EpisodeRecord, item: Item) -> None:
        self.writer.append(record)
        if record.status is EpisodeStatus.INFRA_ERROR:
            self.failed.append(item)
        if self.on_episode is not None:
            self.on_episode(record)

    def run(self, items: list[Item]) -> None:
        if self.dispatcher is not None:
            _run_on_ray(self.dispatcher, items, self.pset, self.cfg, self.run_id, self.keep)
            return
        with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as pool:
            for future in [pool.submit(self._one, item) for item in items]:
                future.result()

    def _one(self, item: Item) -> None:
        paper, snippet, sample = item
        assert self.factory is not None
        if self.prewarmer is not None:
            self.prewarmer.starting(paper)
        record = run_episode(
            paper, snippet, sample, self.new_agent(), self.cfg, self.factory, self.run_id
        )
        self.keep(record, item)

    def close(self) -> None:
        self.writer.close()
        if self.prewarmer is not None:
            self.prewarmer.close()
        if self.factory is not None:
            self.factory.close()
        if self.dispatcher is not None:
            self.dispatcher.close()


def _run_rounds(
    episodes: _Episodes,
    todo: list[Item],
    infra_retries: int,
    retry_delay_s: float,
    on_plan: Callable[[int], None] | None,
    run_id: str,
) -> None:
    """``todo``, then up to ``infra_retries`` rounds of what failed for infrastructure reasons,
    ``retry_delay_s`` x round apart."""
    batch, planned = list(todo), len(todo)

    def run_round(_round: int) -> list[Item]:
        """One round; what failed in it for infrastructure reasons (the next round's)."""
        nonlocal batch
        episodes.run(batch)
        batch = list(episodes.failed)
        episodes.failed.clear()
        return batch

    def next_round(round_: int, _why: str) -> None:
        nonlocal planned
        planned += len(batch)
        if on_plan is not None:
            on_plan(planned)
        log.warning(
            "retrying infrastructure failures", run_id=run_id, round=round_, episodes=len(batch)
        )

    rounds = RetryPolicy(
        attempts=1 + max(0, infra_retries), delay_s=retry_delay_s, backoff="linear"
    )
    rounds.call(
        run_round,
        again=lambda failed: f"{len(failed)} infrastructure failures" if failed else None,
        on_retry=next_round,
    )


def _run_on_ray(
    dispatcher: Any,
    items: list[tuple[Paper, Snippet, int]],
    pset: Pset,
    cfg: EvalConfig,
    run_id: str,
    keep: Callable[[EpisodeRecord, Item], None],
) -> None:
    """``items`` as one job per snippet (its pending samples); records kept as they come."""
    from rcb_env.catalog import BENCHMARKS as BENCHMARK_NAMES
    from rcb_env.dispatch.ray import TaskRef, ship_tasks
    from rcb_env.runner.jobs import EvalGroup

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

    def on_done(job: EvalGroup, records: list[dict[str, Any]]) -> None:
        for data in records:
            record = EpisodeRecord.model_validate(data)
            keep(record, lookup[(job.task.paper_id, job.task.snippet, record.sample)])

    def on_failure(job: EvalGroup, why: str) -> None:
        for k in job.samples:
            paper, snippet, _ = lookup[(job.task.paper_id, job.task.snippet, k)]
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

    jobs = []
    for members in groups.values():
        paper, snippet = members[0][0], members[0][1]
        where, tree = located[paper.id]
        task = TaskRef(where, tree, paper.id, snippet.name, task_hash(snippet))
        jobs.append(EvalGroup(task, tuple(k for *_, k in members), cfg, run_id))
    dispatcher.run(jobs, on_done, on_failure)
