"""Each snippet's difficulty (rcb_env.task.difficulty): solve rates from the paper's published
results and from runs, size and nesting; the subsets chosen by it (``hard``,
``solve-rate:LO:HI``) and where they are exposed (``tasks``, the trainer rows)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rcb_env.cli import cli
from rcb_env.episode.outcome import EpisodeStatus, StopReason
from rcb_env.errors import ConfigError, InfraError
from rcb_env.integrations.trl import dataset_rows
from rcb_env.results.records import RECORDS, EpisodeRecord
from rcb_env.task import bundled_root, load
from rcb_env.task.difficulty import difficulty_table, read_published, solve_rates
from rcb_env.task.selection import load_subset

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "benchmarks" / "researchcodebench"


def _direct_rates(stats_file: Path) -> tuple[dict[str, float], dict[str, int]]:
    """Each snippet's published solve rate computed straight from the file (not with rcb-env):
    per model the share of its completions that passed, averaged over the models."""
    data = json.loads(stats_file.read_text())["results"]
    shares: dict[str, list[float]] = {}
    lines: dict[str, int] = {}
    for paper_id, paper in data.items():
        for entry in paper["results"].values():
            for name, samples in entry["results"].items():
                sid = f"{paper_id}/{name}"
                shares.setdefault(sid, []).append(
                    sum(1 for x in samples if x["passed"]) / len(samples)
                )
                lines[sid] = samples[0]["snippet_code_line_count"]
    return {k: sum(v) / len(v) for k, v in shares.items()}, lines


def _check_hardest_decile(stats_file: Path) -> set[str]:
    rates, lines = _direct_rates(stats_file)
    hard = load_subset("hard", stats_file).ids
    k = math.ceil(len(rates) / 10)
    assert len(hard) == k
    # the decile: nothing left out is easier... nothing in it is easier than anything left out
    assert max(rates[i] for i in hard) <= min(rates[i] for i in rates if i not in hard)
    # and the boundary tie is broken as documented: the larger snippet, then the id
    direct = sorted(rates, key=lambda i: (rates[i], -lines[i], i))[:k]
    assert hard == set(direct)
    for entry in load_subset("hard", stats_file).snippets:
        assert entry.score == pytest.approx(rates[entry.id])
    return set(hard)


def _results_file(path: Path, passes: dict[str, list[int]], lines: dict[str, int]) -> Path:
    """A results file of the paper's shape: ``passes[snippet][m]`` is model m's verdict."""
    results: dict[str, Any] = {}
    models = len(next(iter(passes.values())))
    for sid, verdicts in passes.items():
        paper, name = sid.split("/", 1)
        for m in range(models):
            entry = results.setdefault(paper, {"results": {}})["results"]
            entry.setdefault(f"M{m}", {"results": {}})["results"][name] = [
                {"passed": bool(verdicts[m]), "completion_idx": 0,
                 "snippet_code_line_count": lines[sid]}
            ]  # fmt: skip
    path.write_text(json.dumps({"results": results, "overall_scores": {}}))
    return path


def test_hardest_decile_of_a_results_file_with_ties(tmp_path: Path) -> None:
    # 12 snippets, 4 models: rates 0, 0, 0, 0.25, ... ; three tie at 0 for two places
    passes = {
        "p/a": [0, 0, 0, 0], "p/b": [0, 0, 0, 0], "q/c": [0, 0, 0, 0], "q/d": [1, 0, 0, 0],
        "q/e": [1, 1, 0, 0], "q/f": [1, 1, 1, 0], "q/g": [1, 1, 1, 1], "q/h": [1, 1, 1, 1],
        "r/i": [1, 1, 0, 0], "r/j": [1, 0, 1, 0], "r/k": [0, 1, 1, 1], "r/l": [1, 1, 1, 0],
    }  # fmt: skip
    lines = {sid: 3 for sid in passes} | {"q/c": 9, "p/b": 9}
    stats = _results_file(tmp_path / "overall_stats.json", passes, lines)
    assert _check_hardest_decile(stats) == {"p/b", "q/c"}  # the two larger of the three at 0
    within = load_subset("solve-rate:0:0.25", stats)
    assert within.ids == {"p/a", "p/b", "q/c", "q/d"}
    assert load_subset("solve-rate:0.9:1", stats).ids == {"q/g", "q/h"}
    for bad in ("solve-rate:0.5:0.2", "solve-rate:x", "solve-rate:0:2"):
        with pytest.raises(ConfigError, match="range"):
            load_subset(bad, stats)
    (tmp_path / "bad.json").write_text('{"results": {"p": 3}}')
    with pytest.raises(ConfigError, match="not a ResearchCodeBench results file"):
        load_subset("hard", tmp_path / "bad.json")


def test_hard_needs_the_results_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RCB_PUBLISHED_RESULTS", raising=False)
    monkeypatch.setenv("RCB_ENV_HOME", str(tmp_path / "home"))  # nothing `rcb-env get` installed
    with pytest.raises(ConfigError, match="--published FILE or RCB_PUBLISHED_RESULTS"):
        load_subset("hard")
    stats = _results_file(tmp_path / "s.json", {"p/a": [0], "p/b": [1]}, {"p/a": 1, "p/b": 1})
    monkeypatch.setenv("RCB_PUBLISHED_RESULTS", str(stats))
    assert load_subset("hard").ids == {"p/a"}


def test_hardest_decile_of_the_published_results() -> None:
    """The paper's own file: the ``hard`` subset equals a direct computation over it."""
    stats = SHARED / "overall_stats.json"
    if not stats.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the published results must be beside the checkout in CI: {stats}")
        pytest.skip("no published results here")
    hard = _check_hardest_decile(stats)
    assert len(hard) == 22  # of 212 snippets; 44 no model solved
    rates, _ = _direct_rates(stats)
    assert sum(1 for r in rates.values() if r == 0) == 44
    within = load_subset("solve-rate:0:0.2", stats).ids
    assert within == {i for i, r in rates.items() if r <= 0.2}
    if (SHARED / "pset").is_dir():  # and through the command, on the loaded benchmark
        res = CliRunner().invoke(
            cli, ["tasks", "--pset", str(SHARED / "pset"), "--published", str(stats),
                  "--subset", "hard", "--json"],
        )  # fmt: skip
        assert res.exit_code in (0, 1), res.output  # 1: load findings of the published set
        shown = json.loads(res.output[res.output.index("{") :])
        listed = {s["id"]: s for p in shown["papers"] for s in p["snippets"]}
        assert set(listed) == hard
        for sid, s in listed.items():
            assert s["difficulty"]["published"]["rate"] == pytest.approx(rates[sid])
            assert s["difficulty"]["published"]["sources"] == 32
            assert s["difficulty"]["weight"] == s["weight"]


def _run(folder: Path, verdicts: dict[str, bool | None]) -> Path:
    """A run folder with one final record per snippet (None: an infrastructure failure)."""
    folder.mkdir(parents=True)
    lines = []
    for sid, passed in verdicts.items():
        broken = passed is None
        lines.append(
            EpisodeRecord(
                run_id=folder.name, episode_id=sid, snippet_id=sid,
                paper_id=sid.split("/")[0], sample=0, weight=1, task_hash="h",
                agent={"name": "t"}, config={},
                status=EpisodeStatus.INFRA_ERROR if broken else EpisodeStatus.COMPLETED,
                reason=StopReason.INFRA_ERROR if broken else StopReason.SUBMIT,
                reward=1.0 if passed else 0.0, passed=passed, initial_observation="",
                steps=[], started_at=0.0, duration_s=0.0,
                infra_error=InfraError(stage="sandbox", type="t", message="m") if broken else None,
            ).model_dump_json()
        )  # fmt: skip
    (folder / RECORDS).write_text("\n".join(lines) + "\n")
    return folder


def test_tasks_json_difficulty_runs_and_subset_out(tmp_path: Path) -> None:
    """On the bundled tasks: published rates from a results file naming some of their
    snippets, run rates from two runs (an infrastructure failure left out), the fields in
    ``tasks --json``, a range on the runs' rates, and the selection written as a subset file
    that ``load_subset`` reads back."""
    pset = load(bundled_root(), papers={"adamw-warmup"})
    ids = [s.id for s in pset.snippets]
    first, second = ids[0], ids[1]
    stats = _results_file(
        tmp_path / "overall_stats.json",
        {first: [1, 1, 0, 0], second: [0, 0, 0, 0]},
        {first: pset.snippets[0].weight, second: pset.snippets[1].weight},
    )
    run_a = _run(tmp_path / "a", {first: True, second: False})
    run_b = _run(tmp_path / "b", {first: None, second: True})
    args = ["tasks", "--paper", "adamw-warmup", "--published", str(stats)]
    args += ["--runs", str(run_a), "--runs", str(run_b), "--json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    listed = {s["id"]: s for p in json.loads(res.output)["papers"] for s in p["snippets"]}
    assert set(listed) == set(ids)
    d1, d2 = listed[first]["difficulty"], listed[second]["difficulty"]
    assert d1["published"] == {"rate": 0.5, "sources": 4, "solved_by": 2}
    assert d1["runs"] == {"rate": 1.0, "sources": 1, "solved_by": 1}  # run b's infra left out
    assert d2["published"]["rate"] == 0.0
    assert d2["runs"] == {"rate": 0.5, "sources": 2, "solved_by": 1}
    assert listed[ids[2]]["difficulty"]["published"] is None
    for s in pset.snippets:
        assert listed[s.id]["difficulty"]["weight"] == s.weight
        assert listed[s.id]["difficulty"]["depth"] == s.depth

    out = tmp_path / "mid.json"
    args = ["tasks", "--paper", "adamw-warmup", "--runs", str(run_a), "--runs", str(run_b)]
    args += ["--solve-rate", "0.4:0.6", "--rate-from", "runs", "--subset-out", str(out)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert load_subset(str(out)).ids == {second}


def test_trainer_rows_carry_size_depth_and_solve_rate(tmp_path: Path) -> None:
    pset = load(bundled_root())
    some = [s.id for s in pset.snippets][:3]
    stats = _results_file(
        tmp_path / "s.json",
        {some[0]: [1, 1], some[1]: [0, 0], some[2]: [1, 0]},
        dict.fromkeys(some, 1),
    )
    outcomes, _ = read_published(stats)
    rows = dataset_rows(difficulty=difficulty_table(pset, published=outcomes))
    by_id = {r["task_id"]: r for r in rows}
    assert [by_id[i]["solve_rate"] for i in some] == [1.0, 0.0, 0.5]
    assert all(r["weight"] == s.weight and r["depth"] == s.depth
               for r, s in zip(rows, pset.snippets, strict=True))  # fmt: skip
    easiest_first = sorted(
        (r for r in rows if r["solve_rate"] is not None), key=lambda r: -r["solve_rate"]
    )
    assert [r["task_id"] for r in easiest_first] == [some[0], some[2], some[1]]


def test_solve_rates_average_each_sources_share() -> None:
    rates = solve_rates(
        [("r1", "s", True), ("r1", "s", False), ("r2", "s", True), ("r3", "t", False)]
    )
    assert rates["s"].rate == pytest.approx((0.5 + 1.0) / 2)
    assert (rates["s"].sources, rates["s"].solved_by) == (2, 2)
    assert (rates["t"].rate, rates["t"].solved_by) == (0.0, 0)


def test_summary_takes_the_difficulty_subsets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--subset hard`` and ``--subset solve-rate:LO:HI`` wherever ``--subset`` is taken: here
    ``summary`` rates a run on them (the results file from ``RCB_PUBLISHED_RESULTS``)."""
    passes = {f"p/s{i}": [int(i > j) for j in range(10)] for i in range(10)}  # s_i: i/10
    stats = _results_file(tmp_path / "s.json", passes, dict.fromkeys(passes, 1))
    monkeypatch.setenv("RCB_PUBLISHED_RESULTS", str(stats))
    run = _run(tmp_path / "run", {"p/s0": True, "p/s1": False, "p/s5": True, "p/s9": True})
    res = CliRunner().invoke(cli, ["summary", str(run), "--json", "--subset", "hard"])
    assert res.exit_code == 0, res.output
    sub = json.loads(res.output)["subset"]
    assert (sub["name"], sub["of"], sub["snippets"]) == ("hard", 1, 1)  # s0, the one of ten
    assert sub["rates"]["plain"] == 100.0
    res = CliRunner().invoke(cli, ["summary", str(run), "--json", "--subset", "solve-rate:0:0.5"])
    sub = json.loads(res.output)["subset"]
    assert (sub["of"], sub["snippets"]) == (6, 3)  # s0..s5; the run has s0, s1, s5
    assert sub["rates"]["plain"] == pytest.approx(200 / 3)
