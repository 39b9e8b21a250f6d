"""What every environment of one training process shares: one sandbox factory per sandbox
setting (so one masked-template cache and one warm-grading pool, however many environments a
trainer builds), one bounded pool of grading threads, and the count of episodes that could not
be scored.

A trainer builds one environment per concurrent rollout and keeps them for the whole run (TRL's
``GRPOTrainer`` pools them and never closes them). If each held a factory of its own, 64
rollouts of a torch paper would hold 64 warm grading processes of some hundred MiB each and each
environment's first grading would be cold. Here N environments grading k papers hold at most k
warm processes, and never more than the setting's ``warm_processes`` (the least recently used
idle one is closed to make room).

Lifetime: the shared resources live until :func:`close_shared` or the end of the process
(an ``atexit`` hook closes them, so no sandbox, warm process or scratch folder outlives the
trainer). An environment only ends its own episode when it is closed or collected.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from rcb_env import config
from rcb_env.logs import get_logger
from rcb_env.sandbox import SandboxConfig, SandboxFactory

log = get_logger(__name__)

_lock = threading.Lock()
_factories: dict[str, SandboxFactory] = {}
_pool: ThreadPoolExecutor | None = None
_pool_size: int | None = None
_unscored: Counter[str] = Counter()

GRADING_WORKERS_ENV = "RCB_ENV_GRADING_WORKERS"
"""Environment variable: how many gradings of the process may run at once."""


def shared_factory(config: SandboxConfig | None = None) -> SandboxFactory:
    """The process's sandbox factory for this setting (created on first use)."""
    cfg = config or SandboxConfig()
    key = cfg.model_dump_json()
    with _lock:
        factory = _factories.get(key)
        if factory is None:
            factory = SandboxFactory(cfg)
            _factories[key] = factory
        return factory


def grading_workers() -> int:
    """How many gradings run at once (``RCB_ENV_GRADING_WORKERS``, else twice the cores, at
    least 2: a grading mostly waits on its sandboxed processes)."""
    if _pool_size is not None:
        return _pool_size
    given = config.settings().env_grading_workers
    if given is not None:
        return given
    return max(2, 2 * (os.cpu_count() or 1))


def set_grading_workers(n: int) -> None:
    """Bound the process's concurrent gradings (takes effect for the next pool: call it before
    the first grading, or after :func:`close_shared`)."""
    global _pool_size
    if n < 1:
        raise ValueError("grading workers must be at least 1")
    _pool_size = n


def grading_pool() -> ThreadPoolExecutor:
    """The process's bounded pool of grading threads."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=grading_workers(), thread_name_prefix="rcb-grading"
            )
        return _pool


def count_unscored(stage: str) -> int:
    """Count an episode that could not be scored (by the stage that failed); the new total."""
    with _lock:
        _unscored[stage] += 1
        return sum(_unscored.values())


def unscored() -> dict[str, int]:
    """Episodes of this process that could not be scored, by the stage that failed."""
    with _lock:
        return dict(_unscored)


def warm_processes() -> int:
    """Live warm grading processes held by the shared factories."""
    with _lock:
        factories = list(_factories.values())
    return sum(f.warm_processes() for f in factories)


def close_shared() -> None:
    """Wait for the gradings in flight, then close every shared factory (their sandboxes' warm
    processes and templates). Safe to call more than once; the next use starts afresh."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
        factories = list(_factories.values())
        _factories.clear()
    if pool is not None:
        pool.shutdown(wait=True)
    for factory in factories:
        try:
            factory.close()
        except Exception as exc:  # closing the rest matters more
            log.warning("closing a shared sandbox factory failed", error=str(exc))


atexit.register(close_shared)

__all__ = [
    "GRADING_WORKERS_ENV",
    "close_shared",
    "count_unscored",
    "grading_pool",
    "grading_workers",
    "set_grading_workers",
    "shared_factory",
    "unscored",
    "warm_processes",
]
