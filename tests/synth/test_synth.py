"""rcb-env synth: proposal (deterministic, never the test set), the written pset, the manifest's
drop reasons, a killed run resumed, and eval refusing a training set beside its test set."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from rcb_env.cli import cli
from rcb_env.cli.app import narrow
from rcb_env.errors import ConfigError
from rcb_env.grading.models import GradeResult
from rcb_env.integrations.harbor import write_task
from rcb_env.integrations.trl import dataset_rows
from rcb_env.sandbox import SandboxConfig
from rcb_env.synth import manifest as synth_manifest
from rcb_env.synth import run as synth_run
from rcb_env.synth.propose import Published, Region, Rules, mark, propose
from rcb_env.synth.run import (
    LEDGER,
    WORK,
    SynthPlan,
    TouchesTestSetError,
    apart,
    mutant_timeout,
    proposals,
    published_in,
    settled,
    settled_rounds,
    synthesize,
)
from rcb_env.task import annotations as ann
from rcb_env.task import bundled_root, load
from rcb_env.task.models import Paper
from rcb_env.validation.dispatcher import Local
from rcb_env.validation.mutants import generate
from rcb_env.validation.strength import Case
from rcb_env.verdicts import FailureKind, Outcome
from tests.conftest import write_paper, write_pset

STATS = '''\
"""Tiny statistics."""


def mean(xs):
    # <paper2code name="mean">
    return sum(xs) / len(xs)
    # </paper2code name="mean">


def centered(xs):
    """xs minus their mean."""
    m = mean(xs)
    shifted = [x - m for x in xs]
    return shifted


def scaled(xs, factor):
    """Each x times factor."""
    count = 0
    out = []
    for x in xs:
        out.append(x * factor)
        count += 1
    assert count == len(out)
    return out


def rescale_weights(weights, total_weight):
    normalised_weights = [w / total_weight for w in weights]
    return normalised_weights


def log_stats(xs):
    message = "mean %.3f over %d values" % (mean(xs), len(xs))
    print(message)


def never_called(xs):
    doubled_values = [x * 2 for x in xs]
    return doubled_values
'''

HELPERS = '''\
"""A copy of one function of stats.py: its answer is readable here."""


def rescale(weights, total_weight):
    normalised_weights = [w / total_weight for w in weights]
    return normalised_weights
'''

TEST = """\
import unittest

from stats import centered, log_stats, mean, rescale_weights, scaled


class TestStats(unittest.TestCase):
    def test_mean(self):
        self.assertAlmostEqual(mean([1, 2, 3, 4]), 2.5)

    def test_centered(self):
        self.assertEqual(centered([1.0, 3.0]), [-1.0, 1.0])

    def test_scaled(self):
        self.assertEqual(scaled([1, 2], 3), [3, 6])

    def test_rescale(self):
        self.assertEqual(rescale_weights([1, 3], 4), [0.25, 0.75])

    def test_log(self):
        log_stats([1, 2])


if __name__ == "__main__":
    unittest.main()
"""


def _source(root: Path) -> Path:
    files = {
        "paper2code_paper.tex": "\\section{Statistics} Means, centring, scaling.\n",
        "paper2code_test.py": TEST,
        "stats.py": STATS,
        "helpers.py": HELPERS,
    }
    return write_pset(root, [write_paper(root, "tiny", files)])


def _everything(paper: Paper) -> dict[str, set[int]]:
    return {f.path: set(range(1, len(f.text.splitlines()) + 1)) for f in paper.annotated_files}


def _plan() -> SynthPlan:
    """Real sandboxes (the leak audit scans what the solver could read: a sandbox's view)."""
    return SynthPlan(sandbox=SandboxConfig(backend="bwrap"), repeat=2, cap=6, timeout=60)


def test_proposal_is_deterministic_and_nests() -> None:
    """The same seed proposes the same regions; another seed other runs of lines; every
    file marked with all its candidates loads (they nest like published snippets)."""
    for paper in load(bundled_root()).papers:
        once = proposals(paper, _everything(paper), Rules(seed=0))
        again = proposals(paper, _everything(paper), Rules(seed=0))
        assert once == again
        for f in paper.annotated_files:
            mine = [r for r in once[0] if r.file == f.path]
            marked = mark(ann.strip_markers(f.text), mine)
            assert {s.name for s in ann.parse_spans(marked, f.path)} == {r.name for r in mine}
    text = "def f(xs):\n" + "".join(f"    v{i} = {i}\n" for i in range(12))
    runs = {
        seed: [
            (r.start, r.end)
            for r in propose("f.py", text, set(range(1, 14)), Published(), Rules(seed))[0]
        ]
        for seed in range(4)
    }
    assert len({tuple(v) for v in runs.values()}) > 1
    lines = [
        (r.start, r.end)
        for r in propose("f.py", text, set(range(1, 14)), Published(), Rules(0))[0]
        if r.rule == "lines"
    ]
    pairs = {(a, d) for a, b in lines for c, d in lines if c == b + 1}
    assert pairs & set(lines)  # two adjacent runs are a run at the next scale up


def test_no_candidate_touches_a_published_snippet() -> None:
    """On every bundled paper (every line executed), no proposed region overlaps a published
    snippet's lines, in either direction; the command's own check refuses one that does."""
    checked = 0
    for paper in load(bundled_root()).papers:
        regions, dropped = proposals(paper, _everything(paper), Rules())
        assert any(d.reason == "overlaps_published" for d in dropped)
        for r in regions:
            published, _ = published_in(paper.file_text(r.file), r.file, frozenset())
            assert all(not r.overlaps(a, b) for a, b in published.ranges), r.name
            apart(paper, r)
            checked += 1
    assert checked >= 5
    paper = load(bundled_root()).paper("scaled-attention")
    published, _ = published_in(
        paper.file_text("attention/core.py"), "attention/core.py", frozenset()
    )
    a, b = published.ranges[0]
    inside = Region("attention/core.py", a, a, "lines", "softmax", "    ", 1)
    around = Region("attention/core.py", a - 1, b + 1, "function-body", "softmax", "    ", 3)
    for region in (inside, around):
        with pytest.raises(TouchesTestSetError, match="touches the test set"):
            apart(paper, region)


def test_a_repeated_published_line_is_dropped(tmp_path: Path) -> None:
    """A region elsewhere that repeats a line of a published snippet's code is no candidate."""
    code = STATS.replace(
        "    m = mean(xs)\n", "    m = mean(xs)\n    average_value = sum(xs) / len(xs)\n"
    ).replace(
        "    return sum(xs) / len(xs)\n    # </paper2code",
        "    average_value = sum(xs) / len(xs)\n    return average_value\n    # </paper2code",
    )
    root = write_pset(
        tmp_path,
        [
            write_paper(
                tmp_path,
                "tiny",
                {"paper2code_test.py": TEST, "stats.py": code, "paper2code_paper.tex": "x"},
            )
        ],
    )
    paper = load(root).paper("tiny")
    regions, dropped = proposals(paper, _everything(paper), Rules())
    repeated = [d for d in dropped if d.reason == "repeats_published"]
    assert repeated
    assert all(d.region.owner == "centered" for d in repeated)
    text = ann.strip_markers(paper.file_text("stats.py")).splitlines()
    for r in regions:
        assert "average_value" not in "".join(text[r.start - 1 : r.end])


@pytest.mark.slow
def test_synth_killed_and_resumed(tmp_path: Path, require_bwrap: None) -> None:
    """``rcb-env synth`` killed while it grades mutants, then run again: nothing decided or
    passed is checked again (each candidate's verdict and each stage it passed once in the
    ledger), no graded mutant is graded again; then every stage's outcome: the kept snippets
    load as a pset with provenance and difficulty, and every dropped candidate has its reason
    in the manifest."""
    root = _source(tmp_path / "src")
    out = tmp_path / "train"
    argv = [sys.executable, "-m", "rcb_env", "synth", "--pset", str(root), "-o", str(out)]
    argv += ["--sandbox", "bwrap", "--repeat", "2", "--cap", "6", "--timeout", "60"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ledger = out / WORK / LEDGER
    mutants = out / WORK / "mutants" / "mutants.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if mutants.is_file() and mutants.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    with pytest.raises(ConfigError, match=f"another rcb-env synth \\(pid {proc.pid}\\)"):
        synthesize(load(root), _plan(), out, Local())  # one run at a time in a folder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / synth_manifest.MANIFEST).exists()
    before = [json.loads(x) for x in ledger.read_text().splitlines()]
    final_before = {v["id"] for v in before if v["kept"] is not None}
    assert {v["reason"] for v in before} >= {"null_passes", "leak"}
    references = json.loads((out / WORK / "references.json").read_text())
    assert 0 < references["tiny"] < 60  # the mutants' timeouts are cut from it
    assert any(v["kept"] is None and v["stage"] == "audit" for v in before)

    def graded() -> list[tuple[str, str]]:
        """(snippet, mutant) of every record: a mutant is one snippet's (two snippets can
        have equal mutant bodies)."""
        records = [json.loads(x) for x in mutants.read_text().splitlines() if x.strip()]
        return [(r["snippet_id"], r["key"]) for r in records]

    graded_before = set(graded())

    result = synthesize(load(root), _plan(), out, Local())
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    stages = [(v["id"], v["stage"]) for v in lines]
    assert len(stages) == len(set(stages)), "a candidate was checked again"
    assert result.decided_now == result.candidates - len(final_before)
    keys = graded()
    assert len(keys) == len(set(keys)), "a graded mutant was graded again"
    assert graded_before <= set(keys)

    _check_outcome(result.manifest, result.undecided, out)


def _check_outcome(m: synth_manifest.Manifest, undecided: list[str], out: Path) -> None:
    """Every stage's outcome: the kept snippets load as a pset with provenance and difficulty,
    and every dropped candidate has its reason in the manifest."""
    reasons = {d.reason for d in m.dropped}
    assert {"overlaps_published", "not_executed", "null_passes", "leak"} <= reasons, reasons
    few = [d for d in m.dropped if d.reason == "few_mutants"]
    assert few, reasons  # e.g. `count = 0`: a score of one mutant measures nothing
    assert all(d.reason and d.stage for d in m.dropped)
    assert m.snippets
    assert not undecided
    kept = load(out)
    assert {s.id for s in kept.snippets} == {s.id for s in m.snippets}
    for s in m.snippets:
        assert s.provenance.file == "stats.py"
        assert s.provenance.file_sha256
        assert s.difficulty.mutation_score >= 0.8
        assert s.difficulty.mutation_score_min >= 0.8
        assert 3 <= s.difficulty.mutants_graded <= s.difficulty.mutants <= 6
        assert not s.difficulty.null_passes
        assert s.weight == kept.paper("tiny").snippet(s.id.split("/", 1)[1]).weight
    assert set(m.test_set.snippets) == {"tiny/mean"}
    assert synth_manifest.test_set_mixed(kept) == []


def test_eval_refuses_a_training_set_beside_its_test_set(tmp_path: Path) -> None:
    """A synthesised pset's manifest names its test set; eval with both is refused unless
    --with-test-set (the by-paper split: the held-out paper is the test set)."""
    test_root = _source(tmp_path / "published")
    published = load(test_root)
    train = tmp_path / "train"
    write_pset(
        train,
        [
            write_paper(
                train,
                "other",
                {"paper2code_test.py": TEST, "stats.py": STATS, "paper2code_paper.tex": "x"},
            )
        ],
    )
    m = synth_manifest.Manifest(
        rcb_env_version="0",
        settings={},
        test_set=synth_manifest.TestSet(source=str(test_root), snippets={}, held_out=("tiny",)),
        papers=("other",),
        snippets=(),
        dropped=(),
    )
    (train / synth_manifest.MANIFEST).write_text(m.model_dump_json())
    from rcb_env.task.selection import combine

    both = combine([load(train), published])
    assert synth_manifest.test_set_mixed(both) == ["tiny/mean"]
    assert synth_manifest.test_set_mixed(load(train)) == []
    args = ["eval", "--pset", str(train), "--pset", str(test_root), "--agent", "null"]
    refused = CliRunner().invoke(cli, [*args, "--runs-dir", str(tmp_path / "runs")])
    assert refused.exit_code == 2, refused.output
    assert "test set" in refused.output
    assert "--with-test-set" in refused.output


def test_a_snippet_outside_the_annotated_files_is_written_and_loads(tmp_path: Path) -> None:
    """The rest of the repository is proposed from too: a region in a file the paper does not
    annotate is marked there, the file is listed among the paper's annotated files, and the
    written pset loads it with the official line weight; published markers are gone."""
    source = load(_source(tmp_path / "src"))
    paper = source.paper("tiny")
    everything = {f: set(range(1, 200)) for f in ("stats.py", "helpers.py")}
    regions, _ = proposals(paper, everything, Rules())
    outside = [r for r in regions if r.file == "helpers.py"]
    assert outside
    synth_run.write_pset(source, {"tiny": outside}, tmp_path / "out")
    written = load(tmp_path / "out").paper("tiny")
    assert written.meta.annotated_file_paths == ("stats.py", "helpers.py")
    assert {s.name for s in written.snippets} == {r.name for r in outside}
    assert all(s.weight == r.weight for s, r in zip(written.snippets, outside, strict=True))
    assert "paper2code" not in (tmp_path / "out" / "tiny" / "stats.py").read_text()


def test_the_by_paper_split_holds_papers_out(tmp_path: Path) -> None:
    """--holdout: a held-out paper is not synthesised from and its manifest names it as the
    test set; an unknown paper is refused before anything runs."""
    source = load(_source(tmp_path / "src"))
    plan = SynthPlan(sandbox=SandboxConfig(backend="local"), holdout=("tiny",))
    result = synthesize(source, plan, tmp_path / "train", Local())
    assert result.candidates == 0
    assert result.manifest.papers == ()
    assert result.manifest.test_set.held_out == ("tiny",)
    assert not (tmp_path / "train" / "tiny").exists()
    with pytest.raises(ConfigError, match="no paper named nope"):
        synthesize(source, plan.model_copy(update={"holdout": ("nope",)}), tmp_path / "x", Local())


def test_every_statement_of_a_list_is_a_candidate_nested_in_its_runs() -> None:
    """The ``statement`` rule: each whole statement of a list of several (a compound one with
    its header and body, one over several lines as one region), nested inside the runs and
    the body that hold it."""
    text = (
        "def f(xs):\n"
        "    total = 0\n"
        "    for x in xs:\n"
        "        total += x\n"
        "        total *= 2\n"
        "    out = [\n"
        "        total,\n"
        "    ]\n"
        "    return out\n"
    )
    regions, _ = propose("f.py", text, set(range(1, 10)), Published(), Rules())
    statements = {(r.start, r.end) for r in regions if r.rule == "statement"}
    assert {(2, 2), (3, 5), (6, 8), (9, 9), (4, 4), (5, 5)} <= statements
    assert {s.name for s in ann.parse_spans(mark(text, regions), "f.py")} == {
        r.name for r in regions
    }


def _cases(per_snippet: int) -> list[Case]:
    """Real mutants of two bundled snippets, ``per_snippet`` each."""
    paper = load(bundled_root()).papers[0]
    cases: list[Case] = []
    for s in paper.snippets[:2]:
        g = generate(s.reference_body, seed=f"0:{s.id}", cap=per_snippet)
        assert len(g.mutants) == per_snippet, s.id
        cases += [Case(paper, s, m) for m in g.mutants]
    return cases


def _result(case: Case, outcome: Outcome) -> GradeResult:
    return GradeResult(
        snippet_id=case.snippet.id,
        outcome=outcome,
        kind=FailureKind.NONE if outcome is Outcome.PASSED else FailureKind.TEST_FAILURE,
        official_pass=outcome is Outcome.PASSED,
    )


def test_mutants_stop_once_the_verdict_is_settled() -> None:
    """A snippet whose mutants are all killed is kept after ``ceil(threshold * made)`` of them,
    one whose mutants all survive is dropped once no more kills could lift it to the threshold,
    a mutant whose grading failed counts for nothing, and mutants an earlier run graded count
    first."""
    cases = _cases(5)
    strong, weak = cases[0].snippet.id, cases[5].snippet.id
    made = {strong: 5, weak: 5}
    graded: list[str] = []

    def grade_all(batch: Sequence[Case], done: Callable[[Case, GradeResult], None]) -> None:
        for c in batch:
            graded.append(c.snippet.id)
            done(c, _result(c, Outcome.FAILED if c.snippet.id == strong else Outcome.PASSED))

    heard: list[str] = []

    def hear(case: Case, result: GradeResult) -> None:
        del result
        heard.append(case.mutant.key)

    def ignore(case: Case, result: GradeResult) -> None:
        del case, result

    settled_rounds(grade_all, made, 0.8)(cases, hear)
    assert graded.count(strong) == 4  # 4 of 5 killed: at least 0.8 whatever the fifth does
    assert graded.count(weak) == 2  # 2 of 5 survived: at most 0.6
    assert len(heard) == 6
    assert mutant_timeout(0.4, 300.0, 10.0) == 30.0  # at least 30 s
    assert mutant_timeout(12.0, 300.0, 10.0) == 120.0
    assert mutant_timeout(60.0, 300.0, 10.0) == 300.0  # never past the paper's own
    assert settled(4, 0, 5, 0.8) is True
    assert settled(3, 1, 5, 0.8) is None
    assert settled(3, 2, 5, 0.8) is False
    assert settled(0, 0, 0, 0.8) is None

    graded.clear()
    settled_rounds(grade_all, made, 0.8, [(strong, "killed")] * 3 + [(weak, "excluded")])(
        cases[1:], ignore
    )
    assert graded.count(strong) == 1
    assert graded.count(weak) == 2

    flaky: list[str] = []

    def infra(batch: Sequence[Case], done: Callable[[Case, GradeResult], None]) -> None:
        for c in batch:
            flaky.append(c.mutant.key)
            done(c, _result(c, Outcome.INFRA_ERROR))

    settled_rounds(infra, made, 0.8)(cases, ignore)
    assert sorted(flaky) == sorted(c.mutant.key for c in cases)  # each tried once, none settled


def test_a_curriculum_chooses_a_synthesised_set_by_difficulty(tmp_path: Path) -> None:
    """``--subset level:...``, ``lines:LO:HI`` and ``mutation-score:LO:HI`` select a
    synthesised set's snippets by its manifest's difficulty records; on a set without one, or
    with a bad level, the selection is refused with what to do."""
    source = load(_source(tmp_path / "src"))
    paper = source.paper("tiny")
    regions, _ = proposals(paper, _everything(paper), Rules())
    regions = [r for r in regions if r.rule in ("statement", "function-body")][:4]
    out = tmp_path / "train"
    synth_run.write_pset(source, {"tiny": regions}, out)
    written = load(out).paper("tiny")
    levels: list[synth_manifest.Level] = ["easy", "hard", "medium", "easy"]
    snippets = tuple(
        synth_manifest.SynthSnippet(
            id=s.id,
            weight=s.weight,
            provenance=synth_manifest.Provenance(
                paper="tiny",
                file=r.file,
                start=r.start,
                end=r.end,
                source="src",
                commit=None,
                file_sha256="0" * 64,
                rule=r.rule,
                seed=0,
            ),
            difficulty=synth_manifest.Difficulty(
                lines=s.weight,
                distinct_lines=s.distinct_lines,
                depth=s.depth,
                children=0,
                null_passes=False,
                mutation_score=0.8 + 0.05 * i,
                survived=0,
                level=levels[i],
            ),
        )
        for i, (s, r) in enumerate(zip(written.snippets, regions, strict=True))
    )
    m = synth_manifest.Manifest(
        rcb_env_version="0",
        settings={},
        test_set=synth_manifest.TestSet(source="src", snippets={}),
        papers=("tiny",),
        snippets=snippets,
        dropped=(),
    )
    (out / synth_manifest.MANIFEST).write_text(m.model_dump_json())
    loaded = load(out)
    ids = [s.id for s in snippets]
    assert {s.id for s in narrow(loaded, "level:easy").snippets} == {ids[0], ids[3]}
    assert {s.id for s in narrow(loaded, "level:easy,medium").snippets} == {ids[0], ids[2], ids[3]}
    assert {s.id for s in narrow(loaded, "mutation-score:0.84:1").snippets} == set(ids[1:])
    one_line = {s.id for s in snippets if s.weight == 1}
    assert one_line
    assert {s.id for s in narrow(loaded, "lines:1:1").snippets} == one_line
    with pytest.raises(ConfigError, match="levels are easy, medium and hard"):
        narrow(loaded, "level:trivial")
    with pytest.raises(ConfigError, match="no pset of this selection has one"):
        narrow(source, "level:easy")
    # exports and trainer rows carry the record
    tiny = loaded.paper("tiny")
    first = tiny.snippets[0]
    record = synth_manifest.export_metadata(tiny, first.id)
    assert record["synth_rule"] == regions[0].rule
    assert record["synth_lines"] == f"{regions[0].start}-{regions[0].end}"
    assert synth_manifest.export_metadata(source.paper("tiny"), "tiny/mean") == {}
    write_task(tiny, first, tmp_path / "harbor" / "t", image="img", benchmark="train")
    meta = tomllib.loads((tmp_path / "harbor" / "t" / "task.toml").read_text())["metadata"]
    assert meta["synth_rule"] == regions[0].rule
    assert meta["synth_level"] == "easy"
    rows = {r["task_id"]: r for r in dataset_rows(str(out))}
    assert rows[first.id]["synth_level"] == "easy"
    assert rows[ids[1]]["synth_mutation_score"] == pytest.approx(0.85)
    args = ["eval", "--pset", str(out), "--subset", "level:x", "--agent", "null"]
    bad = CliRunner().invoke(cli, [*args, "--runs-dir", str(tmp_path / "runs")])
    assert bad.exit_code != 0
    assert "levels are easy, medium and hard" in bad.output + str(bad.exception)


def test_the_ceiling_counts_every_run_at_every_offset() -> None:
    """The census's ceiling (``Rules(windows=N)``): every run of 1 to N statements of a list
    at every offset, regions that cross (one pset could not hold them), still subject to the
    static drops; the rules propose a nested part of them."""
    text = "def f(xs):\n" + "".join(f"    v{i} = xs[{i}] * {i + 2}\n" for i in range(4))
    executed = set(range(1, 6))
    windows, _ = propose("f.py", text, executed, Published(), Rules(windows=3))
    assert sorted((r.start, r.end) for r in windows) == sorted(
        (a, a + n - 1) for n in (1, 2, 3) for a in range(2, 7 - n)
    )
    with pytest.raises(ValueError, match="cross"):
        mark(text, windows)
    nested, _ = propose("f.py", text, executed, Published(), Rules())
    assert {(r.start, r.end) for r in nested} <= {(r.start, r.end) for r in windows} | {(2, 5)}
    fenced = Published(ranges=((3, 3),))
    assert all(
        not r.overlaps(3, 3) for r in propose("f.py", text, executed, fenced, Rules(windows=3))[0]
    )
