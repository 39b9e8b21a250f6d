"""The paper's metrics over episode records, exactly as the format defines them.

With L_s the weight and p_s the pass flag of snippet s, over all selected snippets:
scaled = 100 * sum(L_s p_s) / sum(L_s) (micro-average; the headline), plain = 100 * sum(p_s) / n.
Per paper: the same formulas on its snippets. With several samples: both per sample index, then
mean and population standard deviation over sample indexes. Infrastructure failures are excluded
from numerator and denominator, and counted. The two formulas are written once, in
:mod:`rcb_env.guest.rates`, which an exported Harbor dataset also runs as its metric.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rcb_env.errors import ConfigError
from rcb_env.guest.rates import pass_rates
from rcb_env.results.records import RECORDS, RUN_FILE, EpisodeRecord, final_records, read_records
from rcb_env.task.selection import Subset

#: The manifest's entry of a run that stopped at its spending ceiling (written by the runner).
STOPPED = "stopped"


class StoppedAt(BaseModel):
    """A run that stopped at its spending ceiling (``--max-run-cost``/``--max-run-tokens``):
    no episode started after it was reached; those in flight finished."""

    model_config = ConfigDict(frozen=True)

    reason: str = "ceiling"
    detail: str
    """Which ceiling, and the total that reached it."""
    ceiling: dict[str, float | int | None]
    """The ceiling of the session that stopped."""
    cost: float
    """The run's total cost when it stopped (USD), every record of the folder summed."""
    tokens: int
    """The run's total tokens when it stopped."""
    pending: int
    """Episodes still to run (``--resume`` runs them)."""
    in_flight: str = "finished"
    """What happened to the episodes running when the ceiling was reached."""


class Rates(BaseModel):
    model_config = ConfigDict(frozen=True)

    scaled: float
    """Mean over samples of the line-weighted pass rate (percent)."""
    scaled_std: float
    plain: float
    """Mean over samples of the unweighted pass rate (percent)."""
    plain_std: float
    snippets: int
    """Scored snippets (infrastructure failures excluded), per sample."""
    passed: float
    """Mean number of passed snippets per sample."""
    weight: int
    """Sum of line weights of the scored snippets of sample 0."""
    passed_weight: float
    """Mean passed line weight per sample."""


class Unavailable(BaseModel):
    model_config = ConfigDict(frozen=True)

    paper: str
    reason: str
    snippets: int
    weight: int
    snippet: str | None = None
    """Set when only this snippet of the paper is left out (its own reason)."""


class Totals(BaseModel):
    """The whole benchmark a run was drawn from, including what could not run here."""

    model_config = ConfigDict(frozen=True)

    name: str | None = None
    """The named benchmark, if any."""
    snippets: int
    """Every snippet of the benchmark (of the selected papers)."""
    weight: int
    """Their line weights."""
    unavailable: tuple[Unavailable, ...] = ()
    """Papers left out because they cannot run in this installation, with why."""
    papers: tuple[str, ...] = ()
    """Its papers' ids (set for the parts of a combined run)."""
    parts: tuple[Totals, ...] = ()
    """Each benchmark of a combined run, with its own denominators."""


class SubsetRates(BaseModel):
    """The rates on a named subset of the snippets (e.g. ``verified``), beside the full ones."""

    model_config = ConfigDict(frozen=True)

    name: str
    snippets: int
    """Snippets of the subset among this run's scored episodes (sample 0)."""
    of: int
    """Snippets in the subset."""
    rates: Rates | None


class Summary(BaseModel):
    model_config = ConfigDict(frozen=True)

    overall: Rates | None
    per_paper: dict[str, Rates]
    samples: int
    episodes: int
    """Final records (one per snippet and sample)."""
    infra_errors: int
    """Final records that failed for infrastructure reasons and are excluded."""
    infra_by_cause: dict[str, int]
    truncated: int
    totals: Totals | None = None
    """The full benchmark, when the run recorded it."""
    full: Rates | None = None
    """Rates over the full benchmark: unavailable snippets and unscored (infrastructure)
    episodes count as not passed. ``overall`` is over the runnable set."""
    parts: tuple[Summary, ...] = ()
    """A combined run: the summary of each benchmark on its own (its runnable set and its full
    denominators)."""
    subset: SubsetRates | None = None
    """The same rates on a named subset, when one was asked for (``--subset verified``)."""
    stopped: StoppedAt | None = None
    """Set when the run's last session stopped at its spending ceiling (the run is
    unfinished)."""


def _aggregate(
    scaled: list[float],
    plain: list[float],
    passed: list[int],
    passed_w: list[int],
    snippets: int,
    weight: int,
) -> Rates:
    """Per-sample rates -> mean and population standard deviation over samples."""
    return Rates(
        scaled=statistics.fmean(scaled),
        scaled_std=statistics.pstdev(scaled),
        plain=statistics.fmean(plain),
        plain_std=statistics.pstdev(plain),
        snippets=snippets,
        passed=statistics.fmean(passed),
        weight=weight,
        passed_weight=statistics.fmean(passed_w),
    )


def _rates(by_sample: dict[int, list[EpisodeRecord]]) -> Rates | None:
    scaled, plain, passed, passed_w = [], [], [], []
    first: list[EpisodeRecord] = []
    for k in sorted(by_sample):
        scored = [r for r in by_sample[k] if r.status != "infra_error" and r.passed is not None]
        if not scored:
            continue
        first = first or scored
        rates = pass_rates((r.weight, bool(r.passed)) for r in scored)
        assert rates is not None  # scored is not empty
        scaled.append(rates[0])
        plain.append(rates[1])
        passed.append(sum(1 for r in scored if r.passed))
        passed_w.append(sum(r.weight for r in scored if r.passed))
    if not scaled:
        return None
    return _aggregate(scaled, plain, passed, passed_w, len(first), sum(r.weight for r in first))


def _full_rates(by_sample: dict[int, list[EpisodeRecord]], totals: Totals) -> Rates | None:
    scaled, plain, passed, passed_w = [], [], [], []
    for k in sorted(by_sample):
        good = [r for r in by_sample[k] if r.passed]
        scaled.append(100.0 * sum(r.weight for r in good) / totals.weight if totals.weight else 0)
        plain.append(100.0 * len(good) / totals.snippets if totals.snippets else 0.0)
        passed.append(len(good))
        passed_w.append(sum(r.weight for r in good))
    if not scaled:
        return None
    return _aggregate(scaled, plain, passed, passed_w, totals.snippets, totals.weight)


def summarize(
    records: list[EpisodeRecord], totals: Totals | None = None, subset: Subset | None = None
) -> Summary:
    """The rates of ``records``; with ``subset``, also on its snippets alone."""
    final = list(final_records(records).values())
    overall: dict[int, list[EpisodeRecord]] = defaultdict(list)
    papers: dict[str, dict[int, list[EpisodeRecord]]] = defaultdict(lambda: defaultdict(list))
    causes: dict[str, int] = defaultdict(int)
    for r in final:
        overall[r.sample].append(r)
        papers[r.paper_id][r.sample].append(r)
        if r.status == "infra_error":
            cause = f"{r.infra_error.stage}: {r.infra_error.type}" if r.infra_error else "unknown"
            causes[cause] += 1
    per_paper = {pid: rates for pid, by in sorted(papers.items()) if (rates := _rates(by))}
    parts: tuple[Summary, ...] = ()
    if totals is not None and totals.parts:
        parts = tuple(
            summarize([r for r in records if r.paper_id in set(t.papers)], t) for t in totals.parts
        )
    return Summary(
        overall=_rates(overall),
        per_paper=per_paper,
        samples=len(overall),
        episodes=len(final),
        infra_errors=sum(causes.values()),
        infra_by_cause=dict(causes),
        truncated=sum(1 for r in final if r.status == "truncated"),
        totals=totals,
        full=_full_rates(overall, totals) if totals is not None else None,
        parts=parts,
        subset=_subset_rates(final, subset) if subset is not None else None,
    )


def _subset_rates(final: list[EpisodeRecord], subset: Subset) -> SubsetRates:
    ids = subset.ids
    by_sample: dict[int, list[EpisodeRecord]] = defaultdict(list)
    for r in final:
        if r.snippet_id in ids:
            by_sample[r.sample].append(r)
    rates = _rates(by_sample)
    return SubsetRates(
        name=subset.name, snippets=rates.snippets if rates else 0, of=len(ids), rates=rates
    )


def summarize_run(run_dir: Path, subset: Subset | None = None) -> Summary:
    """The summary of a run folder: its final records, and the full benchmark's totals from
    its ``run.json`` when it recorded them.

    Raises:
        ConfigError: the folder has neither (it is no run folder).
    """
    totals, stopped = None, None
    manifest = run_dir / RUN_FILE
    if not manifest.is_file() and not (run_dir / RECORDS).is_file():
        raise ConfigError(f"{run_dir} is not a run folder (no run.json, no episodes.jsonl)")
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        if data.get("benchmark"):
            totals = Totals.model_validate(data["benchmark"])
        if data.get(STOPPED):
            stopped = StoppedAt.model_validate(data[STOPPED])
    summary = summarize(read_records(run_dir / RECORDS), totals, subset)
    return summary.model_copy(update={"stopped": stopped}) if stopped else summary
