"""Test strength: mutants of a reference body, graded like submissions, scored per snippet; the
verified subset made from the scores."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from rcb_env.cli import cli
from rcb_env.errors import ConfigError
from rcb_env.grading import Grader
from rcb_env.grading.models import GradeResult
from rcb_env.task import bundled_root, load
from rcb_env.task.models import Pset
from rcb_env.task.selection import load_subset, select_subset, subset_names
from rcb_env.validation.mutants import OPERATORS, generate
from rcb_env.validation.strength import (
    RECORDS,
    Case,
    GradeAll,
    local_grading,
    score_mutants,
    verified_subset,
)
from rcb_env.verdicts import FailureKind, Outcome

CANARY = bundled_root() / "strength-canary"
STRONG = "weighted-stats/weighted mean"
WEAK = "weighted-stats/affine map"

BODY = """\
        x = a + b * 2
        if x > 0 and flag:
            y = torch.softmax(x[:, 1:n], dim=-1)
        else:
            y = f(x, a)
        return y / norm(y)
"""


@pytest.mark.parametrize(
    ("operator", "description", "changed"),
    [
        ("arithmetic", "+ -> -", "        x = a - b * 2\n"),
        ("comparison", "> -> >=", "        if x >= 0 and flag:\n"),
        ("constant", "2 -> 3", "        x = a + b * 3\n"),
        ("boolean", "and -> or", "        if x > 0 or flag:\n"),
        (
            "index",
            "slice upper n -> n - 1",
            "            y = torch.softmax(x[:, 1:(n) - 1], dim=-1)\n",
        ),
        ("arguments", "arguments swapped: x <-> a", "            y = f(a, x)\n"),
        ("statement", "deleted: x = a + b * 2", "        pass\n"),
        ("returns", "return y instead", "        return y\n"),
        ("keywords", "keyword dropped: dim=-1", "            y = torch.softmax(x[:, 1:n])\n"),
    ],
)
def test_each_operator_changes_one_place_of_the_body(
    operator: str, description: str, changed: str
) -> None:
    made = generate(BODY, operators=(operator,))
    by_description = {m.description: m for m in made.mutants}
    assert description in by_description, sorted(by_description)
    mutant = by_description[description]
    assert mutant.operator == operator
    ref_lines, new_lines = BODY.splitlines(keepends=True), mutant.body.splitlines(keepends=True)
    assert len(ref_lines) == len(new_lines)
    differ = [i for i, (a, b) in enumerate(zip(ref_lines, new_lines, strict=True)) if a != b]
    assert [new_lines[i] for i in differ] == [changed]
    assert mutant.line == differ[0] + 1


def test_every_operator_is_registered_and_the_indented_wrapper_is_never_mutated() -> None:
    assert len(OPERATORS.names()) == 9
    made = generate(BODY)
    assert made.mutants
    assert made.error is None
    for m in made.mutants:
        # the body parses only inside the wrapper rcb-env adds; no mutant changes or drops it
        assert not m.body.startswith("if ")
        assert m.body.startswith("        ")
        assert "True" not in m.body


def test_same_tree_mutants_are_not_counted_and_a_body_that_does_not_parse_alone_is_reported() -> (
    None
):
    # index 0 -> 1 and constant 0 -> 1 make the same code: one mutant, the other not counted
    made = generate("    y = x[0]\n", operators=("constant", "index"))
    assert [m.body for m in made.mutants].count("    y = x[1]\n") == 1
    assert made.equivalent >= 1
    broken = generate("    else:\n        y = 1\n")
    assert broken.mutants == ()
    assert broken.error


def test_seed_and_cap_bound_the_mutants_and_draw_from_every_operator() -> None:
    everything = generate(BODY)
    assert len(everything.mutants) == everything.candidates > 20
    a, b = generate(BODY, seed=1, cap=9), generate(BODY, seed=1, cap=9)
    assert a == b
    assert len(a.mutants) == 9
    assert {m.operator for m in a.mutants} == set(OPERATORS.names())
    others = [generate(BODY, seed=s, cap=9).mutants for s in range(2, 6)]
    assert any(o != a.mutants for o in others)


def _recording(inner: GradeAll, seen: list[int]) -> GradeAll:
    def grade_all(cases: Sequence[Case], done: Callable[[Case, GradeResult], None]) -> None:
        seen.append(len(cases))
        inner(cases, done)

    return grade_all


@pytest.mark.slow
def test_weak_and_strong_canary_tests_kill_and_let_through_known_mutants(
    tmp_path: Path, grader: Grader
) -> None:
    pset = load(CANARY)
    seen: list[int] = []
    grade = _recording(local_grading(lambda _p: grader, jobs=2), seen)
    out = tmp_path / "records"
    report = score_mutants(pset, grade, seed=0, cap=None, out=out)
    by_id = {s.id: s for s in report.snippets}
    strong, weak = by_id[STRONG], by_id[WEAK]
    assert (strong.tried, strong.killed, strong.survived, strong.excluded) == (7, 6, 1, 0)
    # the one survivor is equivalent: w * x is x * w
    assert [s.description for s in strong.survivors] == ["arguments swapped: weights <-> values"]
    assert (weak.tried, weak.killed, weak.survived) == (7, 5, 2)
    assert sorted(s.description for s in weak.survivors) == ["+ -> -", "return y instead"]
    flipped = next(s for s in weak.survivors if s.description == "+ -> -")
    assert "-    return y + offset\n+    return y - offset\n" in flipped.diff
    assert flipped.line == 16  # the line in stats.py
    assert strong.score == round(6 / 7, 4)
    assert weak.score == round(5 / 7, 4)
    # line-weighted: both snippets have 2 lines
    assert report.papers[0].score == round((6 / 7 + 5 / 7) / 2, 4)
    assert report.total.killed == 11
    assert report.total.survived == 3
    # records: one per mutant; a second run resumes and grades nothing again
    assert len((out / RECORDS).read_text().splitlines()) == 14
    again = score_mutants(pset, grade, seed=0, cap=None, out=out)
    assert seen == [14, 0]
    assert again.snippets == report.snippets
    with pytest.raises(ConfigError, match="seed 0"):
        score_mutants(pset, grade, seed=1, cap=None, out=out)


def _fake(outcome: Callable[[Case], Outcome]) -> GradeAll:
    """A grader of our own: each case's outcome decided by ``outcome``."""

    def grade_all(cases: Sequence[Case], done: Callable[[Case, GradeResult], None]) -> None:
        for c in cases:
            o = outcome(c)
            kind = {
                Outcome.PASSED: FailureKind.NONE,
                Outcome.FAILED: FailureKind.TEST_FAILURE,
                Outcome.INFRA_ERROR: FailureKind.SANDBOX,
            }[o]
            done(
                c,
                GradeResult(
                    snippet_id=c.snippet.id,
                    outcome=o,
                    kind=kind,
                    official_pass=o is Outcome.PASSED,
                ),
            )

    return grade_all


def test_infrastructure_failures_are_excluded_not_killed_and_graded_again_on_resume(
    tmp_path: Path,
) -> None:
    pset = load(CANARY)
    broken = {"return y instead", "* -> /"}

    def first(c: Case) -> Outcome:
        if c.mutant.description in broken:
            return Outcome.INFRA_ERROR
        return Outcome.FAILED

    out = tmp_path / "records"
    report = score_mutants(pset, _fake(first), cap=None, out=out)
    weak = next(s for s in report.snippets if s.id == WEAK)
    assert (weak.tried, weak.killed, weak.survived, weak.excluded) == (7, 5, 0, 2)
    assert weak.score == 1.0  # 5 of 5 counted, the excluded two are not in the denominator
    strong = next(s for s in report.snippets if s.id == STRONG)
    assert strong.excluded == 1
    assert strong.killed == 6
    regraded: list[str] = []

    def second(c: Case) -> Outcome:
        regraded.append(c.mutant.description)
        return Outcome.PASSED

    again = score_mutants(pset, _fake(second), cap=None, out=out)
    assert sorted(regraded) == sorted(["return y instead", "* -> /", "* -> /"])
    weak = next(s for s in again.snippets if s.id == WEAK)
    assert (weak.killed, weak.survived, weak.excluded) == (5, 2, 0)


def test_verified_subset_keeps_ok_snippets_at_the_threshold_and_selects_them(
    tmp_path: Path,
) -> None:
    pset = load(CANARY)
    # the fake kills everything but the weak snippet's `+ -> -`
    report = score_mutants(
        pset,
        _fake(lambda c: Outcome.PASSED if c.mutant.description == "+ -> -" else Outcome.FAILED),
        cap=None,
        validation={STRONG: "ok", WEAK: "ok"},
    )
    chosen = verified_subset(report, threshold=0.9, repeat=2)
    assert [s.id for s in chosen.snippets] == [STRONG]
    assert "mutation score >= 0.9" in chosen.criteria
    assert chosen.rcb_env_version
    looser = verified_subset(report, threshold=0.8, repeat=2)
    assert [s.id for s in looser.snippets] == [STRONG, WEAK]
    flaky = score_mutants(
        pset, _fake(lambda _c: Outcome.FAILED), cap=None, validation={STRONG: "flaky"}
    )
    assert [s.id for s in verified_subset(flaky, threshold=0.5, repeat=2).snippets] == []
    path = tmp_path / "mine.json"
    path.write_text(chosen.model_dump_json())
    narrowed: Pset = select_subset(pset, load_subset(str(path)))
    assert [s.id for s in narrowed.snippets] == [STRONG]
    with pytest.raises(ConfigError, match="no subset named 'nope'"):
        load_subset("nope")


def test_the_shipped_verified_subset_loads() -> None:
    assert "verified" in subset_names()
    shipped = load_subset("verified")
    assert shipped.name == "verified"
    assert shipped.snippets
    assert all(s.score >= shipped.threshold for s in shipped.snippets)


def test_cli_mutants_json_is_one_document_with_the_scores(
    tmp_path: Path, require_bwrap: None
) -> None:
    subset = tmp_path / "subset.json"
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            "--pset",
            str(CANARY),
            "--sandbox",
            "bwrap",
            "--mutants",
            "--jobs",
            "2",
            "--repeat",
            "2",
            "--cap",
            "5",
            "--json",
            "--subset-out",
            str(subset),
            "--threshold",
            "0.75",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = {s["id"]: s for s in doc["snippets"]}
    assert set(rows) == {STRONG, WEAK}
    for row in rows.values():
        assert row["tried"] == 5 == row["killed"] + row["survived"]
        assert row["score"] == round(row["killed"] / 5, 4)
        assert row["validation"] == "ok"
    assert rows[WEAK]["survived"] >= 1
    assert doc["total"]["killed"] == sum(r["killed"] for r in rows.values())
    written = json.loads(subset.read_text())
    assert {s["id"] for s in written["snippets"]} == {
        i for i, r in rows.items() if r["score"] >= 0.75
    }


@pytest.fixture(scope="module")
def canary_runs(tmp_path_factory: pytest.TempPathFactory, require_bwrap: None) -> Path:
    """Two runs on the canary in bwrap: the oracle, and an agent that submits a wrong body for
    each snippet (a mutant each test should kill: the weak test lets its one through)."""
    from rcb_env import config
    from rcb_env.grading import GradingConfig
    from rcb_env.runner import EvalConfig, run_eval
    from rcb_env.sandbox import SandboxConfig
    from rcb_env.testing.scripted import ScriptedAgent
    from rcb_env.tools.actions import Submit

    root = tmp_path_factory.mktemp("canary-runs")
    pset = load(CANARY)
    wrong = {
        s.id: next(
            m.body
            for m in generate(s.reference_body).mutants
            if m.description == ("+ -> -" if s.id == WEAK else "* -> /")
        )
        for s in pset.snippets
    }
    sandbox = SandboxConfig(backend="bwrap", python=config.task_python())
    grading = GradingConfig(python=config.task_python(), timeout_s=60)
    run_eval(pset, EvalConfig(agent="oracle", sandbox=sandbox, grading=grading), root / "oracle")

    def agent() -> ScriptedAgent:
        return ScriptedAgent([lambda _obs, info: Submit(body=wrong[info["snippet_id"]])])

    run_eval(
        pset,
        EvalConfig(agent="wrong-code", sandbox=sandbox, grading=grading),
        root / "wrong",
        make_agent=agent,
    )
    return root


def _strong_only(tmp_path: Path) -> Path:
    path = tmp_path / "strong.json"
    report = score_mutants(
        load(CANARY),
        _fake(lambda c: Outcome.PASSED if c.snippet.id == WEAK else Outcome.FAILED),
        cap=None,
        validation={STRONG: "ok", WEAK: "ok"},
    )
    path.write_text(verified_subset(report, threshold=0.8, repeat=2).model_dump_json())
    return path


def test_summary_and_compare_show_full_and_subset_rates(canary_runs: Path, tmp_path: Path) -> None:
    from rcb_env.results.compare import load_runs
    from rcb_env.results.summary import summarize_run

    subset = load_subset(str(_strong_only(tmp_path)))
    wrong = summarize_run(canary_runs / "wrong", subset)
    # the weak test pays for wrong code on the full set; the verified subset does not
    assert wrong.overall is not None
    assert wrong.overall.plain == 50.0
    assert wrong.subset is not None
    assert wrong.subset.rates is not None
    assert (wrong.subset.rates.plain, wrong.subset.snippets, wrong.subset.of) == (0.0, 1, 1)
    oracle = summarize_run(canary_runs / "oracle", subset)
    assert oracle.subset is not None
    assert oracle.subset.rates is not None
    assert oracle.subset.rates.plain == 100.0
    assert summarize_run(canary_runs / "wrong").subset is None
    loaded = load_runs([canary_runs / "oracle", canary_runs / "wrong"], subset=subset)
    assert [
        r.summary.subset.rates.plain for r in loaded if r.summary.subset and r.summary.subset.rates
    ] == [100.0, 0.0]
    result = CliRunner().invoke(
        cli,
        [
            "compare",
            str(canary_runs / "oracle"),
            str(canary_runs / "wrong"),
            "--subset",
            str(tmp_path / "strong.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "verified scaled %" in result.output
    as_json = CliRunner().invoke(
        cli,
        ["compare", str(canary_runs / "oracle"), str(canary_runs / "wrong"), "--json",
         "--subset", str(tmp_path / "strong.json")],
    )  # fmt: skip
    assert as_json.exit_code == 0, as_json.output
    runs = json.loads(as_json.stdout)["runs"]
    assert [r["subset"]["rates"]["plain"] for r in runs] == [100.0, 0.0]
    shown = CliRunner().invoke(
        cli, ["summary", str(canary_runs / "wrong"), "--subset", str(tmp_path / "strong.json")]
    )
    assert shown.exit_code == 0, shown.output
    assert "verified subset (1 of 1)" in shown.output


def test_report_has_subset_rates_and_each_snippets_mutation_score(
    canary_runs: Path, tmp_path: Path
) -> None:
    from rcb_env.results import report

    subset = load_subset(str(_strong_only(tmp_path)))
    pset = load(CANARY)
    strength = score_mutants(
        pset,
        _fake(lambda c: Outcome.PASSED if c.mutant.description == "+ -> -" else Outcome.FAILED),
        cap=None,
    )
    data = report.build([canary_runs], subset=subset, strength=strength.model_dump(mode="json"))
    by_label = {r["agent"]: r for r in data["runs"]}
    assert by_label["wrong-code"]["runnable"]["plain"] == 50.0
    assert by_label["wrong-code"]["subset"]["plain"] == 0.0
    assert by_label["oracle"]["subset"]["plain"] == 100.0
    assert data["subset"]["name"] == "verified"
    weak = next(s for s in data["snippets"] if s["id"] == WEAK)
    assert weak["strength"]["score"] == round(6 / 7, 4)
    assert "+    return y - offset" in weak["strength"]["survivor"]["diff"]
    assert weak["in_subset"] is False
    page = report.render(data)
    assert "board-subset" in (report.ASSETS / "report.js").read_text()
    assert "y - offset" in page


@pytest.mark.slow
def test_the_leaderboard_switches_to_the_subset_in_a_browser(
    canary_runs: Path, tmp_path: Path
) -> None:
    import time

    from rcb_env.results import report
    from tests import browser

    if not browser.available():
        if os.environ.get("CI"):
            pytest.fail("chromium and chromedriver must be installed in CI (scripts/install.sh)")
        pytest.skip("no chromium here")
    strength = score_mutants(
        load(CANARY),
        _fake(lambda c: Outcome.PASSED if c.mutant.description == "+ -> -" else Outcome.FAILED),
        cap=None,
    )
    page = report.write(
        [canary_runs],
        tmp_path / "report.html",
        subset=load_subset(str(_strong_only(tmp_path))),
        strength=strength.model_dump(mode="json"),
    )
    rows = """
      const heads = [...document.querySelectorAll('#leaderboard thead th')].map(t => t.textContent);
      return [...document.querySelectorAll('#leaderboard tbody tr')].map(tr =>
        Object.fromEntries([...tr.children].map((td, i) => [heads[i], td.textContent])));
    """
    with browser.browser() as driver:
        driver.get(page.as_uri())
        deadline = time.monotonic() + 30
        while driver.execute_script("return document.body.getAttribute('data-ready')") != "1":
            assert time.monotonic() < deadline, browser.console_errors(driver)
            time.sleep(0.05)
        before = {r["agent"][:10]: r for r in driver.execute_script(rows)}
        assert before["wrong-code"]["plain % (runnable)"] == "50.00"
        driver.execute_script("document.getElementById('board-subset').click()")
        after = {r["agent"][:10]: r for r in driver.execute_script(rows)}
        assert after["wrong-code"]["plain % (verified)"] == "0.00"
        assert after["oracle"]["plain % (verified)"] == "100.00"
        cell = driver.execute_script(
            "return [...document.querySelectorAll('#items tr')]"
            ".find(tr => tr.dataset.snippet === arguments[0]).querySelector('.mutation')"
            ".textContent",
            WEAK,
        )
        assert cell.startswith("86% (6/7 killed)")
        assert "return y - offset" in cell
        assert not browser.console_errors(driver)


def test_eval_runs_only_the_subsets_snippets(tmp_path: Path, require_bwrap: None) -> None:
    from rcb_env.results.records import read_records

    result = CliRunner().invoke(
        cli,
        ["eval", "--agent", "null", "--pset", str(CANARY), "--sandbox", "bwrap",
         "--subset", str(_strong_only(tmp_path)), "--resume", str(tmp_path / "run")],
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    assert [r.snippet_id for r in read_records(tmp_path / "run" / "episodes.jsonl")] == [STRONG]
    unknown = CliRunner().invoke(cli, ["eval", "--agent", "null", "--subset", "nope"])
    assert unknown.exit_code != 0
    assert "no subset named 'nope'" in str(unknown.exception) + unknown.output


def test_survivors_that_differ_on_other_inputs_are_test_gaps_the_rest_possibly_equivalent(
    require_bwrap: None,
) -> None:
    result = CliRunner().invoke(
        cli,
        ["validate", "--pset", str(CANARY), "--sandbox", "bwrap", "--mutants", "--equivalence",
         "--jobs", "2", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = {s["id"]: s for s in json.loads(result.stdout)["snippets"]}
    kinds = {i: {v["description"]: v["kind"] for v in row["survivors"]} for i, row in rows.items()}
    # w * x is x * w: no input tells them apart; a flipped offset and a dropped one do differ
    # from the reference once the offset is not zero
    assert kinds == {
        STRONG: {"arguments swapped: weights <-> values": "possibly equivalent"},
        WEAK: {"+ -> -": "test gap", "return y instead": "test gap"},
    }
    assert (rows[WEAK]["test_gaps"], rows[WEAK]["possibly_equivalent"]) == (2, 0)
    assert (rows[STRONG]["test_gaps"], rows[STRONG]["possibly_equivalent"]) == (0, 1)


def test_a_change_spliced_into_the_text_is_what_the_whole_trees_code_generation_gives() -> None:
    """The generator splices a one-line change into the body's text instead of generating the
    whole tree again: byte for byte the same code, for every change of every bundled body."""
    import libcst as cst

    from rcb_env.validation import mutants

    operators = [OPERATORS.get(n)() for n in OPERATORS.names()]
    spliced = 0
    for paper in load(bundled_root()).papers:
        for snippet in paper.snippets:
            module = cst.parse_module(mutants._WRAP + snippet.reference_body)
            nodes = mutants._Nodes(module)
            for op in operators:
                for node in nodes.order[1:]:
                    for new, _ in op.variants(node, module.code_for_node(node)):
                        try:
                            whole = module.deep_replace(node, new)
                        except Exception:  # rejected either way, as the generator does
                            continue
                        assert isinstance(whole, cst.Module)
                        assert mutants._replaced(module, nodes, node, new) == whole.code
                        spliced += node in nodes.spans
    assert spliced > 500  # most changes take the fast way
