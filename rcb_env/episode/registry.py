"""Gymnasium ids for the bundled tasks: ``rcb/<paper>.<snippet>-v0`` (slugged)."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym

from rcb_env.episode.env import EnvConfig, RcbEnv
from rcb_env.episode.wrappers import Budgets
from rcb_env.errors import TaskLoadError
from rcb_env.task import bundled_root, load
from rcb_env.task.models import Pset

NAMESPACE = "rcb"
VERSION = 0
DEFAULT_MAX_STEPS = 100


def env_id(paper_slug: str, snippet_slug: str) -> str:
    return f"{NAMESPACE}/{paper_slug}.{snippet_slug}-v{VERSION}"


@functools.cache
def _bundled() -> Pset:
    return load(bundled_root())


def make_bundled(
    paper_id: str,
    snippet_name: str,
    config: EnvConfig | None = None,
    max_steps: int | None = DEFAULT_MAX_STEPS,
    max_wall_s: float | None = None,
    max_tokens: int | None = None,
    **env_kwargs: Any,
) -> gym.Env[str, Any]:
    """Entry point of the registered ids."""
    paper = _bundled().paper(paper_id)
    env = RcbEnv(paper, paper.snippet(snippet_name), config, **env_kwargs)
    return Budgets(env, max_steps=max_steps, max_wall_s=max_wall_s, max_tokens=max_tokens)


def register_bundled() -> list[str]:
    """Register every bundled snippet (idempotent). Returns the ids."""
    try:
        pset = _bundled()
    except TaskLoadError:
        return []
    ids = []
    for paper in pset.papers:
        for s in paper.snippets:
            eid = env_id(paper.slug, s.slug)
            ids.append(eid)
            if eid not in gym.registry:
                gym.register(
                    id=eid,
                    entry_point="rcb_env.episode.registry:make_bundled",
                    kwargs={"paper_id": paper.id, "snippet_name": s.name},
                    disable_env_checker=False,
                )
    return ids
