"""Everything rcb-env runs on a Ray cluster goes through this one dispatcher: an evaluation's
groups, RL rollout groups (:mod:`rcb_env.rl.ray_groups`), a regrading's gradings, the
reward-hack suite's gradings and the leak audit's papers are kinds of :class:`Job`, each a small
typed description the driver sends and a ``run`` the node executes, with the same machinery for
all.

Every job needs one unit of the custom resource ``rcb_sandbox`` (every node declares how many
sandboxes it can run at once, so Ray never oversubscribes a node). It runs either as a Ray
task, spread over the nodes, in a sandbox factory of its own (closed at the end: no sandbox is
left behind) and retried by Ray when its node dies (``max_retries``), or, warm, on its node's
long-lived worker, whose sandbox factories (prepared templates, warm grading processes,
containers) and loaded task sets persist across the jobs it runs; Ray does not replace a dead
actor, so the driver sends a lost worker's jobs to another one. On the node, a job finds the
tasks by the driver's folder or benchmark name (unpacked from the driver's archive when the node
lacks them) and refuses a copy whose content hash differs, and makes the job's paper runnable
there when the backend can (docker: its image built on the node; :meth:`Node.prepare`), or
fails the job as an infrastructure error naming the paper, the node and why. The driver streams
results back as jobs finish (``ray.wait``), ends a job that outlives its own budgets by
:data:`WATCHDOG_MARGIN_S` per episode (the watchdog), and is the only writer of what it
records (an evaluation's ``episodes.jsonl``), so a retry can never write a record twice. Each
evaluation record names the node that ran it and the attempt of its group.

Local mode: ``ray.init(num_cpus=..., resources={"rcb_sandbox": jobs})`` on this machine. Cluster
mode: ``ray.init(address=...)``; each worker node was started with
``ray start --address=HEAD --resources='{"rcb_sandbox": N}'`` after ``rcb-env setup`` (docker: a
paper's image missing there is built on the node by its first job) on that node.

Needs ``ray`` (``pip install 'rcb-env[ray]'``).
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import ray

from rcb_env import config
from rcb_env.errors import ConfigError, SandboxError
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.sandbox._remove import remove_tree
from rcb_env.sandbox.backend import preparation_time
from rcb_env.task.models import Paper, Pset, Snippet, task_hash

if TYPE_CHECKING:
    pass

RESOURCE = "rcb_sandbox"
#: Seconds a job may take per episode beyond its own budgets before the driver's watchdog ends
#: it (the node enforces the budgets themselves).
WATCHDOG_MARGIN_S = 300.0
#: Task trees larger than this are not shipped through the object store (prepare the node).
SHIP_LIMIT = 512 * 2**20


class NoSandboxSlotsError(ConfigError, RuntimeError):
    """The Ray cluster has no node that declares the ``rcb_sandbox`` resource (a command says
    so and exits 4, like any other setting it cannot work with)."""


def _sandbox_slots() -> int:
    """The sandbox slots of the cluster's live nodes."""
    return int(ray.cluster_resources().get(RESOURCE, 0))  # type: ignore[no-untyped-call]


def watchdog_s(budget_s: float, episodes: int = 1, sandbox: SandboxConfig | None = None) -> float:
    """The watchdog's deadline of a job whose budgets allow ``budget_s`` seconds for ``episodes``
    episodes run one after another, in sandboxes of ``sandbox``'s backend (whose preparation of
    a node that lacks a paper's environment is allowed for: docker builds the image there)."""
    prepare = preparation_time(sandbox.backend) if sandbox is not None else 0.0
    return budget_s + max(1, episodes) * WATCHDOG_MARGIN_S + prepare


@ray.remote(num_cpus=0)
class _Attempts:
    """Counts how many times each job started (a job moved off a dead node starts twice)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def bump(self, key: str) -> int:
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]


@ray.remote(num_cpus=0)
class _ModelCaps:
    """The model endpoints' concurrency caps for the whole cluster (an async actor: a waiting
    acquire does not block the others)."""

    def __init__(self) -> None:
        import asyncio

        self.sems: dict[str, asyncio.Semaphore] = {}

    async def acquire(self, key: str, size: int) -> None:
        import asyncio

        sem = self.sems.setdefault(key, asyncio.Semaphore(max(1, size)))
        await sem.acquire()

    async def release(self, key: str) -> None:
        self.sems[key].release()


def model_caps() -> Any:
    """The cluster's model-cap actor (created on this, the driver's, node on first use): the
    model clients of every worker find it by name and take their per-endpoint slots there."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rcb_env.agent import MODEL_CAP_ACTOR as CLUSTER_CAP

    try:
        return ray.get_actor(CLUSTER_CAP)
    except ValueError:
        here = ray.get_runtime_context().get_node_id()
        return _ModelCaps.options(  # type: ignore[attr-defined]
            name=CLUSTER_CAP,
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
        ).remote()


@functools.lru_cache(maxsize=4)
def tasks_on_node(where: str) -> Pset:
    from rcb_env.task import load

    return load(where)


def ship_tasks(pset: Pset) -> Any:
    """The task tree as a tar archive in Ray's object store, for nodes that lack it (None when
    it is too large: those nodes must be prepared with ``rcb-env get``). Pass it to tasks inside
    a list (``[ref]``) so that Ray does not resolve it for every task."""
    import io
    import tarfile

    size = sum(p.stat().st_size for p in pset.root.rglob("*") if p.is_file())
    if size > SHIP_LIMIT:
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(str(pset.root), arcname=".")
    return ray.put(buf.getvalue())


def tasks_here(where: str, tree: Any) -> str:
    """Where this node finds the tasks ``where`` names: as named when this node has them, else
    unpacked from the driver's archive (``tree``): a named benchmark into its usual place (so
    that its overlay applies), a folder into a cache of this node, keyed by content.

    Raises:
        RuntimeError: the node lacks the tasks and nothing was shipped.
    """
    import hashlib
    import io
    import tarfile

    from rcb_env import catalog, config
    from rcb_env.errors import TaskLoadError

    try:
        tasks_on_node(where)
        return where
    except (TaskLoadError, OSError):
        if tree is None:
            raise RuntimeError(
                f"this node has no copy of {where} and none was shipped (too large, or not "
                "asked for): run `rcb-env get` on the node"
            ) from None
    # Passed inside a list, the reference reaches the worker unresolved: only a node that lacks
    # the tasks fetches the archive.
    if isinstance(tree, list):
        tree = tree[0]
    data: bytes = tree if isinstance(tree, bytes) else ray.get(tree)
    known = catalog.BENCHMARKS.get(where.lower())
    if known is not None:
        dest = known.local_path()
    else:
        digest = hashlib.sha256(data).hexdigest()[:16]
        dest = config.rcb_home() / "ray-tasks" / digest / Path(where).name
    if not dest.exists():
        # Unpacked beside its place under a name of this process's own, then renamed into
        # place: jobs starting at once on a node that lacks the tasks each unpack their copy,
        # the first rename wins and the others' copies go.
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        staging.chmod(0o755)  # as a folder made the usual way: the sandbox user reads it
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                tar.extractall(staging, filter="data")
            with contextlib.suppress(OSError):  # another job's copy is in place already
                staging.rename(dest)
        finally:
            remove_tree(staging)  # bounded and total, whatever the archive made
        if not dest.exists():
            raise RuntimeError(f"the shipped tasks could not be put in place at {dest}")
    return where if known is not None else str(dest)


@dataclass(frozen=True)
class TaskRef:
    """A snippet as the driver names it to a node: where its tasks are (a benchmark name or a
    folder), their shipped tree for a node that lacks them (``[ref]`` from :func:`ship_tasks`,
    or None), and its content hash."""

    where: str
    tree: Any
    paper_id: str
    snippet: str
    task_hash: str

    @property
    def id(self) -> str:
        return f"{self.paper_id}/{self.snippet}"


class Node:
    """What a job gets on the node that runs it: the node's id, the job's attempt (2 after a
    move off a dead node), the sandbox factory to open its sandboxes from (a warm worker's
    persists across jobs), and the node's copy of the tasks."""

    def __init__(self, factory: SandboxFactory, attempt: int) -> None:
        self.id: str = ray.get_runtime_context().get_node_id()
        self.factory = factory
        self.attempt = attempt

    def tasks(self, where: str, tree: Any = None) -> Pset:
        """This node's copy of the tasks ``where`` names (see :func:`tasks_here`)."""
        return tasks_on_node(tasks_here(where, tree))

    def prepare(self, paper: Paper) -> None:
        """Make ``paper`` runnable on this node with the job's backend when the backend can
        (docker: the paper's image built on this node's engine when it lacks it, see
        :meth:`~rcb_env.sandbox.Backend.ensure_available`); before the job's sandboxes open.

        Raises:
            RuntimeError: it cannot (the paper, this node and the reason named): the job fails
                as an infrastructure error, never a reward of 0.
        """
        try:
            self.factory.ensure_available(paper)
        except SandboxError as exc:
            raise RuntimeError(
                f"node {self.id[:12]} cannot run {paper.id} on the {self.factory.backend} "
                f"backend: {exc}"
            ) from exc

    def snippet(self, task: TaskRef) -> tuple[Pset, Paper, Snippet]:
        """``task`` as this node has it, with its task set and paper.

        Raises:
            RuntimeError: the node's copy differs from the driver's (content hash).
        """
        pset = self.tasks(task.where, task.tree)
        paper = pset.paper(task.paper_id)
        snippet = paper.snippet(task.snippet)
        if task_hash(snippet) != task.task_hash:
            raise RuntimeError(
                f"node {self.id[:12]} has a different copy of {snippet.id} (content hash "
                "differs): prepare every node from the same benchmark copy"
            )
        return pset, paper, snippet


class Job(Protocol):
    """A kind of work for one sandbox slot of a node: the driver sends the description, the node
    runs it (its result crosses back to the driver: plain data)."""

    @property
    def key(self) -> str:
        """Names the job: its attempts are counted under it."""
        ...

    @property
    def sandbox(self) -> SandboxConfig:
        """The sandboxes it opens (a warm worker keeps one factory per configuration)."""
        ...

    @property
    def home(self) -> str | None:
        """Warm mode: jobs with the same home go to the same worker (None: the least loaded)."""
        ...

    def deadline_s(self) -> float | None:
        """Seconds the driver's watchdog gives it (see :func:`watchdog_s`; None: no limit)."""
        ...

    def run(self, node: Node) -> Any:
        """The job, on the node."""
        ...


J = TypeVar("J", bound=Job)


def _start(job: Job, attempts: Any, factory: SandboxFactory) -> Any:
    attempt = int(ray.get(attempts.bump.remote(job.key)))
    return job.run(Node(factory, attempt))


def _run_cold(job: Job, attempts: Any) -> Any:
    """A job as a Ray task, in a sandbox factory of its own."""
    factory = SandboxFactory(job.sandbox)
    try:
        return _start(job, attempts, factory)
    finally:
        factory.close()


@ray.remote(num_cpus=0, concurrency_groups={"control": 1})  # type: ignore[call-overload]
class _NodeWorker:
    """Warm mode: one long-lived worker per node, holding its sandbox factories (prepared
    templates, warm grading processes, containers) and the node's loaded task sets across the
    jobs it runs; it runs as many jobs at once as the node declares sandbox slots, and answers
    the driver's own calls (``node``, ``close``) even while every slot is busy."""

    def __init__(self) -> None:
        self.factories: dict[str, SandboxFactory] = {}
        self.lock = threading.Lock()

    @ray.method(concurrency_group="control")
    def node(self) -> str:
        node: str = ray.get_runtime_context().get_node_id()
        return node

    def run(self, job: Job, attempts: Any) -> Any:
        key = job.sandbox.model_dump_json()
        with self.lock:
            factory = self.factories.get(key)
            if factory is None:
                factory = self.factories[key] = SandboxFactory(job.sandbox)
        return _start(job, attempts, factory)

    @ray.method(concurrency_group="control")
    def close(self) -> None:
        with self.lock:
            for factory in self.factories.values():
                factory.close()
            self.factories.clear()


def _why(exc: BaseException) -> str:
    """Why a job failed, in a line: what the job raised on the node (not Ray's wrapper around it
    with the node's traceback), or Ray's own error."""
    cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) else None
    shown = cause if isinstance(cause, BaseException) else exc
    return f"{type(shown).__name__}: {str(shown)[:500]}"


def connect(address: str | None, jobs: int = 1) -> bool:
    """Join the Ray cluster at ``address``, or start a local Ray with ``jobs`` sandbox slots
    (``None``/``local``); nothing when this process is connected already. Returns whether this
    call started the connection (then the caller shuts it down).

    Raises:
        NoSandboxSlotsError: no node declares the ``rcb_sandbox`` resource.
    """
    own = False
    if not ray.is_initialized():
        if address in (None, "", "local"):
            # $RCB_RAY_TEMP_DIR: the local Ray's session folder (its processes inherit it, so
            # what outlives a killed driver can be found and stopped by pid)
            given = config.settings().ray_temp_dir
            temp = str(given) if given is not None and str(given) else None
            ray.init(
                num_cpus=max(1, jobs),
                resources={RESOURCE: max(1, jobs)},
                include_dashboard=False,
                log_to_driver=False,
                _temp_dir=temp,
            )
        else:
            ray.init(address=address, log_to_driver=False)
        own = True
    if not ray.cluster_resources().get(RESOURCE):  # type: ignore[no-untyped-call]
        if own:
            ray.shutdown()
        raise NoSandboxSlotsError(
            f"no node of the Ray cluster declares the {RESOURCE!r} resource: start workers "
            f"with ray start --resources='{{\"{RESOURCE}\": N}}'"
        )
    return own


def disconnect(own: bool) -> None:
    """Undo :func:`connect` (only what it started)."""
    if own:
        ray.shutdown()


class RayDispatcher:
    """Runs jobs on the sandbox slots of a Ray cluster (connecting to it, see :func:`connect`)
    and streams their results back: as Ray tasks, or ``warm`` on one long-lived worker per node
    (kept until :meth:`close`), each sent a job when it has a free slot."""

    def __init__(
        self,
        address: str | None,
        *,
        jobs: int = 1,
        max_retries: int = 3,
        warm: bool = False,
    ) -> None:
        self.own = connect(address, jobs)
        self.caps = model_caps()  # the per-endpoint model caps hold across the cluster
        self.max_retries = max_retries
        self.warm = warm
        # The attempt counter lives on the driver's node: a worker node's death must not take it.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        self.attempts = _Attempts.options(  # type: ignore[attr-defined]
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        ).remote()
        self.cold = ray.remote(_run_cold).options(
            num_cpus=0,
            resources={RESOURCE: 1},
            scheduling_strategy="SPREAD",
            max_retries=max_retries,
            retry_exceptions=False,
        )
        self.workers: dict[str, Any] = {}
        """Warm mode: node id -> its long-lived worker (the live ones)."""
        self.slots: dict[str, int] = {}
        self.load: dict[str, int] = {}
        """Warm mode: node id -> the calls its worker holds (running, or given up on)."""
        self.stuck: dict[str, int] = {}
        """Warm mode: node id -> the calls the watchdog gave up on (a running actor call cannot
        be interrupted: each keeps its slot until the worker is replaced)."""
        self.homes: dict[str, str] = {}
        """Warm mode: a job's home -> the node whose worker runs its jobs."""
        if warm:
            try:
                self._start_workers()
            except BaseException:
                self.close()  # the workers started so far, the counter, an own Ray
                raise

    def __enter__(self) -> RayDispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_workers(self) -> None:
        for n in ray.nodes():  # type: ignore[no-untyped-call]
            slots = int((n.get("Resources") or {}).get(RESOURCE, 0))
            if n.get("Alive") and slots >= 1:
                self._start_worker(n["NodeID"], slots)
        if not self.workers:
            raise RuntimeError(f"no live node declares the {RESOURCE!r} resource")
        ray.get([w.node.remote() for w in self.workers.values()], timeout=300)

    def _start_worker(self, node: str, slots: int) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.workers[node] = _NodeWorker.options(  # type: ignore[attr-defined]
            resources={RESOURCE: slots},
            max_concurrency=slots,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        ).remote()
        self.slots[node], self.load[node], self.stuck[node] = slots, 0, 0

    def _replace_stuck(self) -> None:
        """A worker left holding only calls the watchdog gave up on is replaced by a fresh one
        on its node: the stuck calls end with the old worker, their sandboxes too."""
        for node, worker in list(self.workers.items()):
            if self.stuck[node] and self.load[node] == self.stuck[node]:
                _close_workers([worker], timeout_s=10)
                self._start_worker(node, self.slots[node])

    def _place(self, job: Job) -> str | None:
        """Warm mode: the node whose worker runs ``job`` now, or None while it has no free slot:
        its home's worker (for a home first seen, or whose node is gone: the least loaded), or
        for a job without a home any worker with a free slot."""
        if job.home is None:
            free = [n for n in self.workers if self.load[n] < self.slots[n]]
            return min(free, key=self.load.__getitem__) if free else None
        node = self.homes.get(job.home)
        if node is None or node not in self.workers:
            node = min(self.workers, key=self.load.__getitem__)
            self.homes[job.home] = node
        return node if self.load[node] < self.slots[node] else None

    def run(
        self,
        jobs: Sequence[J],
        on_done: Callable[[J, Any], None],
        on_failure: Callable[[J, str], None],
        stop: Callable[[], bool] | None = None,
    ) -> None:
        """Run ``jobs``; each result reaches ``on_done`` as its job finishes; a job that fails
        for good (its node died more than ``max_retries`` times, the watchdog's deadline
        passed, it raised) reaches ``on_failure`` with why. A job is handed to Ray when a
        sandbox slot is free for it (cold: as many at once as the cluster has slots; warm: to a
        worker with a free slot), and the watchdog's clock starts then. Once ``stop()`` is true
        no job is handed to Ray any more (those not handed are left out, neither done nor
        failed); those running finish."""
        queue: list[J] = list(jobs)
        pending: dict[Any, tuple[J, str | None, float, float | None]] = {}
        moved: dict[str, int] = {}

        def submit(job: J, node: str | None) -> None:
            if node is None:
                ref = self.cold.remote(job, self.attempts)
            else:
                self.load[node] += 1
                ref = self.workers[node].run.remote(job, self.attempts)
            pending[ref] = (job, node, time.monotonic(), job.deadline_s())

        while queue or pending:
            if stop is not None and queue and stop():
                queue.clear()
            if not self.warm:
                # Handed to Ray only when a slot is free, so a job's clock starts when it
                # starts (a job waiting in Ray's queue behind others is not late).
                room = _sandbox_slots() - len(pending)
                if room <= 0 and not pending and queue:
                    for job in queue:
                        on_failure(job, f"no live node declares the {RESOURCE!r} resource")
                    queue.clear()
                for job in queue[: max(0, room)]:
                    submit(job, None)
                del queue[: max(0, room)]
            elif not self.workers:
                for job in queue:
                    on_failure(job, "no worker is left: every node with sandbox slots is gone")
                queue.clear()
            else:
                if queue:
                    self._replace_stuck()
                for job in list(queue):
                    node = self._place(job)
                    if node is not None:
                        queue.remove(job)
                        submit(job, node)
            if not pending:
                continue
            now = time.monotonic()
            wait = min(  # wake up in time for the earliest deadline
                [5.0] + [t + d - now for _j, _n, t, d in pending.values() if d is not None]
            )
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.05, wait))
            for ref in ready:
                job, node, _t, _d = pending.pop(ref)
                if node is not None:
                    self.load[node] -= 1
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    # warm mode: the worker's node is gone; its jobs run again on another
                    # worker (Ray retries tasks, not calls on a dead actor)
                    self.workers.pop(node or "", None)
                    moved[job.key] = moved.get(job.key, 0) + 1
                    if node is None or moved[job.key] > self.max_retries:
                        on_failure(job, _why(exc))
                    else:
                        queue.insert(0, job)
                    continue
                except Exception as exc:
                    on_failure(job, _why(exc))
                    continue
                on_done(job, result)
            now = time.monotonic()
            for ref, (job, node, start, deadline) in list(pending.items()):
                if deadline is not None and now - start > deadline:
                    pending.pop(ref)
                    if node is None:
                        ray.cancel(ref, force=True)
                    else:
                        self.stuck[node] += 1
                    on_failure(job, "the driver's watchdog deadline passed")

    def results(self, jobs: Sequence[Job]) -> list[Any]:
        """Every job's result, in order.

        Raises:
            RuntimeError: a job failed for good (each failure named).
        """
        done: dict[int, Any] = {}
        failed: list[str] = []

        def keep(job: Job, result: Any) -> None:
            done[id(job)] = result

        self.run(jobs, keep, lambda job, why: failed.append(f"{job.key}: {why}"))
        if failed:
            raise RuntimeError("; ".join(failed))
        return [done[id(job)] for job in jobs]

    def close(self) -> None:
        _close_workers(list(self.workers.values()), timeout_s=60)
        self.workers.clear()
        with contextlib.suppress(Exception):
            ray.kill(self.attempts)
        if self.own:
            ray.shutdown()


def _close_workers(workers: list[Any], timeout_s: float) -> None:
    """Their sandboxes closed, then the workers themselves."""
    if not workers:
        return
    with contextlib.suppress(Exception):
        ray.get([w.close.remote() for w in workers], timeout=timeout_s)
    for w in workers:
        with contextlib.suppress(Exception):
            ray.kill(w)
