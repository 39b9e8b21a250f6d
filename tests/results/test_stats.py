"""The statistics of ``summary``, ``compare``, ``plan`` and the report, against hand-computed
cases: an exact enumeration of a 3-paper bootstrap (all 27 resamples), pass@k by brute force over
subsets of samples, Holm on a hand example, the paired p-value's sign cases, and an independent
loop-by-loop implementation of the documented resampling; then the commands on small run
folders written here."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from rcb_env.cli import cli
from rcb_env.results import stats
from rcb_env.results.compare import compare_statistics
from rcb_env.results.inference import (
    Bootstrap,
    SnippetScore,
    compare_pair,
    estimate,
    plan,
    run_statistics,
)
from rcb_env.results.records import EpisodeRecord, RecordLog, write_json_atomic

# -- the bootstrap, exactly -----------------------------------------------------------------------

#: Three papers: passed line weight T_g and line weight W_g.
T = np.array([2.0, 0.0, 3.0])
W = np.array([4.0, 2.0, 3.0])
ALL_27 = list(itertools.product(range(3), repeat=3))


def _exact() -> tuple[list[float], list[Fraction]]:
    """Every ordered draw of 3 papers from 3 (probability 1/27 each) and its ratio."""
    ratios = []
    for draw in ALL_27:
        num = Fraction(int(sum(T[g] for g in draw)))
        den = Fraction(int(sum(W[g] for g in draw)))
        ratios.append(num / den)
    return [float(r) for r in ratios], ratios


def test_the_27_resamples_of_3_papers_give_the_hand_computed_ratios() -> None:
    counts = stats.counts_from_indices(ALL_27, 3)
    assert counts.shape == (27, 3)
    assert (counts.sum(axis=1) == 3).all()
    reps = stats.ratio_replicates(T, W, counts)
    floats, fractions = _exact()
    assert reps.tolist() == pytest.approx(floats, abs=1e-15)
    by_draw = dict(zip(ALL_27, fractions, strict=True))
    assert by_draw[(0, 0, 0)] == Fraction(1, 2)  # paper 0 three times: 6/12
    assert by_draw[(1, 1, 1)] == 0
    assert by_draw[(2, 2, 2)] == 1
    assert by_draw[(0, 1, 2)] == by_draw[(2, 1, 0)] == Fraction(5, 9)  # the sample itself
    assert by_draw[(0, 0, 1)] == Fraction(4, 10)


def test_many_resamples_converge_to_the_exact_27_point_distribution() -> None:
    floats, _ = _exact()
    exact_mean = float(np.mean(floats))
    exact_sd = float(np.std(floats))
    reps = stats.ratio_replicates(T, W, stats.resample_counts(3, 200_000, seed=1))
    assert reps.mean() == pytest.approx(exact_mean, abs=0.002)
    assert stats.standard_error(reps) == pytest.approx(exact_sd, abs=0.002)
    # each distinct count vector comes with its multinomial probability (e.g. (3,0,0): 1/27)
    counts = stats.resample_counts(3, 200_000, seed=1)
    share = float(np.all(counts == [3, 0, 0], axis=1).mean())
    assert share == pytest.approx(1 / 27, abs=0.002)
    share = float(np.all(counts == [1, 1, 1], axis=1).mean())
    assert share == pytest.approx(6 / 27, abs=0.003)
    # the extremes each have probability 1/27 > 2.5%: the 95% interval is [min, max]
    assert stats.percentile_interval(reps) == (min(floats), max(floats))


def test_the_paired_p_value_of_3_papers_by_exact_enumeration() -> None:
    # B - A per paper: +1 line of 4 in paper 0, 0 in paper 1, +1 of 3 in paper 2: every
    # resample but (1, 1, 1) is above 0; (1, 1, 1) is exactly 0 and counts as the other side.
    a = np.array([1.0, 1.0, 0.0])
    b = np.array([2.0, 1.0, 1.0])
    w = np.array([4.0, 2.0, 3.0])
    counts = stats.counts_from_indices(ALL_27, 3)
    diff = stats.ratio_replicates(b, w, counts) - stats.ratio_replicates(a, w, counts)
    point = float((b.sum() - a.sum()) / w.sum())
    assert stats.two_sided_p(point, diff) == pytest.approx(2 / 27)
    assert stats.two_sided_p(-point, -diff) == pytest.approx(2 / 27)


def test_two_sided_p_value_sign_cases() -> None:
    reps = np.array([-1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    assert stats.two_sided_p(3.0, reps) == pytest.approx(2 * 2 / 10)  # -1 and 0
    assert stats.two_sided_p(-3.0, -reps) == pytest.approx(2 * 2 / 10)
    assert stats.two_sided_p(-3.0, reps) == 1.0  # most are on the other side: capped
    assert stats.two_sided_p(0.0, reps) == 1.0
    assert stats.two_sided_p(1.0, np.array([1.0, 2.0, 3.0])) == 0.0  # none crossed
    assert stats.two_sided_p(1.0, np.array([np.nan, 0.5, -0.5, 1.0])) == pytest.approx(2 / 3)


def test_holm_against_a_hand_example() -> None:
    # sorted: 0.005 x4 = 0.02; 0.01 x3 = 0.03; 0.03 x2 = 0.06; 0.04 x1 = 0.04 -> 0.06 (monotone)
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert stats.holm([0.02]) == [0.02]
    assert stats.holm([]) == []


def _brute_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The share of k-subsets of the n samples (the first c passed) with a pass."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    good = sum(1 for s in subsets if any(samples[i] for i in s))
    return Fraction(good, len(subsets))


def test_pass_at_k_is_the_brute_force_over_subsets() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert stats.pass_at_k(n, c, k) == pytest.approx(
                    float(_brute_pass_at_k(n, c, k)), abs=1e-12
                ), (n, c, k)
    assert stats.pass_at_k(5, 2, 1) == pytest.approx(0.4)  # pass@1 is c / n
    with pytest.raises(ValueError, match="needs at least 4 samples"):
        stats.pass_at_k(3, 1, 4)


def test_mde_and_the_samples_a_difference_needs() -> None:
    m = stats.z(0.975) + stats.z(0.8)
    assert m == pytest.approx(2.8016, abs=1e-4)
    assert stats.mde(1.0) == pytest.approx(m)
    between, within = 0.0001, 0.004
    k = stats.samples_needed(between, within, 0.05)
    assert k is not None
    # the smallest k whose MDE is within the difference
    assert (
        stats.mde(math.sqrt(between + within / k))
        <= 0.05
        < stats.mde(math.sqrt(between + within / (k - 1)))
    )
    assert stats.samples_needed(0.001, within, 0.05) is None  # the between part alone is too big
    assert stats.samples_needed(0.0, 0.0, 0.05) == 1


def test_within_variance_estimated_or_bounded() -> None:
    w, n, c = np.array([2.0, 1.0]), np.array([4, 2]), np.array([1, 1])
    per_sample, observed, estimated = stats.within_variance(w, n, c)
    # sigma^2: 1*3/(4*3) = 1/4 and 1*1/(2*1) = 1/2
    assert estimated
    assert per_sample == pytest.approx((4 * 0.25 + 1 * 0.5) / 9)
    assert observed == pytest.approx((4 * 0.25 / 4 + 1 * 0.5 / 2) / 9)
    per_sample, observed, estimated = stats.within_variance(w, np.array([1, 1]), np.array([1, 0]))
    pi = 4 / 5  # L^2-weighted: (4*1 + 1*0) / 5
    assert not estimated
    assert per_sample == observed == pytest.approx(5 * pi * (1 - pi) / 9)


def test_ten_thousand_resamples_of_18_papers_take_well_under_a_second() -> None:
    rng = np.random.default_rng(3)
    score = {
        f"p{i % 18}/s{i}": SnippetScore(
            f"p{i % 18}", int(rng.integers(1, 20)), 1, int(i % 3 == 0), 0
        )
        for i in range(191)
    }
    other = {
        k: SnippetScore(s.paper, s.weight, 1, int(rng.random() < 0.4), 0) for k, s in score.items()
    }
    start = time.perf_counter()
    e = estimate(score, "scaled", boot=Bootstrap(seed=11))
    pair = compare_pair(score, other, boot=Bootstrap(seed=11))
    took = time.perf_counter() - start
    assert e is not None
    assert pair.metrics["scaled@1"].resamples == 10_000
    assert took < 1.0, took


# -- the estimators on snippet scores, against an independent implementation --------------------


def _independent(
    a: dict[str, SnippetScore], b: dict[str, SnippetScore] | None, k: int, seed: int, resamples: int
) -> tuple[float, list[float], float]:
    """The documented procedure, loop by loop: papers sorted by name, resample r draws
    default_rng(seed).integers(0, G, size=(B, G))[r]; per snippet pass@k; scaled ratio."""

    def value(s: SnippetScore) -> float:
        return float(_brute_pass_at_k(s.n, s.c, k))

    ids = sorted(i for i in a if a[i].n >= k and (b is None or (i in b and b[i].n >= k)))
    papers = sorted({a[i].paper for i in ids})
    draws = np.random.default_rng(seed).integers(0, len(papers), size=(resamples, len(papers)))

    def rate(run: dict[str, SnippetScore], chosen: list[str]) -> float:
        num = den = 0.0
        for p in chosen:
            for i in ids:
                if run[i].paper == p:
                    num += run[i].weight * value(run[i])
                    den += run[i].weight
        return num / den

    def stat(chosen: list[str]) -> float:
        return rate(a, chosen) if b is None else rate(b, chosen) - rate(a, chosen)

    point = stat(papers)
    reps = [stat([papers[g] for g in row]) for row in draws]
    return point, reps, float(np.std(reps, ddof=1))


def _scores(rows: list[tuple[str, int, int, int]]) -> dict[str, SnippetScore]:
    return {f"{p}/{i}": SnippetScore(p, w, n, c, 0) for i, (p, w, n, c) in enumerate(rows)}


RUN_A = _scores(
    [("alpha", 3, 3, 1), ("alpha", 1, 3, 3), ("beta", 4, 3, 0), ("beta", 2, 3, 2),
     ("gamma", 5, 3, 1), ("gamma", 1, 3, 0), ("delta", 2, 3, 3)]
)  # fmt: skip
RUN_B = _scores(
    [("alpha", 3, 3, 2), ("alpha", 1, 3, 3), ("beta", 4, 3, 1), ("beta", 2, 3, 3),
     ("gamma", 5, 3, 3), ("gamma", 1, 3, 1), ("delta", 2, 3, 2)]
)  # fmt: skip


@pytest.mark.parametrize("k", [1, 2, 3])
def test_rates_and_paired_differences_match_an_independent_implementation(k: int) -> None:
    boot = Bootstrap(resamples=2000, seed=5)
    e = estimate(RUN_A, "scaled", k, boot)
    assert e is not None
    point, reps, se = _independent(RUN_A, None, k, 5, 2000)
    assert e.estimate == pytest.approx(100 * point)
    assert (e.low, e.high) == pytest.approx(
        tuple(100 * x for x in np.quantile(reps, [0.025, 0.975]))
    )
    assert e.se == pytest.approx(100 * se)
    assert (e.clusters, e.papers, e.snippets) == ("paper", 4, 7)
    pair = compare_pair(RUN_A, RUN_B, ("A", "B"), k=k, boot=boot)
    m = pair.metrics[f"scaled@{k}"]
    point, reps, se = _independent(RUN_A, RUN_B, k, 5, 2000)
    assert m.difference == pytest.approx(100 * point)
    assert m.b - m.a == pytest.approx(m.difference)
    assert (m.low, m.high) == pytest.approx(
        tuple(100 * x for x in np.quantile(reps, [0.025, 0.975]))
    )
    assert m.se == pytest.approx(100 * se)
    side = sum(1 for r in reps if (r <= 0 if point > 0 else r >= 0))
    assert m.p_value == pytest.approx(min(1.0, 2 * side / len(reps)))
    assert m.mde == pytest.approx(100 * stats.mde(se))


def test_pass_at_1_is_the_mean_over_samples_and_pass_at_k_the_unbiased_estimate() -> None:
    # weights 3 and 1; 3 samples each, 1 and 3 passed
    two = {k: v for k, v in RUN_A.items() if v.paper == "alpha"}
    e1 = estimate(two, "scaled", 1, by="snippet")
    e2 = estimate(two, "scaled", 2, by="snippet")
    assert e1 is not None
    assert e2 is not None
    assert e1.estimate == pytest.approx(100 * (3 * 1 / 3 + 1 * 1) / 4)
    assert e2.estimate == pytest.approx(100 * (3 * (1 - 1 / 3) + 1 * 1) / 4)  # C(2,2)/C(3,2)
    assert e1.clusters == "snippet"


def test_a_snippet_with_too_few_samples_is_left_out_of_pass_at_k_and_counted() -> None:
    score = {"p/a": SnippetScore("p", 1, 3, 1, 0), "q/b": SnippetScore("q", 1, 1, 1, 2)}
    e = estimate(score, "plain", 2)
    assert e is not None
    assert (e.snippets, e.excluded_snippets, e.infra_episodes) == (1, 1, 2)
    assert estimate({"q/b": score["q/b"]}, "plain", 2) is None


def test_the_planner_separates_between_and_within_snippet_variance() -> None:
    p = plan(RUN_A, 5.0, against=RUN_B, boot=Bootstrap(resamples=4000))
    assert p.within_estimated
    wa, _, _ = stats.within_variance(
        [s.weight for s in RUN_A.values()], [s.n for s in RUN_A.values()],
        [s.c for s in RUN_A.values()],
    )  # fmt: skip
    wb, _, _ = stats.within_variance(
        [s.weight for s in RUN_A.values()], [s.n for s in RUN_B.values()],
        [s.c for s in RUN_B.values()],
    )  # fmt: skip
    assert p.within == pytest.approx(1e4 * (wa + wb))
    v = (p.observed_se / 100) ** 2
    assert p.between == pytest.approx(1e4 * max(0.0, v - (wa + wb) / 3))
    # the answer is the smallest k whose MDE reaches 5 points
    if p.samples is not None:
        assert p.mde(p.samples) <= 5.0
        assert p.samples == 1 or p.mde(p.samples - 1) > 5.0
    alone = plan(RUN_A, 5.0)
    assert alone.between == 0
    assert alone.within == pytest.approx(1e4 * 2 * wa)
    assert alone.samples == stats.samples_needed(0, 2 * wa, 0.05)
    assert alone.mde(3) == pytest.approx(100 * stats.mde(math.sqrt(2 * wa / 3)))
    greedy = {k: SnippetScore(s.paper, s.weight, 1, min(s.c, 1), 0) for k, s in RUN_A.items()}
    once = plan(greedy, 5.0)
    assert not once.within_estimated
    assert any("one sample per snippet" in a for a in once.assumptions)


# -- the commands on run folders written here ------------------------------------------------------

PAPERS = {"alpha": (3, 1, 2), "beta": (4, 2), "gamma": (5, 1, 1, 2)}


def _write_run(
    root: Path,
    name: str,
    passed: Mapping[str, Sequence[bool | None]],
    *,
    agent: str = "synthetic",
    samples: int = 1,
) -> Path:
    """A run folder: run.json and one record per (snippet, sample); None: an infrastructure
    failure."""
    run = root / name
    run.mkdir(parents=True)
    weights = {f"{p}/s{i}": w for p, ws in PAPERS.items() for i, w in enumerate(ws)}
    log = RecordLog(run / "episodes.jsonl").open()
    try:
        for sid, flags in passed.items():
            for k, flag in enumerate(flags):
                log.append(
                    EpisodeRecord(
                        run_id=name, episode_id=f"{sid}#{k}", snippet_id=sid,
                        paper_id=sid.split("/")[0], sample=k, weight=weights[sid], task_hash="",
                        agent={"name": agent}, config={},
                        status="infra_error" if flag is None else "completed",
                        reason="infra_error" if flag is None else "submit",
                        reward=float(weights[sid]) if flag else 0.0, passed=flag,
                        initial_observation="", steps=[], started_at=0.0, duration_s=1.0,
                    )
                )  # fmt: skip
    finally:
        log.close()
    tasks = sorted(weights)
    write_json_atomic(
        run / "run.json",
        {"schema_version": "rcb-env/run/1", "run_id": name, "pset": "synthetic",
         "config": {"agent": agent, "samples": samples, "budgets": {}, "env": {}, "grading": {}},
         "tasks": tasks, "task_set_hash": "same"},
    )  # fmt: skip
    return run


def _all(value: bool, samples: int = 1) -> dict[str, list[bool | None]]:
    return {f"{p}/s{i}": [value] * samples for p, ws in PAPERS.items() for i in range(len(ws))}


def _invoke(args: list[str]) -> Any:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_compare_json_pairs_by_snippet_and_lists_what_is_unpaired(tmp_path: Path) -> None:
    a = _all(False)
    a["alpha/s0"] = [True]
    a["gamma/s3"] = [None]  # infra: excluded, so unpaired
    b = _all(False)
    for sid in ("alpha/s0", "beta/s0", "gamma/s0", "gamma/s1"):
        b[sid] = [True]
    del b["beta/s1"]  # never run in B
    run_a = _write_run(tmp_path, "a", a)
    run_b = _write_run(tmp_path, "b", b)
    result = _invoke(["compare", "--json", "--resamples", "3000", str(run_a), str(run_b)])
    doc = json.loads(result.output)
    assert doc["schema_version"] == "rcb-env/compare/1"
    assert (doc["baseline"], doc["resamples"], doc["seed"]) == ("a", 3000, 0)
    (c,) = doc["comparisons"]
    assert (c["a"], c["b"]) == ("a", "b")
    assert c["only_in_a"] == ["beta/s1"]
    assert c["only_in_b"] == ["gamma/s3"]
    assert (c["paired_snippets"], c["unpaired_snippets"], c["paired_papers"]) == (7, 2, 3)
    m = c["metrics"]["scaled@1"]
    # paired: alpha (3,1,2), beta (4), gamma (5,1,1); A passes alpha/s0 (3), B adds beta/s0 (4),
    # gamma/s0 (5) and gamma/s1 (1)
    assert m["a"] == pytest.approx(100 * 3 / 17)
    assert m["b"] == pytest.approx(100 * 13 / 17)
    assert m["difference"] == pytest.approx(100 * 10 / 17)
    assert m["low"] <= m["difference"] <= m["high"]
    for key in ("p_value", "p_holm", "mde", "se", "method", "resamples", "seed", "significant"):
        assert key in m
    assert m["p_holm"] == m["p_value"]
    assert m["mde"] == pytest.approx(2.8016 * m["se"], rel=1e-4)
    # every run's own rates, infrastructure failures out and counted
    ra = doc["runs"][0]["metrics"]["scaled@1"]
    assert ra["estimate"] == pytest.approx(100 * 3 / 19)  # gamma/s3 (2 lines) excluded
    assert (ra["infra_episodes"], ra["excluded_snippets"], ra["snippets"]) == (1, 1, 8)
    assert ra["method"] == "paper-clustered bootstrap, percentile interval"
    text = _invoke(["compare", "--resamples", "3000", str(run_a), str(run_b)]).output
    assert f"scaled line rate: b - a = +{100 * 10 / 17:.2f} points" in text
    assert "scored only in a: beta/s1" in text
    assert "scored only in b: gamma/s3" in text
    assert "at the 5% level" in text


def test_compare_several_runs_against_a_baseline_with_holm(tmp_path: Path) -> None:
    base = _write_run(tmp_path, "base", _all(False))
    good = _all(True)
    good["beta/s1"] = [False]
    runs = [base, _write_run(tmp_path, "good", good)]
    odd = _all(False)
    odd["gamma/s0"] = [True]
    runs.append(_write_run(tmp_path, "odd", odd))
    doc = json.loads(_invoke(["compare", "--json", "--resamples", "2000", "--baseline", "base",
                              *map(str, reversed(runs))]).output)  # fmt: skip
    assert doc["baseline"] == "base"
    assert doc["correction"] == "holm"
    by = {c["b"]: c["metrics"]["scaled@1"] for c in doc["comparisons"]}
    assert set(by) == {"good", "odd"}
    raw = [by["good"]["p_value"], by["odd"]["p_value"]]
    assert [by["good"]["p_holm"], by["odd"]["p_holm"]] == pytest.approx(stats.holm(raw))
    assert by["good"]["significant"]  # every paper moves: no resample crosses 0
    assert by["good"]["p_value"] == 0.0
    assert not by["odd"]["significant"]  # one snippet of one paper
    with pytest.raises(Exception, match="no run named nope"):
        compare_statistics(runs, baseline="nope")


def test_compare_with_several_samples_reports_pass_at_k(tmp_path: Path) -> None:
    a: dict[str, list[bool | None]] = {sid: [False, True, False] for sid in _all(False)}
    a["beta/s0"] = [True, True, False]
    a["gamma/s2"] = [True, None, False]  # two scored samples: out of pass@3, counted
    b = {sid: [True, True, False] for sid in _all(False)}
    run_a = _write_run(tmp_path, "a", a, samples=3)
    run_b = _write_run(tmp_path, "b", b, samples=3)
    doc = json.loads(_invoke(["compare", "--json", "--samples", "3", "--resamples", "2000",
                              str(run_a), str(run_b)]).output)  # fmt: skip
    metrics = doc["runs"][0]["metrics"]
    assert set(metrics) == {f"{m}@{k}" for m in ("scaled", "plain") for k in (1, 2, 3)}
    weights = {f"{p}/s{i}": w for p, ws in PAPERS.items() for i, w in enumerate(ws)}

    def expected(run: Mapping[str, Sequence[bool | None]], k: int) -> float:
        num = den = Fraction(0)
        for sid, flags in run.items():
            scored = [f for f in flags if f is not None]
            if len(scored) < k:
                continue
            num += weights[sid] * _brute_pass_at_k(len(scored), sum(scored), k)
            den += weights[sid]
        return float(100 * num / den)

    for k in (1, 2, 3):
        assert metrics[f"scaled@{k}"]["estimate"] == pytest.approx(expected(a, k)), k
    assert metrics["scaled@3"]["excluded_snippets"] == 1
    assert metrics["scaled@2"]["excluded_snippets"] == 0
    (c,) = doc["comparisons"]
    for k in (1, 2, 3):
        m = c["metrics"][f"scaled@{k}"]
        if k < 3:
            assert m["difference"] == pytest.approx(expected(b, k) - expected(a, k)), k
    assert c["metrics"]["scaled@3"]["snippets"] == 8
    # pass@1 over samples is the mean of the per-sample rates (no infrastructure failure in b)
    summary = json.loads(_invoke(["summary", "--json", "--resamples", "500", str(run_b)]).output)
    assert summary["overall"]["scaled"] == pytest.approx(
        summary["statistics"]["overall"]["scaled@1"]["estimate"]
    )


def test_summary_json_gives_every_rate_an_interval_and_keeps_the_old_fields(
    tmp_path: Path,
) -> None:
    a = _all(False)
    a["alpha/s0"] = [True]
    a["beta/s0"] = [True]
    a["gamma/s3"] = [None]
    run = _write_run(tmp_path, "a", a)
    doc = json.loads(_invoke(["summary", "--json", "--resamples", "1000", "--seed", "7",
                              str(run)]).output)  # fmt: skip
    for key in ("overall", "per_paper", "samples", "episodes", "infra_errors", "truncated"):
        assert key in doc  # what summary --json printed before
    st = doc["statistics"]
    assert (st["resamples"], st["seed"], st["level"]) == (1000, 7, 0.95)
    overall = st["overall"]["scaled@1"]
    assert overall["estimate"] == pytest.approx(doc["overall"]["scaled"])
    assert overall["low"] <= overall["estimate"] <= overall["high"]
    assert (overall["clusters"], overall["papers"], overall["infra_episodes"]) == ("paper", 3, 1)
    assert set(st["per_paper"]) == {"alpha", "beta", "gamma"}
    assert st["per_paper"]["beta"]["scaled@1"]["clusters"] == "snippet"
    assert st["per_paper"]["beta"]["scaled@1"]["estimate"] == pytest.approx(100 * 4 / 6)
    text = _invoke(["summary", "--resamples", "1000", "--seed", "7", str(run)]).output
    assert "95% intervals: paper-clustered bootstrap" in text
    assert "1000 resamples, seed 7" in text


def test_plan_names_the_samples_a_difference_needs(tmp_path: Path) -> None:
    flags = [[True, False, False, True], [True, True, True, False], [False, False, False, True]]
    base = {sid: flags[i % 3] for i, sid in enumerate(_all(False))}
    run = _write_run(tmp_path, "base", base, samples=4)
    doc = json.loads(_invoke(["plan", "--baseline", str(run), "--difference", "10", "--json",
                              "--resamples", "1000"]).output)  # fmt: skip
    assert doc["within_estimated"]
    assert doc["between"] == 0
    needed = doc["samples"]
    assert needed is not None
    within = doc["within"]  # points^2 per sample, both runs
    m = stats.z(0.975) + stats.z(0.8)
    assert needed == math.ceil(within / (10 / m) ** 2)
    text = _invoke(["plan", "--baseline", str(run), "--difference", "10",
                    "--resamples", "1000"]).output  # fmt: skip
    assert f"to detect 10 points: {needed} sample(s) per snippet" in text
    once = _write_run(tmp_path, "once", {sid: f[:1] for sid, f in base.items()})
    text = _invoke(["plan", "--baseline", str(once), "--difference", "10",
                    "--resamples", "1000"]).output  # fmt: skip
    assert "one sample per snippet" in text


def test_run_statistics_of_a_combined_run_and_the_full_benchmark() -> None:
    from rcb_env.results.summary import Totals, Unavailable

    records = []
    for sid, flag in (("alpha/s0", True), ("alpha/s1", False), ("beta/s0", True)):
        records.append(
            EpisodeRecord(
                run_id="r", episode_id=sid, snippet_id=sid, paper_id=sid.split("/")[0], sample=0,
                weight=2, task_hash="", agent={}, config={}, status="completed", reason="submit",
                reward=0.0, passed=flag, initial_observation="", steps=[], started_at=0.0,
                duration_s=0.0,
            )
        )  # fmt: skip
    totals = Totals(
        name="bench", snippets=5, weight=10,
        unavailable=(Unavailable(paper="gone", reason="x", snippets=2, weight=4),),
    )  # fmt: skip
    st = run_statistics(records, totals, boot=Bootstrap(resamples=500))
    assert st.overall["scaled@1"].estimate == pytest.approx(100 * 4 / 6)
    assert st.full["scaled@1"].estimate == pytest.approx(100 * 4 / 10)
    assert st.full["scaled@1"].papers == 3  # the unavailable paper is a cluster of its own
    parts = Totals(
        name="a + b", snippets=3, weight=6,
        parts=(Totals(name="a", snippets=2, weight=4, papers=("alpha",)),
               Totals(name="b", snippets=1, weight=2, papers=("beta",))),
    )  # fmt: skip
    st = run_statistics(records, parts, boot=Bootstrap(resamples=500))
    assert st.parts["a"]["scaled@1"].estimate == pytest.approx(50.0)
    assert st.parts["a"]["scaled@1"].clusters == "snippet"  # one paper: snippets resampled
    assert st.parts["b"]["scaled@1"].estimate == pytest.approx(100.0)


def test_the_report_ranks_runs_marks_tied_neighbours_and_sorts_snippets(tmp_path: Path) -> None:
    from rcb_env.results import report

    _write_run(tmp_path, "every", _all(True))
    almost = _all(True)
    almost["gamma/s1"] = [False]  # one line of 21: not distinguishable from "every"
    _write_run(tmp_path, "almost", almost)
    _write_run(tmp_path, "none", _all(False))
    data = report.build([tmp_path], title="t")
    runs = {r["id"]: r for r in data["runs"]}
    assert [runs[x]["rank"] for x in ("every", "almost", "none")] == [1, 2, 3]
    assert runs["every"]["runnable"]["scaled_ci"] == [100.0, 100.0]
    low, high = runs["almost"]["runnable"]["scaled_ci"]
    assert low <= runs["almost"]["runnable"]["scaled"] <= high
    assert "plain_ci" in runs["none"]["runnable"]
    ids = [r["id"] for r in data["runs"]]

    def tied(run: str) -> set[str]:
        return {ids[n["run"]] for n in runs[run]["neighbours"] if n["tied"]}

    assert tied("every") == {"almost"}
    assert tied("almost") == {"every"}  # "none" fails everywhere: every paper differs
    assert tied("none") == set()
    below = next(n for n in runs["every"]["neighbours"] if ids[n["run"]] == "almost")
    assert below["difference"] == pytest.approx(-100 / 21, abs=1e-3)
    assert set(runs["every"]["per_paper_ci"]) == {"alpha", "beta", "gamma"}
    items = data["items"]
    assert len(items) == 9
    assert [x["solve_rate"] for x in items] == sorted((x["solve_rate"] for x in items),
                                                      reverse=True)  # fmt: skip
    assert items[-1]["snippet"] == "gamma/s1"
    assert items[-1]["solve_rate"] == pytest.approx(100 / 3, abs=1e-3)
    assert (items[-1]["solved_by"], items[-1]["runs"], items[-1]["kind"]) == (1, 3, "separates")
    assert items[0]["solve_rate"] == pytest.approx(200 / 3, abs=1e-3)


def test_a_single_paired_snippet_gets_no_interval_and_no_test(tmp_path: Path) -> None:
    run_a = _write_run(tmp_path, "a", {"alpha/s0": [True]})
    run_b = _write_run(tmp_path, "b", {"alpha/s0": [False]})
    doc = json.loads(_invoke(["compare", "--json", str(run_a), str(run_b)]).output)
    m = doc["comparisons"][0]["metrics"]["scaled@1"]
    assert m["difference"] == -100.0
    assert (m["low"], m["p_value"], m["mde"], m["significant"]) == (None, None, None, False)
    assert doc["runs"][0]["metrics"]["scaled@1"]["low"] is None
    text = _invoke(["compare", str(run_a), str(run_b)]).output
    assert "on a single snippet: no interval, no test" in text
