"""Choosing which tasks to run (e.g. by a model's knowledge cut-off)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pydantic import ValidationError

from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.task.models import DateField, Pset, PsetPart


def select_papers(
    pset: Pset,
    *,
    after: dt.date | None = None,
    before: dt.date | None = None,
    field: DateField = "first_commit_date",
) -> Pset:
    """Papers whose ``field`` date is strictly after ``after`` and strictly before ``before``.

    A paper without that date is dropped when a bound is given: it cannot be shown to be
    outside a model's training data.
    """
    if after is None and before is None:
        return pset
    kept = []
    for p in pset.papers:
        d = p.meta.date(field)
        if d is None:
            continue
        if after is not None and d <= after:
            continue
        if before is not None and d >= before:
            continue
        kept.append(p)
    return pset.model_copy(update={"papers": tuple(kept)})


def select_snippets(pset: Pset, ids: tuple[str, ...]) -> Pset:
    """Only the named snippets (``<paper>/<name>`` or a bare name); the others' papers drop out.

    Raises:
        KeyError: a name matches no snippet.
    """
    if not ids:
        return pset
    wanted = set(ids)
    papers = []
    for p in pset.papers:
        kept = tuple(s for s in p.snippets if s.id in wanted or s.name in wanted)
        if kept:
            papers.append(p.model_copy(update={"snippets": kept}))
    found = {s.id for p in papers for s in p.snippets} | {
        s.name for p in papers for s in p.snippets
    }
    missing = sorted(wanted - found)
    if missing:
        raise KeyError(f"no snippet named {', '.join(missing)}")
    return pset.model_copy(update={"papers": tuple(papers)})


def combine(psets: list[Pset]) -> Pset:
    """Several benchmarks as one selection (one run, one summary): their papers together, each
    benchmark kept as a part with its own denominators. One pset is returned as is.

    Raises:
        ConfigError: two benchmarks have a paper with the same id.
    """
    if len(psets) == 1:
        return psets[0]
    seen: dict[str, str] = {}
    parts = []
    for p in psets:
        name = p.benchmark or p.root.name
        for paper in (*(x.id for x in p.papers), *(f.paper for f in p.failures)):
            if paper in seen:
                raise ConfigError(
                    f"paper {paper!r} is in both {seen[paper]} and {name}: cannot run them as one"
                )
            seen[paper] = name
        parts.append(PsetPart(name=name, root=p.root, papers=tuple(x.id for x in p.papers)))
    return Pset(
        root=psets[0].root,
        papers=tuple(x for p in psets for x in p.papers),
        failures=tuple(f for p in psets for f in p.failures),
        parts=tuple(parts),
    )


VERIFIED_THRESHOLD = 0.8
"""The least mutation score of a snippet of the verified subset (docs/test-strength.md says
why)."""

SUBSET_SCHEMA = "rcb-env/subset/1"
_SUBSETS = Path(__file__).parent / "subsets"


class SubsetEntry(Frozen):
    id: str
    """``<paper>/<snippet>``."""
    score: float
    """Its mutation score when the subset was made."""
    killed: int
    survived: int


class Subset(Frozen):
    """A named selection of snippets, stored as data with what made it."""

    schema_version: str = SUBSET_SCHEMA
    name: str
    rcb_env_version: str
    """The rcb-env that measured the scores."""
    criteria: str
    """In words: what a snippet needed to be in it."""
    threshold: float
    seed: int
    cap: int | None
    snippets: tuple[SubsetEntry, ...]

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(s.id for s in self.snippets)


def subset_names() -> list[str]:
    """The subsets shipped with rcb-env."""
    return sorted(p.stem for p in _SUBSETS.glob("*.json"))


def load_subset(name: str) -> Subset:
    """A shipped subset by name (``verified``), or a subset file by path.

    Raises:
        ConfigError: no such subset, or the file is not one.
    """
    path = Path(name)
    if not path.is_file():
        path = _SUBSETS / f"{name}.json"
    if not path.is_file():
        known = ", ".join(subset_names()) or "none"
        raise ConfigError(f"no subset named {name!r} (shipped: {known}; or give a file)")
    try:
        return Subset.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a subset file: {exc}") from exc


def select_subset(pset: Pset, subset: Subset) -> Pset:
    """Only the snippets of ``subset``; papers left without one drop out."""
    ids = subset.ids
    papers = []
    for p in pset.papers:
        kept = tuple(s for s in p.snippets if s.id in ids)
        if kept:
            papers.append(p.model_copy(update={"snippets": kept}))
    return pset.model_copy(update={"papers": tuple(papers)})
