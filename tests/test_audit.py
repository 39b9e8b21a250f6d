"""The leak audit finds a planted answer, and nothing in the bundled tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rcb_env.cli import cli
from rcb_env.task import load
from rcb_env.validation.audit import needles
from tests.conftest import MATH_CODE, math_files, write_paper, write_pset

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

LONG = MATH_CODE.replace(
    "    return sum((x - m) ** 2 for x in xs) / len(xs)\n",
    "    squared_deviations = [(x - m) ** 2 for x in xs]\n"
    "    return sum(squared_deviations) / len(xs)\n",
)


def test_needles_are_distinctive_answer_lines_only(tmp_path: Path) -> None:
    write_pset(tmp_path, [write_paper(tmp_path, "m", math_files(code=LONG))])
    s = load(tmp_path).papers[0].snippet("variance")
    assert sorted(needles(s).values()) == [
        "return sum(squared_deviations) / len(xs)",
        "squared_deviations = [(x - m) ** 2 for x in xs]",
    ]


def test_a_seeded_leak_is_found_and_hidden_folders_are_not_copied(
    tmp_path: Path, require_bwrap: None
) -> None:
    files = math_files(code=LONG) | {
        "notes/scratch.txt": "draft:\n    squared_deviations = [(x - m) ** 2 for x in xs]\n",
        ".git/objects/ab/cdef": "return sum(squared_deviations) / len(xs)\n",
    }
    root = write_pset(tmp_path / "pset", [write_paper(tmp_path / "pset", "leaky", files)])
    report = tmp_path / "findings.json"
    result = CliRunner().invoke(cli, ["audit", "--pset", str(root), "--json", str(report)])
    assert result.exit_code == 1, result.output
    found = json.loads(report.read_text())
    assert {(f["snippet_id"], f["path"]) for f in found} == {
        ("leaky/variance", "./notes/scratch.txt")
    }
    assert "leak" in result.output


def test_bundled_tasks_have_no_leaks(require_bwrap: None) -> None:
    result = CliRunner().invoke(cli, ["audit"])
    assert result.exit_code == 0, result.output
    assert "0 findings over 29 snippets" in result.output
