"""Episodes on a Ray cluster: the same run, records, resume and failure semantics as a local run.

The unit of work is one group: every pending sample of one snippet (RL needs whole groups; one
template per group). Each group is a Ray task that needs one unit of the custom resource
``rcb_sandbox`` (every node declares how many sandboxes it can run at once, so Ray never
oversubscribes a node), spread over the nodes, and retried by Ray when its node dies
(``max_retries``). The worker resolves the task set on its node by the driver's folder or
benchmark name and checks each snippet's content hash, runs the episodes in a sandbox factory
of its own (closed at the end: no sandbox is left behind), and returns the records; the driver
streams them back as groups finish (``ray.wait``) and is the only writer of ``episodes.jsonl``,
so a Ray retry can never write a record twice. Each record names the node that ran it and the
attempt of its group.

Local mode: ``ray.init(num_cpus=..., resources={"rcb_sandbox": jobs})`` on this machine. Cluster
mode: ``ray.init(address=...)``; each worker node was started with
``ray start --address=HEAD --resources='{"rcb_sandbox": N}'`` after ``rcb-env setup`` (or its
images) on that node.

Needs ``ray`` (``pip install 'rcb-env[ray]'``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from rcb_env.results.records import EpisodeRecord
from rcb_env.task.models import Pset

RESOURCE = "rcb_sandbox"
#: Seconds a group may take per sample beyond the episode's own wall budget before the driver's
#: watchdog cancels it (the worker enforces the episode budgets itself).
WATCHDOG_MARGIN_S = 300.0


@ray.remote(num_cpus=0)
class _Attempts:
    """Counts how many times each group started (a group moved off a dead node starts twice)."""

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
def _tasks_on_node(where: str) -> Pset:
    from rcb_env.task import load

    return load(where)


#: Task trees larger than this are not shipped through the object store (prepare the node).
SHIP_LIMIT = 512 * 2**20


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
        _tasks_on_node(where)
        return where
    except (TaskLoadError, OSError):
        if tree is None:
            raise RuntimeError(
                f"this node has no copy of {where} and it was too large to ship: run "
                "`rcb-env get` on the node"
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
        staging = dest.with_name(dest.name + ".partial")
        staging.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        staging.rename(dest)
    return where if known is not None else str(dest)


def _run_group(
    where: str,
    tree: Any,
    paper_id: str,
    snippet_name: str,
    task_hash: str,
    samples: list[int],
    cfg_json: str,
    run_id: str,
    attempts: Any,
) -> list[dict[str, Any]]:
    """One group on a worker node: the records of its episodes (JSON)."""
    from rcb_env.runner.episode import EvalConfig
    from rcb_env.sandbox import SandboxFactory

    factory = SandboxFactory(EvalConfig.model_validate_json(cfg_json).sandbox)
    try:
        return _group_records(
            where, tree, paper_id, snippet_name, task_hash, samples, cfg_json, run_id, attempts,
            factory,
        )  # fmt: skip
    finally:
        factory.close()


def _group_records(
    where: str,
    tree: Any,
    paper_id: str,
    snippet_name: str,
    task_hash: str,
    samples: list[int],
    cfg_json: str,
    run_id: str,
    attempts: Any,
    factory: Any,
) -> list[dict[str, Any]]:
    """The episodes of one group in ``factory``'s sandboxes, as records (JSON)."""
    from rcb_env.runner.episode import EvalConfig, make_agent_factory, run_episode
    from rcb_env.runner.episode import task_hash as th

    node = ray.get_runtime_context().get_node_id()
    attempt = int(ray.get(attempts.bump.remote(f"{paper_id}/{snippet_name}:{samples}")))
    pset = _tasks_on_node(tasks_here(where, tree))
    paper = pset.paper(paper_id)
    snippet = paper.snippet(snippet_name)
    if th(snippet) != task_hash:
        raise RuntimeError(
            f"node {node[:12]} has a different copy of {snippet.id} (content hash differs): "
            "prepare every node from the same benchmark copy"
        )
    cfg = EvalConfig.model_validate_json(cfg_json)
    from rcb_env import envs
    from rcb_env.runner.episode import _brings_interpreter

    ready = envs.availability(paper, interpreter_given=_brings_interpreter(cfg))
    if ready.status != "ready":
        raise RuntimeError(
            f"node {node[:12]} is not prepared for {paper.id}: {ready.reason} (run `rcb-env "
            "setup` there, or pull the images, before it joins)"
        )
    only = pset.model_copy(update={"papers": (paper.model_copy(update={"snippets": (snippet,)}),)})
    new_agent = make_agent_factory(cfg, only)
    out = []
    for sample in samples:
        record = run_episode(paper, snippet, sample, new_agent(), cfg, factory, run_id)
        out.append(
            record.model_copy(update={"node": node, "attempt": attempt}).model_dump(mode="json")
        )
    return out


@ray.remote(num_cpus=0)
class _NodeWorker:
    """Warm mode: one long-lived worker per node, holding its sandbox factories (prepared
    templates, warm containers) and the node's loaded task sets across the groups it runs; it
    runs as many groups at once as the node declares sandbox slots."""

    def __init__(self) -> None:
        self.factories: dict[str, Any] = {}

    def node(self) -> str:
        node: str = ray.get_runtime_context().get_node_id()
        return node

    def run_group(
        self,
        where: str,
        tree: Any,
        paper_id: str,
        snippet_name: str,
        task_hash: str,
        samples: list[int],
        cfg_json: str,
        run_id: str,
        attempts: Any,
    ) -> list[dict[str, Any]]:
        from rcb_env.runner.episode import EvalConfig
        from rcb_env.sandbox import SandboxFactory

        sandbox = EvalConfig.model_validate_json(cfg_json).sandbox
        key = sandbox.model_dump_json()
        factory = self.factories.get(key)
        if factory is None:
            factory = self.factories[key] = SandboxFactory(sandbox)
        return _group_records(
            where, tree, paper_id, snippet_name, task_hash, samples, cfg_json, run_id, attempts,
            factory,
        )  # fmt: skip

    def close(self) -> None:
        for factory in self.factories.values():
            factory.close()
        self.factories.clear()


def connect(address: str | None, jobs: int = 1) -> bool:
    """Join the Ray cluster at ``address``, or start a local Ray with ``jobs`` sandbox slots
    (``None``/``local``); nothing when this process is connected already. Returns whether this
    call started the connection (then the caller shuts it down).

    Raises:
        RuntimeError: no node declares the ``rcb_sandbox`` resource.
    """
    own = False
    if not ray.is_initialized():
        if address in (None, "", "local"):
            # $RCB_RAY_TEMP_DIR: the local Ray's session folder (its processes inherit it, so
            # what outlives a killed driver can be found and stopped by pid)
            temp = os.environ.get("RCB_RAY_TEMP_DIR") or None
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
        raise RuntimeError(
            f"no node of the Ray cluster declares the {RESOURCE!r} resource: start workers "
            f"with ray start --resources='{{\"{RESOURCE}\": N}}'"
        )
    return own


def _on_nodes(
    fn: Callable[..., Any], calls: list[tuple[Any, ...]], max_retries: int = 3
) -> list[Any]:
    """``fn(*args)`` for each of ``calls`` as Ray tasks on the sandbox slots (results in order)."""
    remote = ray.remote(fn).options(
        num_cpus=0,
        resources={RESOURCE: 1},
        scheduling_strategy="SPREAD",
        max_retries=max_retries,
        retry_exceptions=False,
    )
    return list(ray.get([remote.remote(*args) for args in calls]))


def _audit_paper(where: str, paper_id: str, sandbox_json: str) -> list[dict[str, Any]]:
    from rcb_env.sandbox import SandboxConfig, SandboxFactory
    from rcb_env.validation.audit import audit

    pset = _tasks_on_node(where)
    one = pset.model_copy(update={"papers": (pset.paper(paper_id),), "failures": ()})
    factory = SandboxFactory(SandboxConfig.model_validate_json(sandbox_json))
    try:
        return [f.model_dump(mode="json") for f in audit(one, factory)]
    finally:
        factory.close()


def audit_on_ray(pset: Pset, sandbox: Any) -> list[Any]:
    """The leak audit with one Ray task per paper (connect first): the same findings as a local
    audit, found on the nodes that run the episodes."""
    from rcb_env.validation.audit import Finding

    where = pset.benchmark or str(pset.root)
    calls = [(where, p.id, sandbox.model_dump_json()) for p in pset.papers if p.snippets]
    return [Finding.model_validate(f) for found in _on_nodes(_audit_paper, calls) for f in found]


def _grade_on_node(
    where: str, paper_id: str, snippet_name: str, body: str, sandbox_json: str, grading_json: str
) -> dict[str, Any]:
    from rcb_env.grading.grader import Grader, GradingConfig
    from rcb_env.sandbox import SandboxConfig, SandboxFactory

    paper = _tasks_on_node(where).paper(paper_id)
    snippet = paper.snippet(snippet_name)
    factory = SandboxFactory(SandboxConfig.model_validate_json(sandbox_json))
    try:
        grader = Grader(
            GradingConfig.model_validate_json(grading_json),
            executor=factory.grading_executor(paper),
        )
        result = grader.grade(paper, snippet, body)
    finally:
        factory.close()
    data: dict[str, Any] = result.model_dump(mode="json")
    return data


def grade_on_ray(
    where: str, paper_id: str, snippet_name: str, bodies: list[str], sandbox: Any, grading: Any
) -> list[Any]:
    """Each body graded as a Ray task (connect first): the reward-hack suite on the nodes."""
    from rcb_env.grading.models import GradeResult

    calls = [
        (where, paper_id, snippet_name, b, sandbox.model_dump_json(), grading.model_dump_json())
        for b in bodies
    ]
    return [GradeResult.model_validate(r) for r in _on_nodes(_grade_on_node, calls)]


def disconnect(own: bool) -> None:
    """Undo :func:`connect` (only what it started)."""
    if own:
        ray.shutdown()


class RayDispatcher:
    """Runs groups of (paper, snippet, samples) on Ray and streams the records back."""

    def __init__(
        self,
        address: str | None,
        *,
        jobs: int = 1,
        max_retries: int = 3,
        deadline_s: float | None = None,
        warm: bool = False,
    ) -> None:
        self.own = connect(address, jobs)
        self.caps = model_caps()  # the per-endpoint model caps hold across the cluster
        self.max_retries = max_retries
        self.deadline_s = deadline_s
        # The attempt counter lives on the driver's node: a worker node's death must not take it.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        self.attempts = _Attempts.options(  # type: ignore[attr-defined]
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        ).remote()
        self.remote = ray.remote(_run_group).options(
            num_cpus=0,
            resources={RESOURCE: 1},
            scheduling_strategy="SPREAD",
            max_retries=max_retries,
            retry_exceptions=False,
        )
        self.workers: dict[str, Any] = {}
        """Warm mode: node id -> its long-lived worker (the live ones)."""
        self.load: dict[str, int] = {}
        self.home: dict[str, str] = {}
        """Warm mode: paper id -> the node whose worker runs its groups."""
        if warm:
            self._start_workers()

    def _start_workers(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        for n in ray.nodes():  # type: ignore[no-untyped-call]
            slots = int((n.get("Resources") or {}).get(RESOURCE, 0))
            if not n.get("Alive") or slots < 1:
                continue
            node = n["NodeID"]
            self.workers[node] = _NodeWorker.options(  # type: ignore[attr-defined]
                resources={RESOURCE: slots},
                max_concurrency=slots,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            ).remote()
            self.load[node] = 0
        if not self.workers:
            raise RuntimeError(f"no live node declares the {RESOURCE!r} resource")
        ray.get([w.node.remote() for w in self.workers.values()], timeout=300)

    def _submit(self, g: tuple[str, Any, str, str, str, list[int]], cfg_json: str,
                run_id: str) -> tuple[Any, str | None]:  # fmt: skip
        """A group as a Ray task (cold), or on its paper's worker (warm): its ref and node."""
        if not self.workers:
            return self.remote.remote(*g, cfg_json, run_id, self.attempts), None
        paper = g[2]
        node = self.home.get(paper)
        if node not in self.workers:  # first seen, or its node is gone: the least loaded
            node = min(self.workers, key=lambda n: self.load[n])
            self.home[paper] = node
        self.load[node] += 1
        return self.workers[node].run_group.remote(*g, cfg_json, run_id, self.attempts), node

    def run(
        self,
        groups: list[tuple[str, Any, str, str, str, list[int]]],
        cfg_json: str,
        run_id: str,
        on_record: Callable[[EpisodeRecord], None],
        on_failure: Callable[[str, str, list[int], str], None],
    ) -> None:
        """Run ``groups`` (where the tasks are, the shipped tree or None, paper id, snippet name,
        task hash, samples); every record reaches ``on_record`` as its group finishes; a group
        that fails for good (its node died more than ``max_retries`` times, the watchdog's
        deadline passed, the worker raised) reaches ``on_failure`` with why."""
        pending: dict[Any, tuple[tuple[str, Any, str, str, str, list[int]], float]] = {}
        placed: dict[Any, str | None] = {}
        moved: dict[str, int] = {}
        for g in groups:
            ref, node = self._submit(g, cfg_json, run_id)
            pending[ref] = (g, time.monotonic())
            placed[ref] = node
        while pending:
            wait = 5.0
            if self.deadline_s is not None:  # wake up in time for the earliest deadline
                now = time.monotonic()
                wait = min(
                    wait,
                    *(self.deadline_s * max(1, len(g[5])) - (now - t) for g, t in pending.values()),
                )
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.05, wait))
            now = time.monotonic()
            for ref in ready:
                g, _start = pending.pop(ref)
                node = placed.pop(ref, None)
                if node is not None:
                    self.load[node] -= 1
                try:
                    records = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    # warm mode: the worker's node is gone; its groups run again on another
                    # worker (Ray retries tasks, not calls on a dead actor)
                    self.workers.pop(node or "", None)
                    key = f"{g[2]}/{g[3]}"
                    moved[key] = moved.get(key, 0) + 1
                    if not self.workers or moved[key] > self.max_retries:
                        on_failure(g[2], g[3], g[5], f"{type(exc).__name__}: {str(exc)[:500]}")
                        continue
                    again, where = self._submit(g, cfg_json, run_id)
                    pending[again] = (g, time.monotonic())
                    placed[again] = where
                    continue
                except Exception as exc:
                    on_failure(g[2], g[3], g[5], f"{type(exc).__name__}: {str(exc)[:500]}")
                    continue
                for data in records:
                    on_record(EpisodeRecord.model_validate(data))
            if self.deadline_s is not None:
                for ref, (g, start) in list(pending.items()):
                    if now - start > self.deadline_s * max(1, len(g[5])):
                        ray.cancel(ref, force=placed.get(ref) is None)  # no force for actors
                        pending.pop(ref)
                        node = placed.pop(ref, None)
                        if node is not None:
                            self.load[node] -= 1
                        on_failure(g[2], g[3], g[5], "the driver's watchdog deadline passed")

    def close(self) -> None:
        if self.workers:  # their sandboxes closed, then the workers themselves
            with contextlib.suppress(Exception):
                ray.get([w.close.remote() for w in self.workers.values()], timeout=60)
            for w in self.workers.values():
                with contextlib.suppress(Exception):
                    ray.kill(w)
            self.workers.clear()
        if self.own:
            ray.shutdown()


def encode_config(cfg: Any) -> str:
    return json.dumps(cfg.model_dump(mode="json"))
