"""Loading the published layout, and every way it can be malformed."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from rcb_env.errors import (
    DuplicateSnippetError,
    MetadataError,
    MissingTaskFileError,
    TaskLoadError,
)
from rcb_env.task import load
from rcb_env.task.loader import is_hidden, slugify
from rcb_env.task.selection import select_papers
from tests.conftest import MATH_CODE, math_files, write_paper, write_pset


def test_loads_the_published_layout(math_pset: Path) -> None:
    pset = load(math_pset)
    assert pset.failures == ()
    (paper,) = pset.papers
    assert paper.id == "maths"
    assert paper.paper_file == "paper2code_paper.tex"
    assert paper.meta.first_commit_date == dt.date(2025, 2, 1)
    assert [s.name for s in paper.snippets] == ["mean", "total", "variance"]
    mean = paper.snippet("mean")
    assert mean.id == "maths/mean"
    assert mean.children == ("total",)
    assert mean.weight == 4  # total=, for, total+=, return
    assert mean.distinct_lines == 1
    assert paper.snippet("total").parent == "mean"
    assert paper.snippet("total").depth == 1
    assert mean.file == "stats.py"
    assert mean.start_line == 5
    assert mean.end_line == 12
    assert mean.indent == "    "
    assert 'TODO: Implement block "mean"' in mean.masked_text
    assert "paper2code" not in mean.masked_text.replace("TODO", "")


def test_string_list_and_null_fields_md_paper_subfolder_and_extra_files(tmp_path: Path) -> None:
    files = {
        "paper2code_paper.md": "# A paper in Markdown\n",
        "paper2code_test.py": "import unittest\n",
        "src/pkg/model.py": MATH_CODE,
        "src/pkg/model_ref.py": "x = 1\n",
        "helpers.py": "def h(): pass\n",
        "data/table.parquet": "\x00binary-ish",
        "paper2code.yaml": "ignored: true\n",
    }
    entry = write_paper(
        tmp_path,
        "p1",
        files,
        annotated=["src/pkg/model.py"],
        context="helpers.py",
        meta={"arxiv_v1_date": dt.date(2024, 12, 31), "venue": 2025, "extra_field": "kept out"},
    )
    pset = load(write_pset(tmp_path, [entry]))
    assert pset.failures == ()
    paper = pset.papers[0]
    assert paper.paper_file == "paper2code_paper.md"
    assert paper.meta.annotated_file_paths == ("src/pkg/model.py",)
    assert paper.meta.context_file_paths == ("helpers.py",)
    assert paper.meta.arxiv_v1_date == dt.date(2024, 12, 31)
    assert paper.meta.venue == "2025"
    assert paper.snippets[0].file == "src/pkg/model.py"
    assert set(paper.hidden_paths) == {"paper2code_test.py", "src/pkg/model_ref.py"}


def test_hidden_paths_default_and_overlay(tmp_path: Path) -> None:
    files = math_files() | {
        "secret/answers.npy": "x",
        "rcb-env.yaml": "hidden_paths: ['secret']\ntimeout_s: 12\n",
        "__pycache__/stats_ref.cpython-311.pyc": "compiled",
    }
    pset = load(write_pset(tmp_path, [write_paper(tmp_path, "m", files)]))
    paper = pset.papers[0]
    assert paper.overlay.timeout_s == 12
    assert "secret/answers.npy" in paper.hidden_paths
    assert "stats_ref.py" in paper.hidden_paths
    assert "paper2code_test.py" in paper.hidden_paths
    assert "rcb-env.yaml" in paper.hidden_paths
    assert is_hidden("__pycache__/stats_ref.cpython-311.pyc", paper.hidden_patterns)
    assert is_hidden("deep/x/y_ref.py", paper.hidden_patterns)
    assert not is_hidden("stats.py", paper.hidden_patterns)


def test_pset_level_overlay_applies_per_paper(tmp_path: Path) -> None:
    write_pset(tmp_path, [write_paper(tmp_path, "m", math_files())])
    (tmp_path / "rcb-env.yaml").write_text("papers:\n  m:\n    known_issue: needs network\n")
    assert load(tmp_path).papers[0].overlay.known_issue == "needs network"


def _single_failure(root: Path) -> str:
    pset = load(root)
    assert len(pset.failures) == 1, pset.failures
    return pset.failures[0].message


def test_missing_test_file_is_reported_per_paper_and_others_still_load(tmp_path: Path) -> None:
    broken = math_files()
    del broken["paper2code_test.py"]
    write_pset(
        tmp_path,
        [write_paper(tmp_path, "broken", broken), write_paper(tmp_path, "good", math_files())],
    )
    pset = load(tmp_path)
    assert [p.id for p in pset.papers] == ["good"]
    (failure,) = pset.failures
    assert failure.paper == "broken"
    assert failure.error_type == "MissingTaskFileError"
    assert "broken/paper2code_test.py" in failure.message


def test_missing_annotated_and_context_files(tmp_path: Path) -> None:
    e1 = write_paper(tmp_path, "a", math_files(), annotated=["stats.py", "nope.py"])
    e2 = write_paper(tmp_path, "b", math_files(), context=["missing_ctx.py"])
    write_pset(tmp_path, [e1, e2])
    pset = load(tmp_path)
    messages = {f.paper: f.message for f in pset.failures}
    assert "annotated file 'nope.py'" in messages["a"]
    assert "a/nope.py" in messages["a"]
    assert "context file 'missing_ctx.py'" in messages["b"]


def test_missing_paper_folder_and_missing_paper_text(tmp_path: Path) -> None:
    files = math_files()
    del files["paper2code_paper.tex"]
    write_pset(
        tmp_path,
        [write_paper(tmp_path, "notext", files), {"id": "ghost", "annotated_file_paths": "x.py"}],
    )
    messages = {f.paper: f.message for f in load(tmp_path).failures}
    assert "no paper text" in messages["notext"]
    assert "paper folder 'ghost' does not exist" in messages["ghost"]
    assert "papers.yaml:" in messages["ghost"]  # names the entry's line


def test_malformed_marker_names_file_line_and_snippet(tmp_path: Path) -> None:
    bad = MATH_CODE.replace('    # </paper2code name="total">\n', "")
    write_pset(tmp_path, [write_paper(tmp_path, "m", math_files(code=bad))])
    message = _single_failure(tmp_path)
    assert "m/stats.py:11" in message
    assert 'snippet "mean"' in message
    assert "crosses" in message


def test_duplicate_names_across_files_of_one_paper(tmp_path: Path) -> None:
    files = math_files() | {"other.py": MATH_CODE}
    write_pset(tmp_path, [write_paper(tmp_path, "m", files, annotated=["stats.py", "other.py"])])
    pset = load(tmp_path)
    assert pset.failures[0].error_type == DuplicateSnippetError.__name__
    assert "other.py:5" in pset.failures[0].message


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "papers.yaml").write_text("- id: a\n  title: [unclosed\n- id: b\n")
    with pytest.raises(MetadataError) as info:
        load(tmp_path)
    assert info.value.file is not None
    assert info.value.file.endswith("papers.yaml")
    assert info.value.line is not None
    assert "malformed YAML" in str(info.value)


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"id": "m", "annotated_file_paths": 3}, "must be a string, a list of strings or null"),
        (
            {"id": "m", "annotated_file_paths": "stats.py", "first_commit_date": "soon"},
            "first_commit_date",
        ),
        ({"title": "no id"}, "needs an 'id'"),
        ({"id": "m", "annotated_file_paths": "../escape.py"}, "must stay inside the paper folder"),
        ({"id": "m"}, "lists no annotated_file_paths"),
    ],
)
def test_invalid_entries_are_metadata_errors(
    tmp_path: Path, entry: dict[str, object], words: str
) -> None:
    write_paper(tmp_path, "m", math_files())
    (tmp_path / "papers.yaml").write_text(_dump([entry]))
    message = _single_failure(tmp_path)
    assert words in message
    assert "papers.yaml:1" in message


def test_papers_yaml_is_authoritative_and_folders_not_listed_are_ignored(tmp_path: Path) -> None:
    write_paper(tmp_path, "unlisted", math_files())
    write_pset(tmp_path, [write_paper(tmp_path, "listed", math_files())])
    assert [p.id for p in load(tmp_path).papers] == ["listed"]


def test_lone_paper_folder_without_metadata_scans_for_markers(tmp_path: Path) -> None:
    folder = tmp_path / "solo"
    folder.mkdir()
    for rel, text in math_files().items():
        (folder / rel).write_text(text)
    pset = load(folder)
    assert [s.name for s in pset.papers[0].snippets] == ["mean", "total", "variance"]
    assert pset.papers[0].meta.annotated_file_paths == ("stats.py",)


def test_lone_paper_folder_uses_parent_papers_yaml(math_pset: Path) -> None:
    pset = load(math_pset / "maths")
    assert pset.papers[0].meta.title == "Paper maths"


def test_neither_pset_nor_paper_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MissingTaskFileError, match="neither a pset"):
        load(tmp_path)


def test_unknown_paper_filter_is_reported(math_pset: Path) -> None:
    pset = load(math_pset, papers={"maths", "nope"})
    assert [p.id for p in pset.papers] == ["maths"]
    assert [f.paper for f in pset.failures] == ["nope"]


def test_every_load_failure_is_a_task_load_error_naming_its_file_and_line(tmp_path: Path) -> None:
    """Each kind of broken paper, loaded beside a good one: the good one loads; each failure is
    recorded as a TaskLoadError subclass whose message names the file (and the line, where the
    problem has one)."""
    from rcb_env import errors

    crossed = MATH_CODE.replace('    # </paper2code name="total">\n', "")
    no_test = math_files()
    del no_test["paper2code_test.py"]
    entries = [
        write_paper(tmp_path, "crossed", math_files(code=crossed)),
        write_paper(
            tmp_path,
            "duplicate",
            math_files() | {"other.py": MATH_CODE},
            annotated=["stats.py", "other.py"],
        ),
        write_paper(tmp_path, "notest", no_test),
        {"id": "ghost", "annotated_file_paths": "x.py"},
        write_paper(tmp_path, "good", math_files()),
    ]
    write_pset(tmp_path, entries)
    pset = load(tmp_path)
    assert [p.id for p in pset.papers] == ["good"]
    found = {f.paper: f for f in pset.failures}
    assert set(found) == {"crossed", "duplicate", "notest", "ghost"}
    expected = {
        "crossed": ("AnnotationError", "crossed/stats.py:11"),
        "duplicate": (DuplicateSnippetError.__name__, "duplicate/other.py:5"),
        "notest": (MissingTaskFileError.__name__, "notest/paper2code_test.py"),
        "ghost": (MissingTaskFileError.__name__, "papers.yaml:"),
    }
    for paper, (kind, where) in expected.items():
        failure = found[paper]
        cls = getattr(errors, failure.error_type)
        assert issubclass(cls, TaskLoadError), failure.error_type
        assert failure.error_type == kind, failure
        assert where in failure.message, failure.message


def test_slugs_are_gymnasium_safe_and_unique(tmp_path: Path) -> None:
    code = (
        'def f():\n    # <paper2code name="a b">\n    x = 1\n    # </paper2code name="a b">\n'
        '    # <paper2code name="a/b">\n    y = 1\n    # </paper2code name="a/b">\n'
        '    # <paper2code name="scale (eq. 3)">\n    z = 1\n'
        '    # </paper2code name="scale (eq. 3)">\n'
    )
    write_pset(tmp_path, [write_paper(tmp_path, "v1.2 paper", math_files(code=code))])
    paper = load(tmp_path).papers[0]
    slugs = [s.slug for s in paper.snippets]
    assert len(set(slugs)) == 3
    assert slugs[2] == "scale_eq_3"
    assert all(s.startswith("a_b_") for s in slugs[:2])
    assert paper.slug == "v1_2_paper"
    assert slugify("...") == "x"


def test_date_filter_uses_the_chosen_field(tmp_path: Path) -> None:
    entries = [
        write_paper(tmp_path, "old", math_files(), meta={"first_commit_date": "2024-06-01"}),
        write_paper(tmp_path, "new", math_files(), meta={"first_commit_date": "2025-03"}),
        write_paper(tmp_path, "undated", math_files(), meta={"first_commit_date": None}),
    ]
    pset = load(write_pset(tmp_path, entries))
    assert pset.paper("new").meta.first_commit_date == dt.date(2025, 3, 1)
    after = select_papers(pset, after=dt.date(2025, 1, 1))
    assert [p.id for p in after.papers] == ["new"]
    before = select_papers(pset, before=dt.date(2025, 1, 1))
    assert [p.id for p in before.papers] == ["old"]
    assert len(select_papers(pset).papers) == 3


def test_crlf_annotated_file_keeps_its_bytes(tmp_path: Path) -> None:
    files = math_files(code=MATH_CODE.replace("\n", "\r\n"))
    write_pset(tmp_path, [write_paper(tmp_path, "m", files)])
    paper = load(tmp_path).papers[0]
    assert paper.annotated_files[0].text == MATH_CODE.replace("\n", "\r\n")
    assert paper.snippet("mean").weight == 4


def test_an_unbuildable_yaml_value_is_a_metadata_error_with_its_line(tmp_path: Path) -> None:
    write_paper(tmp_path, "m", math_files())
    (tmp_path / "papers.yaml").write_text(
        "- id: m\n  annotated_file_paths: stats.py\n  first_commit_date: 2025-13-45\n"
    )
    with pytest.raises(MetadataError) as info:
        load(tmp_path)
    assert info.value.line == 3
    assert "month must be in 1..12" in str(info.value)


def test_hidden_patterns_follow_gitignore_rules() -> None:
    patterns = ("data/*.bin", "**/answers.npy", "secret", "/top_only.py")
    assert is_hidden("data/x.bin", patterns)
    assert not is_hidden("data/sub/x.bin", patterns)  # `*` stays within one folder
    assert is_hidden("a/b/answers.npy", patterns)
    assert is_hidden("deep/secret/inner.py", patterns)  # a hidden folder hides its contents
    assert is_hidden("top_only.py", patterns)
    assert not is_hidden("pkg/top_only.py", patterns)  # a leading / anchors at the paper folder


def _dump(data: Any) -> str:
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(data, out)
    return out.getvalue()
