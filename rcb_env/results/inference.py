"""Intervals, paired comparisons and sample planning over episode records: what ``summary``,
``compare``, ``plan`` and the report say about whether a rate or a difference is real.

A run becomes one score per snippet (:class:`SnippetScore`): its line weight, its paper, how
many of its samples were scored (``n``; infrastructure failures are not), how many of those
passed (``c``) and how many episodes were excluded as infrastructure failures. The rates are
then the ratio estimators of :mod:`rcb_env.results.stats` over the snippets' values:

- pass@1 (``k = 1``): ``c / n``, the mean over the snippet's scored samples;
- pass@k: the unbiased ``1 - C(n - c, k) / C(n, k)``, over the snippets with ``n >= k``;

weighted by line weight (scaled) or not (plain), with a paper-clustered bootstrap interval
(papers resampled, each with its snippets and their samples). A rate on one paper (per-paper
rows, or a selection of a single paper) resamples snippets instead, and says so in its
``clusters`` and ``method``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from rcb_env.results import stats
from rcb_env.results.records import EpisodeRecord, final_records
from rcb_env.results.summary import Totals

Metric = Literal["scaled", "plain"]
METRICS: tuple[Metric, ...] = ("scaled", "plain")

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "Bootstrap",
    "Comparison",
    "Estimate",
    "PairedDifference",
    "Plan",
    "RunStatistics",
    "SnippetScore",
    "compare_pair",
    "estimate",
    "holm_adjust",
    "metric_keys",
    "plan",
    "run_statistics",
    "scores",
]


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are computed: resamples, seed and level (recorded with every result)."""

    resamples: int = stats.DEFAULT_RESAMPLES
    seed: int = stats.DEFAULT_SEED
    level: float = stats.DEFAULT_LEVEL


#: 10,000 resamples, seed 0, 95% intervals.
DEFAULT_BOOTSTRAP = Bootstrap()


@dataclass(frozen=True)
class SnippetScore:
    """One snippet of one run."""

    paper: str
    weight: int
    n: int
    """Scored samples (infrastructure failures excluded)."""
    c: int
    """Passed samples."""
    infra: int
    """Samples that failed for infrastructure reasons (excluded from n)."""

    def value(self, k: int) -> float:
        """pass@k of this snippet (pass@1 = c / n)."""
        return self.c / self.n if k == 1 else stats.pass_at_k(self.n, self.c, k)


def scores(records: Iterable[EpisodeRecord]) -> dict[str, SnippetScore]:
    """Each snippet's score from the last record of each (snippet, sample), sorted by id."""
    acc: dict[str, list[int]] = {}
    meta: dict[str, tuple[str, int]] = {}
    for r in final_records(list(records)).values():
        a = acc.setdefault(r.snippet_id, [0, 0, 0])
        meta.setdefault(r.snippet_id, (r.paper_id, r.weight))
        if r.status == "infra_error" or r.passed is None:
            a[2] += 1
        else:
            a[0] += 1
            a[1] += bool(r.passed)
    return {
        sid: SnippetScore(meta[sid][0], meta[sid][1], n, c, infra)
        for sid, (n, c, infra) in sorted(acc.items())
    }


def metric_keys(k: int) -> list[str]:
    """The metrics reported for pass@1..k: ``scaled@1``, ``plain@1``, ``scaled@2``, ..."""
    return [f"{m}@{j}" for j in range(1, k + 1) for m in METRICS]


def _parse(key: str) -> tuple[Metric, int]:
    metric, k = key.split("@")
    assert metric in METRICS
    return metric, int(k)


class Estimate(BaseModel):
    """A rate (percent) with its bootstrap interval."""

    model_config = ConfigDict(frozen=True)

    metric: Metric
    k: int
    """pass@k (1: the mean over each snippet's samples)."""
    estimate: float
    low: float | None
    """None: a single snippet, nothing to resample."""
    high: float | None
    se: float | None
    """Bootstrap standard error (points)."""
    level: float
    method: str
    clusters: Literal["paper", "snippet"]
    """What the bootstrap resampled."""
    resamples: int
    seed: int
    snippets: int
    """Snippets in the estimate (with at least k scored samples)."""
    papers: int
    weight: int
    """Their summed weights (the denominator; the snippet count for the plain rate)."""
    excluded_snippets: int
    """Snippets left out: fewer than k scored samples (none scored: every episode failed for
    infrastructure reasons)."""
    infra_episodes: int
    """Episodes excluded as infrastructure failures (out of numerator and denominator)."""


def _method(clusters: str) -> str:
    if clusters == "paper":
        return "paper-clustered bootstrap, percentile interval"
    return "snippet bootstrap (a single paper), percentile interval"


@dataclass(frozen=True)
class _Design:
    """Snippets grouped into bootstrap clusters."""

    ids: list[str]
    cluster: np.ndarray
    clusters: int
    kind: Literal["paper", "snippet"]
    papers: int


def _design(ids: list[str], papers: list[str], by: Literal["paper", "snippet"]) -> _Design:
    distinct = sorted(set(papers))
    if by == "paper" and len(distinct) >= 2:
        index = {p: i for i, p in enumerate(distinct)}
        cluster = np.array([index[p] for p in papers], dtype=np.int64)
        return _Design(ids, cluster, len(distinct), "paper", len(distinct))
    return _Design(ids, np.arange(len(ids), dtype=np.int64), len(ids), "snippet", len(distinct))


def _weights(score: Mapping[str, SnippetScore], ids: Sequence[str], metric: Metric) -> np.ndarray:
    if metric == "plain":
        return np.ones(len(ids))
    return np.array([score[i].weight for i in ids], dtype=np.float64)


def _replicates(
    score: Mapping[str, SnippetScore], d: _Design, metric: Metric, k: int, boot: Bootstrap
) -> tuple[float, np.ndarray]:
    values = np.array([score[i].value(k) for i in d.ids], dtype=np.float64)
    weights = _weights(score, d.ids, metric)
    t, w = stats.cluster_sums(values, weights, d.cluster, d.clusters)
    counts = stats.resample_counts(d.clusters, boot.resamples, boot.seed)
    point = float(t.sum() / w.sum()) if w.sum() else float("nan")
    return point, stats.ratio_replicates(t, w, counts)


def estimate(
    score: Mapping[str, SnippetScore],
    metric: Metric,
    k: int = 1,
    boot: Bootstrap = DEFAULT_BOOTSTRAP,
    *,
    by: Literal["paper", "snippet"] = "paper",
) -> Estimate | None:
    """The ``metric`` pass@k rate of the snippets in ``score`` with its bootstrap interval
    (``by="snippet"``: resample snippets, for a rate within one paper); None when no snippet has
    ``k`` scored samples."""
    ids = [i for i, s in score.items() if s.n >= k]
    if not ids:
        return None
    d = _design(ids, [score[i].paper for i in ids], by)
    point, reps = _replicates(score, d, metric, k, boot)
    low, high = stats.percentile_interval(reps, boot.level)
    weight = int(_weights(score, ids, metric).sum())
    single = d.clusters < 2
    return Estimate(
        metric=metric,
        k=k,
        estimate=100 * point,
        low=None if single else 100 * low,
        high=None if single else 100 * high,
        se=None if single else 100 * stats.standard_error(reps),
        level=boot.level,
        method=_method(d.kind),
        clusters=d.kind,
        resamples=boot.resamples,
        seed=boot.seed,
        snippets=len(ids),
        papers=d.papers,
        weight=weight,
        excluded_snippets=len(score) - len(ids),
        infra_episodes=sum(s.infra for s in score.values()),
    )


def _estimates(
    score: Mapping[str, SnippetScore], k: int, boot: Bootstrap, by: Literal["paper", "snippet"]
) -> dict[str, Estimate]:
    out = {}
    for key in metric_keys(k):
        metric, j = _parse(key)
        e = estimate(score, metric, j, boot, by=by)
        if e is not None:
            out[key] = e
    return out


class RunStatistics(BaseModel):
    """The rates of one run with their intervals, keyed ``scaled@1``, ``plain@1``, ... ."""

    model_config = ConfigDict(frozen=True)

    resamples: int
    seed: int
    level: float
    samples: int
    """The most scored samples of any snippet."""
    k: int
    """pass@1..k reported."""
    overall: dict[str, Estimate]
    per_paper: dict[str, dict[str, Estimate]]
    """Each paper's rates (its snippets resampled)."""
    parts: dict[str, dict[str, Estimate]] = {}
    """A combined run: each benchmark's rates (its papers resampled)."""
    full: dict[str, Estimate] = {}
    """pass@1 over the full benchmark (when the run recorded it): unavailable snippets and
    unscored samples count as not passed, unavailable papers are clusters of their own."""


def _full(
    score: Mapping[str, SnippetScore], totals: Totals, samples: int, boot: Bootstrap
) -> dict[str, Estimate]:
    """pass@1 over the whole benchmark, as :func:`rcb_env.results.summary.summarize`'s
    ``full`` (the mean over sample indexes of passed weight / all weight)."""
    if not score or samples < 1:
        return {}
    papers: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for s in score.values():  # [passed weight, weight, passed count, count]
        acc = papers[s.paper]
        acc[0] += s.weight * s.c / samples
        acc[1] += s.weight
        acc[2] += s.c / samples
        acc[3] += 1
    for u in totals.unavailable:
        acc = papers[u.paper]
        acc[1] += u.weight
        acc[3] += u.snippets
    if (
        round(sum(a[1] for a in papers.values())) != totals.weight
        or round(sum(a[3] for a in papers.values())) != totals.snippets
    ):
        return {}  # the records do not add up to the recorded benchmark: no interval
    names = sorted(papers)
    out: dict[str, Estimate] = {}
    for metric, (ti, wi) in (("scaled", (0, 1)), ("plain", (2, 3))):
        t = np.array([papers[p][ti] for p in names])
        w = np.array([papers[p][wi] for p in names])
        if len(names) < 2 or not w.sum():
            continue
        reps = stats.ratio_replicates(
            t, w, stats.resample_counts(len(names), boot.resamples, boot.seed)
        )
        low, high = stats.percentile_interval(reps, boot.level)
        out[f"{metric}@1"] = Estimate(
            metric=metric,
            k=1,
            estimate=100 * float(t.sum() / w.sum()),
            low=100 * low,
            high=100 * high,
            se=100 * stats.standard_error(reps),
            level=boot.level,
            method=_method("paper"),
            clusters="paper",
            resamples=boot.resamples,
            seed=boot.seed,
            snippets=totals.snippets,
            papers=len(names),
            weight=int(w.sum()),
            excluded_snippets=0,
            infra_episodes=sum(s.infra for s in score.values()),
        )
    return out


def run_statistics(
    records: Iterable[EpisodeRecord],
    totals: Totals | None = None,
    *,
    k: int = 1,
    boot: Bootstrap = DEFAULT_BOOTSTRAP,
) -> RunStatistics:
    """Every rate of a run with its interval: overall (papers resampled), per paper (snippets
    resampled), per benchmark of a combined run, and over the full benchmark."""
    score = scores(records)
    per_paper: dict[str, dict[str, SnippetScore]] = defaultdict(dict)
    for sid, s in score.items():
        per_paper[s.paper][sid] = s
    parts: dict[str, dict[str, Estimate]] = {}
    for part in totals.parts if totals is not None else ():
        inside = {sid: s for sid, s in score.items() if s.paper in set(part.papers)}
        parts[part.name or "benchmark"] = _estimates(inside, k, boot, "paper")
    samples = max((s.n + s.infra for s in score.values()), default=0)
    full = {}
    if totals is not None and not totals.parts:
        full = _full(score, totals, samples, boot)
    return RunStatistics(
        resamples=boot.resamples,
        seed=boot.seed,
        level=boot.level,
        samples=max((s.n for s in score.values()), default=0),
        k=k,
        overall=_estimates(score, k, boot, "paper"),
        per_paper={p: _estimates(s, k, boot, "snippet") for p, s in sorted(per_paper.items())},
        parts=parts,
        full=full,
    )


class PairedDifference(BaseModel):
    """B - A on the snippets both runs scored, paired by snippet."""

    model_config = ConfigDict(frozen=True)

    metric: Metric
    k: int
    a: float
    """A's rate on the paired snippets (percent)."""
    b: float
    difference: float
    """b - a (points)."""
    low: float | None
    """None (with se, the p-values and mde): a single paired snippet, no test."""
    high: float | None
    se: float | None
    p_value: float | None
    """Two-sided bootstrap p-value (0: no resample crossed 0, p < 2 / resamples)."""
    p_holm: float | None
    """Holm-adjusted over the comparisons against the baseline (equal to p_value for one)."""
    significant: bool
    """p_holm <= alpha."""
    mde: float | None
    """The smallest difference (points) this pair could detect with the given power at alpha:
    (z_{1-alpha/2} + z_power) x se."""
    alpha: float
    power: float
    level: float
    method: str
    clusters: Literal["paper", "snippet"]
    resamples: int
    seed: int
    snippets: int
    papers: int


class Comparison(BaseModel):
    """Run ``b`` against the baseline ``a``."""

    model_config = ConfigDict(frozen=True)

    a: str
    b: str
    paired_snippets: int
    """Snippets both runs scored (at least one scored sample each)."""
    paired_papers: int
    unpaired_snippets: int
    only_in_a: list[str]
    """Snippets A scored and B did not (not run, or only infrastructure failures)."""
    only_in_b: list[str]
    metrics: dict[str, PairedDifference]

    def verdict(self, key: str = "scaled@1") -> str:
        """The result in words."""
        m = self.metrics.get(key)
        if m is None:
            return f"{self.b} vs {self.a}: no paired snippets for {key}"
        name = "scaled line rate" if m.metric == "scaled" else "snippet pass rate"
        if m.k > 1:
            name += f" (pass@{m.k})"
        if m.p_value is None or m.low is None or m.high is None:
            return (
                f"{name}: {self.b} - {self.a} = {m.difference:+.2f} points on a single snippet: "
                "no interval, no test"
            )
        p = f"p = {m.p_value:.4f}" if m.p_value > 0 else f"p < {2 / m.resamples:g}"
        if m.p_holm != m.p_value and m.p_holm is not None:
            p += f", Holm {m.p_holm:.4f}"
        ci = f"{m.level:.0%} CI [{m.low:+.2f}, {m.high:+.2f}]"
        head = f"{name}: {self.b} - {self.a} = {m.difference:+.2f} points ({ci}, {p})"
        if m.significant:
            side = "higher" if m.difference > 0 else "lower"
            return f"{head}: {self.b} is {side} than {self.a} at the {m.alpha:.0%} level"
        return (
            f"{head}: the runs do not differ at the {m.alpha:.0%} level (smallest difference "
            f"this pair could detect: {m.mde:.2f} points)"
        )


def compare_pair(
    a: Mapping[str, SnippetScore],
    b: Mapping[str, SnippetScore],
    names: tuple[str, str] = ("A", "B"),
    *,
    k: int = 1,
    boot: Bootstrap = DEFAULT_BOOTSTRAP,
    alpha: float = 0.05,
    power: float = 0.8,
) -> Comparison:
    """B - A paired by snippet on every metric up to pass@k: on the snippets both scored (at
    least k scored samples each for pass@k), each rate with its own run's weights, both
    recomputed on the same resampled papers (snippets, when they share one paper). The
    Holm-adjusted p-value is the raw one until :func:`holm_adjust`."""
    scored_a = {i for i, s in a.items() if s.n}
    scored_b = {i for i, s in b.items() if s.n}
    both = sorted(scored_a & scored_b)
    metrics: dict[str, PairedDifference] = {}
    for key in metric_keys(k):
        metric, j = _parse(key)
        ids = [i for i in both if a[i].n >= j and b[i].n >= j]
        if not ids:
            continue
        d = _design(ids, [a[i].paper for i in ids], "paper")
        pa, ra = _replicates(a, d, metric, j, boot)
        pb, rb = _replicates(b, d, metric, j, boot)
        reps = rb - ra
        diff = pb - pa
        low, high = stats.percentile_interval(reps, boot.level)
        se = stats.standard_error(reps)
        p: float | None = stats.two_sided_p(diff, reps)
        single = d.clusters < 2  # one snippet: nothing to resample, no test
        if single:
            p = None
        metrics[key] = PairedDifference(
            metric=metric,
            k=j,
            a=100 * pa,
            b=100 * pb,
            difference=100 * diff,
            low=None if single else 100 * low,
            high=None if single else 100 * high,
            se=None if single else 100 * se,
            p_value=p,
            p_holm=p,
            significant=p is not None and p <= alpha,
            mde=None if single else 100 * stats.mde(se, alpha, power),
            alpha=alpha,
            power=power,
            level=boot.level,
            method=_method(d.kind),
            clusters=d.kind,
            resamples=boot.resamples,
            seed=boot.seed,
            snippets=len(ids),
            papers=d.papers,
        )
    return Comparison(
        a=names[0],
        b=names[1],
        paired_snippets=len(both),
        paired_papers=len({a[i].paper for i in both}),
        unpaired_snippets=len(scored_a ^ scored_b),
        only_in_a=sorted(scored_a - scored_b),
        only_in_b=sorted(scored_b - scored_a),
        metrics=metrics,
    )


def holm_adjust(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """The comparisons with Holm-adjusted p-values, per metric over every comparison that has
    it, and ``significant`` decided on the adjusted value."""
    out = [c.model_copy(deep=True) for c in comparisons]
    keys = dict.fromkeys(key for c in comparisons for key in c.metrics)
    for key in keys:
        have = [
            i for i, c in enumerate(comparisons)
            if key in c.metrics and c.metrics[key].p_value is not None
        ]  # fmt: skip
        adjusted = stats.holm([comparisons[i].metrics[key].p_value or 0.0 for i in have])
        for i, p in zip(have, adjusted, strict=True):
            m = comparisons[i].metrics[key]
            out[i].metrics[key] = m.model_copy(update={"p_holm": p, "significant": p <= m.alpha})
    return out


class Plan(BaseModel):
    """How many samples per snippet a comparison needs to detect a difference."""

    model_config = ConfigDict(frozen=True)

    baseline: str
    against: str | None
    metric: Metric
    difference: float
    """The difference to detect (points)."""
    alpha: float
    power: float
    snippets: int
    papers: int
    baseline_samples: int
    """The baseline's scored samples per snippet (the fewest of any snippet)."""
    observed_se: float
    """Bootstrap SE (points) of the baseline's rate, or of the pilot pair's difference."""
    between: float
    """Between-snippet variance of the difference (points^2): samples do not reduce it."""
    within: float
    """Within-snippet (sampling) variance of the difference with one sample per snippet
    (points^2): k samples divide it by k."""
    within_estimated: bool
    """False: a run had one sample per snippet, so the within part is an assumption."""
    assumptions: list[str]
    samples: int | None
    """Samples per snippet needed (None: not reachable by sampling: more snippets needed)."""
    floor: float
    """The MDE with infinitely many samples (points): (z_{1-alpha/2} + z_power) x sqrt(between)."""
    mde_by_samples: dict[int, float]
    resamples: int
    seed: int

    def mde(self, k: int) -> float:
        """The minimum detectable difference (points) with k samples per snippet."""
        return 100 * stats.mde(float(np.sqrt((self.between + self.within / k) / 1e4)),
                               self.alpha, self.power)  # fmt: skip


_SHOWN_SAMPLES = (1, 2, 3, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100)


def plan(
    baseline: Mapping[str, SnippetScore],
    difference: float,
    *,
    against: Mapping[str, SnippetScore] | None = None,
    names: tuple[str, str | None] = ("baseline", None),
    metric: Metric = "scaled",
    alpha: float = 0.05,
    power: float = 0.8,
    boot: Bootstrap = DEFAULT_BOOTSTRAP,
) -> Plan:
    """The samples per snippet a paired comparison on the baseline's snippets needs to detect
    ``difference`` points. ``SE^2(k) = between + within / k``, from:

    - the baseline alone: the candidate is assumed to differ from the baseline by a shift that
      moves every snippet alike (a checkpoint, seed or setting of the same agent), so the
      between part is 0, and to have the baseline's sampling noise: ``within = 2 W_A`` with
      ``W_A`` the baseline's per-sample within-snippet variance
      (:func:`rcb_env.results.stats.within_variance`). Agents that differ snippet by snippet
      need more: measure it with a pilot (``against``).
    - a pilot pair (``against``): the observed paired bootstrap variance ``V`` splits into the
      within part as run (``W_A / n_A + W_B / n_B``) and ``between = max(0, V - that)``;
      ``within = W_A + W_B``.

    With one sample per snippet a run's ``W`` is its upper bound (every snippet as hard as the
    run's average), capped so that its part as run does not exceed the observed variance.

    Raises:
        ValueError: no snippet to plan on, or a difference that is not positive.
    """
    if difference <= 0:
        raise ValueError("the difference to detect must be positive")
    assumptions: list[str] = []
    runs = [baseline] if against is None else [baseline, against]
    scored = [{i for i, s in r.items() if s.n} for r in runs]
    ids = sorted(set.intersection(*scored))
    if len(ids) < 2:
        raise ValueError(
            "a plan needs at least two scored snippets"
            + (" in both runs" if against is not None else "")
        )
    d = _design(ids, [baseline[i].paper for i in ids], "paper")
    weights = _weights(baseline, ids, metric)
    parts = []
    for r in runs:
        n = np.array([r[i].n for i in ids])
        c = np.array([r[i].c for i in ids])
        parts.append(stats.within_variance(weights, n, c))
    reps = [_replicates({i: r[i] for i in ids}, d, metric, 1, boot)[1] for r in runs]
    observed = reps[0] if against is None else reps[1] - reps[0]
    v = stats.standard_error(observed) ** 2
    estimated = all(p[2] for p in parts)
    as_run = sum(p[1] for p in parts)
    per_sample = [p[0] for p in parts]
    if not estimated and as_run > v > 0:
        # the bound cannot exceed what was observed: shrink the assumed parts to fit
        fixed = sum(p[1] for p in parts if p[2])
        assumed = as_run - fixed
        scale = max(0.0, v - fixed) / assumed if assumed else 1.0
        per_sample = [p[0] if p[2] else p[0] * scale for p in parts]
        as_run = fixed + assumed * scale
        assumptions.append(
            "the assumed within-snippet variance was capped at the observed variance"
        )
    if not estimated:
        direction = (
            "for a comparison of one agent with itself this overstates the samples needed"
            if against is None
            else "this understates the samples needed when the runs have less sampling noise "
            "(a deterministic agent gains nothing from more samples)"
        )
        assumptions.append(
            "one sample per snippet: the within-snippet variance cannot be estimated and is "
            "taken at its upper bound, every snippet as hard as the run's average; "
            f"{direction} (sample the runs at least twice for an estimate)"
        )
    if against is None:
        between = 0.0
        within = 2 * per_sample[0]
        assumptions.append(
            "no pilot of the candidate: it is assumed to move every snippet alike (between-"
            "snippet variance of the difference 0) with the baseline's sampling noise; agents "
            "that differ snippet by snippet need more (measure it with --against)"
        )
    else:
        between = max(0.0, v - as_run)
        within = per_sample[0] + per_sample[1]
    between, within = 1e4 * between, 1e4 * within  # points^2
    needed = stats.samples_needed(between / 1e4, within / 1e4, difference / 100,
                                  alpha=alpha, power=power)  # fmt: skip
    floor = 100 * stats.mde(float(np.sqrt(between / 1e4)), alpha, power)
    shown = sorted(set(_SHOWN_SAMPLES) | ({needed} if needed else set()))
    result = Plan(
        baseline=names[0],
        against=names[1],
        metric=metric,
        difference=difference,
        alpha=alpha,
        power=power,
        snippets=len(ids),
        papers=d.papers,
        baseline_samples=int(min(baseline[i].n for i in ids)),
        observed_se=100 * float(np.sqrt(v)),
        between=between,
        within=within,
        within_estimated=estimated,
        assumptions=assumptions,
        samples=needed,
        floor=floor,
        mde_by_samples={},
        resamples=boot.resamples,
        seed=boot.seed,
    )
    return result.model_copy(update={"mde_by_samples": {k: result.mde(k) for k in shown}})
