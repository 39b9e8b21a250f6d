"""The estimators behind ``summary``, ``compare``, ``plan`` and the report's intervals: pure
functions over numpy arrays, with no knowledge of records or runs (``rcb_env.results.inference``
feeds them).

Notation. Snippets ``s`` with line weight ``L_s`` fall in clusters ``g`` (papers). A run gives
each snippet a value ``v_s`` in [0, 1]: its pass flag, the mean of its pass flags over samples
(pass@1), or the unbiased pass@k estimate (:func:`pass_at_k`).

Rates are ratio estimators:

    R = sum_s L_s v_s / sum_s L_s = sum_g T_g / sum_g W_g,
    T_g = sum_{s in g} L_s v_s,   W_g = sum_{s in g} L_s

with ``L_s`` the line weight for the scaled rate and 1 for the plain rate (times 100 for
percent). They are not averages of per-paper rates.

Paper-clustered bootstrap. A resample draws G clusters from the G observed ones with
replacement; cluster g is drawn ``m_bg`` times in resample b (``sum_g m_bg = G``), and the
resampled rate is ``R_b = sum_g m_bg T_g / sum_g m_bg W_g``: the ratio is recomputed on the
resampled papers, snippets and their samples travelling with their paper. B resamples
(10,000 by default) come from ``numpy.random.default_rng(seed)``; the same seed and cluster
count give the same resamples (:func:`resample_counts`), so two runs on the same papers are
resampled identically (common random numbers), which is what a paired difference needs.

- interval: the percentile interval, the (1 - level)/2 and (1 + level)/2 quantiles of the
  ``R_b`` (numpy's default, linear interpolation); 95% by default;
- standard error: the standard deviation of the ``R_b`` (ddof = 1);
- paired difference of runs A and B on the snippets both scored: ``D = R_B - R_A``, each ratio
  with its own run's weights on the same snippets, and ``D_b = R_B,b - R_A,b`` on the same
  resampled clusters (with equal weights this is ``sum L_s (v_B,s - v_A,s) / sum L_s``);
- two-sided p-value (:func:`two_sided_p`): twice the share of the ``D_b`` on the other side of
  0 from ``D`` (a ``D_b`` of exactly 0 counts as the other side), at most 1; 1 when ``D = 0``;
- minimum detectable difference (:func:`mde`): ``(z_{1-alpha/2} + z_{power}) * SE`` with SE
  the bootstrap standard error of ``D`` (2.8016 x SE at the 5% level and 80% power);
- Holm's step-down correction of m p-values (:func:`holm`).

Planning (:func:`samples_needed`). With k samples per snippet, the variance of a paired
difference splits into a between-snippet part that samples do not reduce and a within-snippet
(sampling) part that falls as 1/k:

    SE^2(k) = V_between + V_within / k,
    V_within = sum_s L_s^2 (sigma^2_A,s + sigma^2_B,s) / (sum_s L_s)^2

with ``sigma^2_s = p_s (1 - p_s)`` the variance of one sample's pass flag of snippet s
(:func:`within_variance`). The within part is independent across snippets, so clustering does
not change it; the between part is the clustered rest (first-order, through the linearised
ratio).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "cluster_sums",
    "counts_from_indices",
    "holm",
    "mde",
    "pass_at_k",
    "percentile_interval",
    "ratio_replicates",
    "resample_counts",
    "samples_needed",
    "standard_error",
    "two_sided_p",
    "within_variance",
    "z",
]

Floats = NDArray[np.float64]
Counts = NDArray[np.int64]

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95


def resample_counts(
    clusters: int, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> Floats:
    """How often each of ``clusters`` clusters is drawn in each of ``resamples`` resamples
    (a ``resamples x clusters`` matrix whose rows sum to ``clusters``; whole numbers, as floats
    for the matrix products).

    Resample b draws ``clusters`` indices uniformly with replacement,
    ``default_rng(seed).integers(0, clusters, size=(resamples, clusters))``, and counts them.
    Deterministic in its arguments (cached; the array is read-only).
    """
    return _resample_counts(int(clusters), int(resamples), int(seed))


@lru_cache(maxsize=64)
def _resample_counts(clusters: int, resamples: int, seed: int) -> Floats:
    if clusters < 1 or resamples < 1:
        raise ValueError("a bootstrap needs at least one cluster and one resample")
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, clusters, size=(resamples, clusters))
    counts = counts_from_indices(indices, clusters).astype(np.float64)
    counts.setflags(write=False)
    return counts


def counts_from_indices(indices: ArrayLike, clusters: int) -> Counts:
    """The count matrix of explicit resamples: row b of ``indices`` lists the clusters drawn
    in resample b (used to pass an exact enumeration of every resample)."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.ndim != 2:
        raise ValueError("indices must be a resamples x draws matrix")
    rows = idx.shape[0]
    offset = (idx + clusters * np.arange(rows, dtype=np.int64)[:, None]).ravel()
    return np.bincount(offset, minlength=rows * clusters).reshape(rows, clusters)


def cluster_sums(
    values: ArrayLike, weights: ArrayLike, cluster: ArrayLike, clusters: int
) -> tuple[Floats, Floats]:
    """Per cluster, ``T_g = sum L_s v_s`` and ``W_g = sum L_s`` over its snippets
    (``cluster[s]`` is snippet s's cluster index, 0..clusters-1)."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    g = np.asarray(cluster, dtype=np.int64)
    t = np.bincount(g, weights=w * v, minlength=clusters).astype(np.float64)
    d = np.bincount(g, weights=w, minlength=clusters).astype(np.float64)
    return t, d


def ratio_replicates(totals: ArrayLike, weights: ArrayLike, counts: ArrayLike) -> Floats:
    """The ratio estimator on every resample: ``(counts @ T) / (counts @ W)``; NaN where a
    resample drew only clusters of weight 0."""
    m = np.asarray(counts, dtype=np.float64)
    num = m @ np.asarray(totals, dtype=np.float64)
    den = m @ np.asarray(weights, dtype=np.float64)
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den != 0)
    return out


def percentile_interval(replicates: ArrayLike, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """The percentile interval: the (1 - level)/2 and (1 + level)/2 quantiles of the
    replicates (linear interpolation; NaN replicates ignored)."""
    r = np.asarray(replicates, dtype=np.float64)
    r = r[~np.isnan(r)]
    if r.size == 0:
        return (math.nan, math.nan)
    lo, hi = np.quantile(r, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi))


def standard_error(replicates: ArrayLike) -> float:
    """The bootstrap standard error: the replicates' standard deviation (ddof = 1)."""
    r = np.asarray(replicates, dtype=np.float64)
    r = r[~np.isnan(r)]
    if r.size < 2:
        return 0.0
    return float(np.std(r, ddof=1))


def two_sided_p(estimate: float, replicates: ArrayLike) -> float:
    """Twice the share of the replicates on the other side of 0 from ``estimate`` (a replicate
    equal to 0 counts as the other side), at most 1; 1 when the estimate is 0.

    With ``estimate > 0``: ``min(1, 2 * #{D_b <= 0} / B)``; with ``estimate < 0``:
    ``min(1, 2 * #{D_b >= 0} / B)``. A result of 0 means no replicate crossed: p < 2 / B.
    """
    r = np.asarray(replicates, dtype=np.float64)
    r = r[~np.isnan(r)]
    if estimate == 0 or r.size == 0:
        return 1.0
    other = np.count_nonzero(r <= 0) if estimate > 0 else np.count_nonzero(r >= 0)
    return min(1.0, 2.0 * other / r.size)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate of a snippet with ``n`` samples of which ``c`` passed:
    ``1 - C(n - c, k) / C(n, k)`` (exact integer binomials; 1 when ``n - c < k``).

    Raises:
        ValueError: ``k`` is not in 1..n, or ``c`` not in 0..n.
    """
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} samples (have {n})")
    if not 0 <= c <= n:
        raise ValueError(f"{c} passed of {n} samples")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: with the m p-values sorted
    ascending, ``p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``. A hypothesis is rejected at
    level alpha when its adjusted p-value is at most alpha (the same decisions as Holm's
    procedure)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def z(q: float) -> float:
    """The standard normal quantile of ``q``."""
    return NormalDist().inv_cdf(q)


def mde(se: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The minimum detectable difference of a two-sided test at level ``alpha`` with the given
    power: ``(z_{1 - alpha/2} + z_{power}) * se`` (2.8016 x se at 5% and 80%)."""
    return (z(1 - alpha / 2) + z(power)) * se


def within_variance(weights: ArrayLike, n: ArrayLike, c: ArrayLike) -> tuple[float, float, bool]:
    """The within-snippet (sampling) variance of a line-weighted rate: per sample,
    ``sum_s L_s^2 sigma^2_s / (sum_s L_s)^2``; as observed, ``sum_s L_s^2 sigma^2_s / n_s /
    (sum_s L_s)^2`` (snippet s with its ``n_s`` samples); and whether ``sigma^2_s`` was
    estimated (True) or taken at its upper bound (False).

    With every snippet sampled at least twice, ``sigma^2_s = p_s (1 - p_s)`` is estimated
    without bias by ``c_s (n_s - c_s) / (n_s (n_s - 1))``. A snippet with one sample says
    nothing about its own spread; then (for the whole run) every snippet is taken to be as hard
    as the run is on average: ``sigma^2_s = pi (1 - pi)`` with ``pi = sum L_s^2 p_s / sum
    L_s^2`` the L^2-weighted pass rate. That is the largest value the run's rate allows (by
    Jensen's inequality ``sum L_s^2 p_s (1 - p_s) <= sum L_s^2 pi (1 - pi)``), so sampling noise
    is never under-stated.
    """
    w = np.asarray(weights, dtype=np.float64)
    ns = np.asarray(n, dtype=np.float64)
    cs = np.asarray(c, dtype=np.float64)
    total = float(w.sum())
    if w.size == 0 or total == 0 or bool(np.any(ns < 1)):
        raise ValueError("within_variance needs snippets with weight and at least one sample")
    w2 = w * w
    if bool(np.all(ns >= 2)):
        sigma2 = cs * (ns - cs) / (ns * (ns - 1))
        estimated = True
    else:
        w2sum = float(w2.sum())
        pi = float((w2 * (cs / ns)).sum() / w2sum) if w2sum else 0.0
        sigma2 = np.full(w.shape, pi * (1 - pi))
        estimated = False
    per_sample = float((w2 * sigma2).sum() / total**2)
    observed = float((w2 * sigma2 / ns).sum() / total**2)
    return per_sample, observed, estimated


def samples_needed(
    between: float,
    within: float,
    difference: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int | None:
    """The fewest samples per snippet k >= 1 with ``mde(sqrt(between + within / k)) <=
    difference``: ``k = ceil(within / ((difference / m)^2 - between))`` with
    ``m = z_{1-alpha/2} + z_{power}``; None when the between-snippet part alone is too large
    (no number of samples reaches it: more snippets or papers are needed)."""
    if difference <= 0:
        raise ValueError("the difference to detect must be positive")
    m = z(1 - alpha / 2) + z(power)
    room = (difference / m) ** 2 - between
    if room <= 0:
        return None
    if within <= 0:
        return 1
    return max(1, math.ceil(within / room - 1e-12))
