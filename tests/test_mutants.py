"""Test strength: mutants of a reference body, graded like submissions, scored per snippet; the
verified subset made from the scores."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from rcb_env.cli import cli
from rcb_env.errors import ConfigError
from rcb_env.grading import Grader
from rcb_env.grading.models import FailureKind, GradeResult, Outcome
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
