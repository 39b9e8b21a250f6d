"""Choosing which tasks to run (e.g. by a model's knowledge cut-off, a named subset, or the
snippets' difficulty)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from importlib.metadata import version
from pathlib import Path

from pydantic import ValidationError

from rcb_env import catalog
from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.task.difficulty import (
    HARD_FRACTION,
    difficulty_table,
    parse_range,
    read_published,
)
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
    """What put it in, when the subset was made: its mutation score (``verified``) or its
    published solve rate (``hard``, ``solve-rate:LO:HI``)."""
    killed: int = 0
    """Mutants its tests killed (``verified``)."""
    survived: int = 0


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


#: The subsets chosen by difficulty, from the paper's published results.
HARD = "hard"
SOLVE_RATE = "solve-rate:"


def difficulty_subset(name: str, stats_file: Path) -> Subset:
    """``hard`` (the hardest tenth of the snippets by their published solve rate, rounded up;
    :meth:`~rcb_env.task.difficulty.DifficultyTable.hardest`) or ``solve-rate:LO:HI`` (the
    snippets whose published solve rate is in [LO, HI], fractions), from the results file.

    Raises:
        ConfigError: another name, a bad range, or a file that is not a results file.
    """
    outcomes, weights = read_published(stats_file)
    table = difficulty_table(None, published=outcomes, weights=weights)
    if name == HARD:
        ids = table.hardest(HARD_FRACTION)
        criteria = (
            f"the hardest {HARD_FRACTION:.0%} of the snippets (rounded up) by their solve rate "
            "among the published models; at a tie on the boundary the larger snippet, then the id"
        )
        rated = {d.snippet_id: d.solve_rate() or 0.0 for d in table.snippets}
        threshold = max((rated[i] for i in ids), default=0.0)
    elif name.startswith(SOLVE_RATE):
        low, threshold = parse_range(name.removeprefix(SOLVE_RATE))
        ids = table.within(low, threshold)
        criteria = f"published solve rate in [{low}, {threshold}]"
    else:
        raise ConfigError(f"{name!r} is not a difficulty subset (hard, solve-rate:LO:HI)")
    rates = {d.snippet_id: d.solve_rate() or 0.0 for d in table.snippets}
    return make_subset(
        name, f"{criteria} ({stats_file.name})", {i: rates[i] for i in ids}, threshold
    )


def make_subset(name: str, criteria: str, scores: dict[str, float], threshold: float) -> Subset:
    """A subset of the snippets ``scores`` names (each with the score that put it in)."""
    return Subset(
        name=name,
        rcb_env_version=version("rcb-env"),
        criteria=criteria,
        threshold=threshold,
        seed=0,
        cap=None,
        snippets=tuple(SubsetEntry(id=i, score=v) for i, v in scores.items()),
    )


def load_subset(name: str, published: Path | None = None) -> Subset:
    """A shipped subset by name (``verified``), a subset file by path, or a difficulty subset
    (``hard``, ``solve-rate:LO:HI``: :func:`difficulty_subset`) from the results file
    ``published`` (default: ``$RCB_PUBLISHED_RESULTS``, else the one ``rcb-env get``
    installed: :func:`rcb_env.catalog.published_results`).

    Raises:
        ConfigError: no such subset, the file is not one, or a difficulty subset without the
            results file.
    """
    if name == HARD or name.startswith(SOLVE_RATE):
        stats = published or catalog.published_results()
        if stats is None:
            raise ConfigError(
                f"the subset {name!r} is chosen by the published solve rates: give the paper's "
                "results file (overall_stats.json) with --published FILE or "
                "RCB_PUBLISHED_RESULTS=FILE (`rcb-env get researchcodebench` installs it)"
            )
        return difficulty_subset(name, stats)
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
    return select_ids(pset, subset.ids)


def select_ids(pset: Pset, ids: Iterable[str]) -> Pset:
    """Only the snippets ``ids`` (``<paper>/<snippet>``; unknown ones are ignored); papers
    left without one drop out."""
    ids = frozenset(ids)
    papers = []
    for p in pset.papers:
        kept = tuple(s for s in p.snippets if s.id in ids)
        if kept:
            papers.append(p.model_copy(update={"snippets": kept}))
    return pset.model_copy(update={"papers": tuple(papers)})
