"""Where an evaluation's episodes run, chosen once (:func:`dispatcher_for`, from ``--ray``):
on this machine, ``jobs`` at a time (:class:`Local`), or as Ray jobs on a cluster's sandbox
slots (:class:`OnRay`, over :mod:`rcb_env.dispatch.ray` and the jobs of
:mod:`rcb_env.runner.jobs`; needs ``rcb-env[ray]``, imported only when used). The runner
(:func:`rcb_env.runner.eval.run_eval`) takes a :class:`Dispatcher` and never asks which one
it has.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rcb_env.agent import AgentFactory
from rcb_env.episode.driver import Episode
from rcb_env.episode.outcome import EpisodeOutcome
from rcb_env.errors import InfraError
from rcb_env.grading.prewarm import Prewarmer
from rcb_env.results.records import EpisodeRecord
from rcb_env.runner.episode import EvalConfig, run_episode
from rcb_env.sandbox import SandboxFactory
from rcb_env.task.models import Paper, Pset, Snippet, task_hash

if TYPE_CHECKING:
    from rcb_env.dispatch.ray import RayDispatcher
    from rcb_env.runner.jobs import EvalGroup

__all__ = ["Dispatcher", "Item", "Keep", "Local", "OnRay", "RunContext", "dispatcher_for"]

Item = tuple[Paper, Snippet, int]
"""One episode of a run: its paper, its snippet, its sample number."""
Keep = Callable[[EpisodeRecord, Item], None]
"""Where a finished episode's record goes (the run's log, its retry rounds)."""


@dataclass(frozen=True)
class RunContext:
    """What every episode of a run shares: the runnable selection, the configuration, the
    run's id and the factory of its agents."""

    pset: Pset
    cfg: EvalConfig
    run_id: str
    new_agent: AgentFactory
    stop: Callable[[], bool] = lambda: False
    """True once no episode may start any more (the run reached its spending ceiling); the
    episodes in flight finish."""
    started: Callable[[Item, Episode], None] = lambda *_: None
    """Handed each episode as it starts here (what it spends counts toward the ceiling while
    it runs)."""


class Dispatcher(Protocol):
    """Runs a run's episodes somewhere. One per run: :meth:`start`, :meth:`run` (once per
    round), :meth:`close`."""

    @property
    def here(self) -> bool:
        """Do the episodes run on this machine (so its backend decides what can run)?"""
        ...

    def start(self, run: RunContext, planned: Sequence[Item]) -> None:
        """Get ready for ``run``, whose first round is ``planned``."""
        ...

    def run(self, items: list[Item], keep: Keep) -> None:
        """Run ``items``, each record handed to ``keep`` as it comes."""
        ...

    def close(self) -> None:
        """Release what :meth:`start` took (sandboxes, a Ray connection)."""
        ...


class Local:
    """The episodes on this machine, ``jobs`` at a time, in one sandbox factory whose grading
    processes are warmed ahead of the papers to come."""

    here = True

    def __init__(self, jobs: int = 1) -> None:
        self.jobs = max(1, jobs)
        self._run: RunContext | None = None
        self._factory: SandboxFactory | None = None
        self._prewarmer: Prewarmer | None = None

    def start(self, run: RunContext, planned: Sequence[Item]) -> None:
        self._run = run
        self._factory = SandboxFactory(run.cfg.sandbox)
        self._prewarmer = Prewarmer(
            self._factory.grading_executor, run.cfg.grading, [p for p, _, _ in planned]
        )

    def run(self, items: list[Item], keep: Keep) -> None:
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            for future in [pool.submit(self._one, item, keep) for item in items]:
                future.result()

    def _one(self, item: Item, keep: Keep) -> None:
        assert self._run is not None, "start() first"
        assert self._factory is not None
        paper, snippet, sample = item
        run = self._run
        if run.stop():  # the run reached its ceiling: this episode stays pending
            return
        if self._prewarmer is not None:
            self._prewarmer.starting(paper)
        record = run_episode(
            paper, snippet, sample, run.new_agent(), run.cfg, self._factory, run.run_id,
            on_start=lambda episode: run.started(item, episode),
        )  # fmt: skip
        keep(record, item)

    def close(self) -> None:
        if self._prewarmer is not None:
            self._prewarmer.close()
        if self._factory is not None:
            self._factory.close()


class OnRay:
    """The episodes as Ray jobs on the cluster at ``address`` (``local``: a Ray instance here
    with ``jobs`` sandbox slots): one job per snippet's pending samples, records streamed back
    and kept here only. ``warm``: one long-lived worker per node holding its sandbox factory
    and caches, the groups of a paper routed to the same worker."""

    here = False  # the nodes' engines hold the images, not the driver's: each node checks its own

    def __init__(self, address: str, *, jobs: int = 1, warm: bool = False) -> None:
        self.address, self.jobs, self.warm = address, jobs, warm
        self._run: RunContext | None = None
        self._ray: RayDispatcher | None = None

    def start(self, run: RunContext, planned: Sequence[Item]) -> None:
        from rcb_env.dispatch.ray import RayDispatcher

        del planned
        self._run = run
        self._ray = RayDispatcher(self.address, jobs=self.jobs, warm=self.warm)

    def run(self, items: list[Item], keep: Keep) -> None:
        assert self._run is not None, "start() first"
        assert self._ray is not None
        _run_on_ray(self._ray, items, self._run, keep)

    def close(self) -> None:
        if self._ray is not None:
            self._ray.close()


def dispatcher_for(ray_address: str | None, *, jobs: int = 1, warm: bool = False) -> Dispatcher:
    """The dispatcher ``--ray`` asks for: none, this machine (``jobs`` at a time); an address
    (or ``local``), Ray (``warm``: ``--ray-warm``)."""
    if ray_address is None:
        return Local(jobs)
    return OnRay(ray_address, jobs=jobs, warm=warm)


def _run_on_ray(dispatcher: Any, items: list[Item], run: RunContext, keep: Keep) -> None:
    """``items`` as one job per snippet (its pending samples); records kept as they come."""
    from rcb_env.catalog import BENCHMARKS as BENCHMARK_NAMES
    from rcb_env.dispatch.ray import TaskRef, ship_tasks
    from rcb_env.runner.jobs import EvalGroup

    pset, cfg, run_id = run.pset, run.cfg, run.run_id
    groups: dict[str, list[Item]] = {}
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
    dispatcher.run(jobs, on_done, on_failure, stop=run.stop)
