"""How hard each snippet is, as one typed record per snippet (:class:`Difficulty`): its solve
rate among the paper's published models (ResearchCodeBench's ``overall_stats.json``) and among
any runs given, its size (the line weight) and its nesting depth. ``rcb-env tasks --json``
shows it, the subsets ``hard`` and ``solve-rate:LO:HI`` choose snippets by it
(:func:`rcb_env.task.selection.load_subset`), the report's per-snippet solve rates are
:func:`solve_rates`, and trainers sort or filter their rows by it (:class:`DifficultyTable`).

A solve rate is a fraction in [0, 1]: each source's (model's or run's) share of passed samples
on the snippet, averaged over the sources that scored it; a sample that was not scored (an
infrastructure failure) is left out, as in every rate of rcb-env.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.task.models import Pset

__all__ = [
    "HARD_FRACTION",
    "Difficulty",
    "DifficultyTable",
    "Outcome",
    "RateSource",
    "SolveRate",
    "difficulty_table",
    "parse_range",
    "published_outcomes",
    "published_samples",
    "read_published",
    "solve_rates",
]

HARD_FRACTION = 0.1
"""The ``hard`` subset: this share of the snippets, the hardest by the published solve rate."""

#: ``(source, snippet id, passed)``: one scored sample of a model or a run.
Outcome = tuple[str, str, bool]
RateSource = Literal["published", "runs"]


class SolveRate(Frozen):
    """A snippet's solve rate among some sources (models or runs)."""

    rate: float
    """The mean over the sources of each one's share of passed samples (0 to 1)."""
    sources: int
    """Sources that scored the snippet."""
    solved_by: int
    """Sources that passed it at least once."""


def solve_rates(outcomes: Iterable[Outcome]) -> dict[str, SolveRate]:
    """Each snippet's :class:`SolveRate` over ``(source, snippet id, passed)`` samples."""
    per: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for source, snippet, passed in outcomes:
        acc = per[snippet].setdefault(source, [0, 0])
        acc[0] += bool(passed)
        acc[1] += 1
    out = {}
    for snippet, by_source in per.items():
        shares = [good / n for good, n in by_source.values()]
        out[snippet] = SolveRate(
            rate=math.fsum(shares) / len(shares),
            sources=len(shares),
            solved_by=sum(1 for x in shares if x > 0),
        )
    return out


def published_samples(stats_file: Path) -> list[dict[str, Any]]:
    """Every completion of the paper's results file (``results`` -> paper -> ``results`` ->
    model -> ``results`` -> snippet -> completions), as the completion's own fields
    (``passed``, ``snippet_code_line_count``, ``completion_idx``...) with ``model``, ``paper``
    and ``snippet``: the one reader of the file's shape (``import-results`` and the difficulty
    both read it through here).

    Raises:
        ConfigError: the file cannot be read, is not a results file of this shape, or holds no
            completion.
    """
    try:
        results: dict[str, Any] = json.loads(stats_file.read_text())["results"]
        rows = [
            {**sample, "model": model, "paper": paper_id, "snippet": name}
            for paper_id, paper in results.items()
            for model, entry in paper.get("results", {}).items()
            for name, samples in entry.get("results", {}).items()
            for sample in samples
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{stats_file}: not a ResearchCodeBench results file ({exc!r})") from None
    if not rows:
        raise ConfigError(f"{stats_file}: no per-snippet results")
    return rows


def read_published(stats_file: Path) -> tuple[list[Outcome], dict[str, int]]:
    """The results file's completions (:func:`published_samples`) as ``(model, snippet id,
    passed)``, and each snippet's line count as the file gives it.

    Raises:
        ConfigError: the file cannot be read or is not a results file of this shape.
    """
    rows = published_samples(stats_file)
    try:
        outcomes = [(r["model"], f"{r['paper']}/{r['snippet']}", bool(r["passed"])) for r in rows]
        weights = {
            f"{r['paper']}/{r['snippet']}": int(r.get("snippet_code_line_count", 0)) for r in rows
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{stats_file}: not a ResearchCodeBench results file ({exc!r})") from None
    return outcomes, weights


def published_outcomes(stats_file: Path) -> list[Outcome]:
    """The results file's completions as ``(model, snippet id, passed)`` (:func:`read_published`).

    Raises:
        ConfigError: the file cannot be read or is not a results file of this shape.
    """
    return read_published(stats_file)[0]


class Difficulty(Frozen):
    """One snippet's difficulty."""

    snippet_id: str
    """``<paper>/<snippet>``."""
    paper_id: str
    weight: int | None
    """Its size: the line weight (None for a snippet of the results file not loaded here)."""
    depth: int | None
    """Its nesting depth (0: top level)."""
    published: SolveRate | None = None
    """Among the paper's published models (None: not in the results file, or none given)."""
    runs: SolveRate | None = None
    """Among the runs given (None: none scored it)."""

    def solve_rate(self, by: RateSource = "published") -> float | None:
        """The published or the runs' solve rate (0 to 1), None when unknown."""
        rate = self.published if by == "published" else self.runs
        return None if rate is None else rate.rate


class DifficultyTable(Frozen):
    """Every snippet's :class:`Difficulty`, in the benchmark's order: what a curriculum sorts
    and filters by (``table.ranked()``: the easiest first; ``table.within(0, 0.2)``)."""

    snippets: tuple[Difficulty, ...]

    def get(self, snippet_id: str) -> Difficulty | None:
        return next((d for d in self.snippets if d.snippet_id == snippet_id), None)

    def rated(self, by: RateSource = "published") -> list[Difficulty]:
        """The snippets with a known solve rate from ``by``."""
        return [d for d in self.snippets if d.solve_rate(by) is not None]

    def ranked(
        self, by: RateSource = "published", *, hardest_first: bool = False
    ) -> list[Difficulty]:
        """The rated snippets from the easiest (highest solve rate) to the hardest, among equal
        rates the smaller snippet first (fewer lines to write); ``hardest_first``: the lowest
        rate first, among equal rates the larger snippet first. Then by id."""
        sign = 1 if hardest_first else -1
        return sorted(
            self.rated(by),
            key=lambda d: (sign * (d.solve_rate(by) or 0.0), -sign * (d.weight or 0), d.snippet_id),
        )

    def hardest(self, fraction: float = HARD_FRACTION, by: RateSource = "published") -> list[str]:
        """The ids of the hardest ``fraction`` of the rated snippets (rounded up): the lowest
        solve rates; at a tie on the boundary the larger snippet, then the id."""
        ranked = self.ranked(by, hardest_first=True)
        return [d.snippet_id for d in ranked[: math.ceil(fraction * len(ranked))]]

    def within(self, low: float, high: float, by: RateSource = "published") -> list[str]:
        """The ids of the snippets whose solve rate is in [``low``, ``high``]."""
        return [
            d.snippet_id
            for d in self.snippets
            if (r := d.solve_rate(by)) is not None and low <= r <= high
        ]


def difficulty_table(
    pset: Pset | None,
    *,
    published: Iterable[Outcome] = (),
    runs: Iterable[Outcome] = (),
    weights: dict[str, int] | None = None,
) -> DifficultyTable:
    """The difficulty of every snippet of ``pset`` (size and depth from it) and, without a
    pset, of every snippet of the published results and runs (their sizes from ``weights``,
    the line counts of the results file, when given)."""
    pub, ran = solve_rates(published), solve_rates(runs)
    rows = []
    if pset is not None:
        for s in pset.snippets:
            rows.append(
                Difficulty(
                    snippet_id=s.id,
                    paper_id=s.paper_id,
                    weight=s.weight,
                    depth=s.depth,
                    published=pub.get(s.id),
                    runs=ran.get(s.id),
                )
            )
    else:
        for sid in dict.fromkeys([*pub, *ran]):
            rows.append(
                Difficulty(
                    snippet_id=sid,
                    paper_id=sid.split("/", 1)[0],
                    weight=(weights or {}).get(sid),
                    depth=None,
                    published=pub.get(sid),
                    runs=ran.get(sid),
                )
            )
    return DifficultyTable(snippets=tuple(rows))


def parse_range(text: str, *, unit: bool = True) -> tuple[float, float]:
    """``LO:HI`` as a pair: fractions in [0, 1] (e.g. ``0:0.2``), or with ``unit=False`` any
    two numbers from 0 up (e.g. line counts, ``1:5``).

    Raises:
        ConfigError: not two such numbers with LO <= HI.
    """
    example = "0:0.2" if unit else "1:5"
    try:
        lo_text, hi_text = text.split(":")
        low, high = float(lo_text), float(hi_text)
    except ValueError:
        raise ConfigError(f"a range is LO:HI, e.g. {example} (got {text!r})") from None
    if not 0.0 <= low <= high or (unit and high > 1.0):
        top = " <= 1" if unit else ""
        raise ConfigError(f"a range needs 0 <= LO <= HI{top} (got {text!r})")
    return low, high
