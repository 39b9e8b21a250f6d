"""Rollout groups on a Ray cluster: one Ray task per group (k samples of one task, one template,
one sandbox each on the node that runs it), on the ``rcb_sandbox`` resource, spread over the
nodes and run again elsewhere when a node dies; finished groups stream back to the driver as
they complete. The policy is built on the worker from a factory the driver gives (a model
client cannot cross processes); model calls go from the workers straight to the model server.

Needs ``ray`` (``pip install 'rcb-env[ray]'``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import ray

from rcb_env.rl.policy import Policy
from rcb_env.rl.rollout import Group, RolloutConfig, rollout_group
from rcb_env.runner.ray_runner import RESOURCE, _tasks_on_node
from rcb_env.sandbox import SandboxConfig


def _group_on_node(
    where: str,
    task_id: str,
    task_hash: str,
    policy_factory: Callable[[], Policy],
    k: int,
    cfg_json: str,
    sandbox_json: str,
    group_id: str,
) -> dict[str, Any]:
    from rcb_env.runner.episode import task_hash as th

    paper_id, _, name = task_id.partition("/")
    paper = _tasks_on_node(where).paper(paper_id)
    snippet = paper.snippet(name)
    if th(snippet) != task_hash:
        raise RuntimeError(f"this node has a different copy of {task_id} (content hash differs)")
    group = asyncio.run(
        rollout_group(
            paper,
            snippet,
            policy_factory(),
            k,
            config=RolloutConfig.model_validate_json(cfg_json),
            sandbox=SandboxConfig.model_validate_json(sandbox_json),
            group_id=group_id,
        )
    )
    data: dict[str, Any] = group.model_dump(mode="json")
    data["node"] = ray.get_runtime_context().get_node_id()
    return data


def rollout_groups(
    where: str,
    task_ids: list[str],
    policy_factory: Callable[[], Policy],
    k: int,
    *,
    config: RolloutConfig | None = None,
    sandbox: SandboxConfig | None = None,
    on_group: Callable[[Group, str], None] | None = None,
    max_retries: int = 3,
) -> list[Group]:
    """One group of ``k`` samples per task id (``<paper>/<snippet>`` of the benchmark or folder
    ``where``), on the Ray cluster this process is connected to (``ray.init`` first). Each
    finished group reaches ``on_group(group, node_id)`` as it completes; all are returned."""
    from rcb_env.runner.episode import task_hash
    from rcb_env.task import load

    if not ray.cluster_resources().get(RESOURCE):  # type: ignore[no-untyped-call]
        raise RuntimeError(f"no node of the Ray cluster declares the {RESOURCE!r} resource")
    pset = load(where)
    cfg = (config or RolloutConfig()).model_dump_json()
    sb = (sandbox or SandboxConfig()).model_dump_json()
    remote = ray.remote(_group_on_node).options(
        num_cpus=0,
        resources={RESOURCE: 1},
        scheduling_strategy="SPREAD",
        max_retries=max_retries,
        retry_exceptions=False,
    )
    pending = {}
    for i, task_id in enumerate(task_ids):
        paper_id, _, name = task_id.partition("/")
        snippet = pset.paper(paper_id).snippet(name)
        ref = remote.remote(
            where,
            task_id,
            task_hash(snippet),
            policy_factory,
            k,
            cfg,
            sb,
            f"g{i}-{snippet.slug[:24]}",
        )
        pending[ref] = task_id
    groups: list[Group] = []
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=5.0)
        for ref in ready:
            pending.pop(ref)
            data = ray.get(ref)
            node = str(data.pop("node"))
            group = Group.model_validate(data)
            groups.append(group)
            if on_group is not None:
                on_group(group, node)
    return groups
