"""Run many episodes (snippets x samples) with N parallel workers, writing a record per finished
episode as it happens; resume a killed run without losing or repeating finished episodes."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from rcb_env.agent import AgentFactory
from rcb_env.dispatch.runnable import RunsIn, split
from rcb_env.episode.outcome import EpisodeStatus
from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.grading.provenance import grader_version, hash_of_tests
from rcb_env.logs import get_logger
from rcb_env.results.ledger import episode_key, eval_ledger
from rcb_env.results.records import (
    RECORDS,
    RUN_FILE,
    EpisodeRecord,
    RecordLog,
    read_records,
    write_json_atomic,
)
from rcb_env.results.summary import STOPPED, Summary, Totals, Unavailable, summarize_run
from rcb_env.retry import RetryPolicy
from rcb_env.runner.dispatchers import Dispatcher, Item, Local, RunContext
from rcb_env.runner.episode import EvalConfig, make_agent_factory, run_episode
from rcb_env.sandbox.registry import comparable
from rcb_env.task.models import Pset, task_hash

__all__ = [
    "RECORDS",
    "RUN_FILE",
    "EvalConfig",
    "RunCeiling",
    "make_agent_factory",
    "manifest",
    "new_run_dir",
    "open_run",
    "run_episode",
    "run_eval",
    "runnable",
]

RUN_SCHEMA = "rcb-env/run/1"
log = get_logger(__name__)


class RunCeiling(Frozen):
    """A ceiling on a whole run's spending, summed over every record of the run folder (every
    session of a resumed run, infrastructure failures and the episodes that finish after it was
    reached included). Once the total reaches it no episode starts; those in flight finish
    under their own budgets (``--max-cost``/``--max-tokens``), so that what they spent is
    graded and recorded rather than thrown away. Not part of the run's configuration: a
    resumed run takes a new ceiling."""

    max_cost: float | None = Field(default=None, ge=0)
    """Start no episode once the run's episodes have cost this much in all (USD, from
    --prices)."""
    max_tokens: int | None = Field(default=None, ge=0)
    """Start no episode once the run's episodes have used this many model tokens in all."""

    def reached(self, cost: float, tokens: int) -> str | None:
        """Which ceiling a run that spent ``cost`` and ``tokens`` has reached (None: none)."""
        if self.max_cost is not None and cost >= self.max_cost:
            return f"cost {cost:.6g} USD >= ceiling {self.max_cost:g} USD"
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"tokens {tokens} >= ceiling {self.max_tokens}"
        return None


class Spending(Protocol):
    """What an episode has spent so far (:class:`~rcb_env.episode.driver.Episode` has it)."""

    @property
    def cost(self) -> float: ...

    @property
    def tokens(self) -> int: ...


def new_run_dir(runs_root: Path) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return runs_root / f"{stamp}-{secrets.token_hex(3)}"


def runnable(pset: Pset, cfg: RunsIn | None = None, *, here: bool = True) -> tuple[Pset, Totals]:
    """The papers that can run for the run's configuration ``cfg`` (the one rule:
    :func:`rcb_env.dispatch.runnable.split`; ``here``: on this machine, whose backend then
    decides too), and the totals of the whole selection with what was left out and why."""
    ready, left = split(pset, cfg, check_backend=here)
    left_out = [
        Unavailable(
            paper=u.paper, snippet=u.snippet, reason=u.reason, snippets=u.snippets, weight=u.weight
        )
        for u in left
    ]
    return ready, _totals(pset, left_out)


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


def manifest(run_id: str, cfg: EvalConfig, pset: Pset, totals: Totals) -> dict[str, Any]:
    """A run's manifest (``run.json``): what defines it (its configuration, its tasks by
    content hash), what its verdicts depend on (the grader's version, each snippet's test file
    by content hash: what a regrading compares) and the whole selection's totals."""
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
        "grader": grader_version(),
        "test_hashes": {s.id: hash_of_tests(p, s) for p in pset.papers for s in p.snippets},
    }


def run_eval(
    pset: Pset,
    cfg: EvalConfig,
    run_dir: Path,
    *,
    dispatcher: Dispatcher | None = None,
    jobs: int = 1,
    resume: bool = False,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    infra_retries: int = 1,
    retry_delay_s: float = 5.0,
    make_agent: AgentFactory | None = None,
    only_ready: bool = True,
    ceiling: RunCeiling | None = None,
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

    ``ceiling``: the run's spending ceiling (:class:`RunCeiling`); a run that stops at it
    records so in its manifest (``stopped``, read into the summary), and ``resume`` continues
    it, with the same or a new ceiling.

    ``dispatcher`` is where the episodes run (:mod:`rcb_env.runner.dispatchers`, chosen once
    from ``--ray`` by :func:`~rcb_env.runner.dispatchers.dispatcher_for`): by default this
    machine, ``jobs`` at a time; :class:`~rcb_env.runner.dispatchers.OnRay`, a Ray cluster's
    sandbox slots, records streamed back and written here only.

    Raises:
        ConfigError: resuming with a different agent, configuration or task set.
    """
    where = dispatcher if dispatcher is not None else Local(jobs)
    # The agent is resolved first: a name that does not resolve is an error before anything of
    # a run exists on the disk.
    new_agent = make_agent or make_agent_factory(cfg, pset)
    pset, run_id = _open_run(
        pset, cfg, run_dir, resume=resume, only_ready=only_ready, here=where.here
    )
    todo = _pending(pset, cfg, run_dir / RECORDS)
    if on_plan is not None:
        on_plan(len(todo))
    episodes = _Episodes(run_dir, where, on_episode, ceiling or RunCeiling())
    try:
        context = RunContext(
            pset, cfg, run_id, new_agent, stop=episodes.stopped, started=episodes.started
        )
        where.start(context, todo)
        _run_rounds(episodes, todo, infra_retries, retry_delay_s, on_plan, run_id)
    finally:
        episodes.close()
    # what is left to do is read again only when a ceiling stopped the run
    left = len(_pending(pset, cfg, run_dir / RECORDS)) if episodes.reached is not None else 0
    _record_stop(run_dir, episodes, left)
    return summarize_run(run_dir)


def _record_stop(run_dir: Path, episodes: _Episodes, left: int) -> None:
    """The run's manifest says whether this session stopped at its ceiling (a later session
    that finishes the run clears it)."""
    manifest_path = run_dir / RUN_FILE
    data = json.loads(manifest_path.read_text())
    if episodes.reached is None and STOPPED not in data:
        return  # nothing to say and nothing to clear: the manifest is left as it is
    if episodes.reached is None or not left:  # a ceiling reached by the last episode stops nothing
        data.pop(STOPPED, None)
    else:
        data[STOPPED] = {
            "reason": "ceiling",
            "detail": episodes.reached,
            "ceiling": episodes.ceiling.model_dump(mode="json"),
            "cost": round(episodes.cost, 6),
            "tokens": episodes.tokens,
            "pending": left,
            "in_flight": "finished",
        }
        log.warning("run stopped at its ceiling", run=str(run_dir), why=episodes.reached)
    write_json_atomic(manifest_path, data)


def _open_run(
    pset: Pset, cfg: EvalConfig, run_dir: Path, *, resume: bool, only_ready: bool, here: bool
) -> tuple[Pset, str]:
    """The selection that runs and the run's id: a new run's manifest written, or a resumed
    run's checked against this configuration and task set. ``here``: the episodes run on this
    machine (its backend decides what can run, :func:`runnable`).

    Raises:
        ConfigError: resuming with a different agent, configuration or task set; or a new run
            in a folder that holds one.
    """
    if only_ready:
        pset, totals = runnable(pset, cfg, here=here)
    else:
        totals = _totals(pset, [])
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = run_dir / RUN_FILE
    if resume and manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        new = manifest(old["run_id"], cfg, pset, totals)
        for key in ("config", "task_set_hash"):
            if _comparable(key, old.get(key)) != _comparable(key, new[key]):
                raise ConfigError(
                    f"cannot resume {run_dir}: its {key.replace('_', ' ')} differs from this "
                    "command's (same agent, settings and tasks are required)"
                )
        return pset, str(old["run_id"])
    if manifest_path.exists() and not resume:
        raise ConfigError(f"{run_dir} already holds a run; pass --resume to continue it")
    write_json_atomic(manifest_path, manifest(run_dir.name, cfg, pset, totals))
    return pset, run_dir.name


def open_run(pset: Pset, cfg: EvalConfig, run_dir: Path) -> tuple[Pset, str]:
    """A run folder for episodes that come as they come (``rcb-env serve``): its manifest
    written (or, a folder that holds this run already, checked), the selection's runnable part
    and the run's id.

    Raises:
        ConfigError: the folder holds a run of another configuration or task set.
    """
    return _open_run(pset, cfg, run_dir, resume=True, only_ready=True, here=True)


def _comparable(key: str, value: Any) -> Any:
    """A manifest's entry as a resumed run compares it: the config's sandbox with its
    backend's options complete (:func:`rcb_env.sandbox.registry.comparable`, which also reads
    a manifest of an older version)."""
    if key != "config" or not isinstance(value, dict):
        return value
    return {**value, "sandbox": comparable(value.get("sandbox") or {})}


def _pending(pset: Pset, cfg: EvalConfig, records_path: Path) -> list[Item]:
    """The episodes without a final record that counts (missing, or an infrastructure error),
    as the run folder's ledger has them (:func:`rcb_env.results.ledger.eval_ledger`)."""
    ledger = eval_ledger(records_path)
    try:
        return ledger.pending(
            [(p, s, k) for k in range(cfg.samples) for p in pset.papers for s in p.snippets],
            lambda item: episode_key(item[1].id, item[2]),
        )
    finally:
        ledger.close()


class _Episodes:
    """A run's episodes as its rounds see them: run where the dispatcher runs them, every
    record appended as it comes, the infrastructure failures of the last round kept for the
    next."""

    def __init__(
        self,
        run_dir: Path,
        dispatcher: Dispatcher,
        on_episode: Callable[[EpisodeRecord], None] | None,
        ceiling: RunCeiling,
    ) -> None:
        self.dispatcher = dispatcher
        self.on_episode = on_episode
        self.failed: list[Item] = []
        self.ceiling = ceiling
        # What the run spent before this session (every record, superseded ones too: the
        # money was spent), then each record as it comes.
        earlier = read_records(run_dir / RECORDS)
        self.cost = sum(r.cost for r in earlier)
        self.tokens = sum(r.tokens for r in earlier)
        self.reached = ceiling.reached(self.cost, self.tokens)
        self._live: dict[tuple[str, int], Spending] = {}
        """The episodes running here, by (snippet, sample): what they spend while they run."""
        self._lock = threading.Lock()
        self.writer = RecordLog(run_dir / RECORDS).open()

    def started(self, item: Item, episode: Spending) -> None:
        """``item``'s episode runs now (here: its spending is read while it runs)."""
        with self._lock:
            self._live[(item[1].id, item[2])] = episode

    def stopped(self) -> bool:
        """Has the run reached its ceiling (no episode may start)? The records' totals and what
        the episodes in flight here have spent so far."""
        with self._lock:
            if self.reached is None and self._live:
                live = list(self._live.values())
                cost = self.cost + sum(e.cost for e in live)
                tokens = self.tokens + sum(e.tokens for e in live)
                why = self.ceiling.reached(cost, tokens)
                if why is not None:
                    self.reached = f"{why}, {len(live)} episode(s) in flight included"
            return self.reached is not None

    def keep(self, record: EpisodeRecord, item: Item) -> None:
        self.writer.append(record)
        with self._lock:
            self._live.pop((item[1].id, item[2]), None)
            self.cost += record.cost
            self.tokens += record.tokens
            self.reached = self.reached or self.ceiling.reached(self.cost, self.tokens)
        if record.status is EpisodeStatus.INFRA_ERROR:
            self.failed.append(item)
        if self.on_episode is not None:
            self.on_episode(record)

    def run(self, items: list[Item]) -> None:
        self.dispatcher.run(items, self.keep)

    def close(self) -> None:
        self.writer.close()
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
        if not episodes.stopped():
            episodes.run(batch)
        # stopped at the ceiling: what failed stays pending for a resumed run
        batch = [] if episodes.stopped() else list(episodes.failed)
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
