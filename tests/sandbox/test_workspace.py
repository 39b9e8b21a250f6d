"""The agent's workspace: masked template, confinement of paths, extraction of the body."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rcb_env.sandbox.workspace import (
    WorkspacePathError,
    build_template,
    extract_body,
    read_text,
    resolve,
    unified_diff,
)
from rcb_env.task import bundled_root, load
from rcb_env.task.loader import walk_files
from tests.conftest import math_files, write_paper, write_pset


def test_template_has_masked_file_and_no_hidden_paths(tmp_path: Path) -> None:
    files = math_files() | {
        "rcb-env.yaml": "hidden_paths: ['secret/*']\n",
        "secret/answer.txt": "42",
        "__pycache__/stats_ref.cpython-311.pyc": "x",
        "data/ok.csv": "1,2\n",
    }
    write_pset(tmp_path / "p", [write_paper(tmp_path / "p", "m", files)])
    paper = load(tmp_path / "p").papers[0]
    snippet = paper.snippet("variance")
    t = build_template(paper, snippet, tmp_path / "t")
    present = set(walk_files(t)) - {".rcb-template-complete"}
    assert present == {"paper2code_paper.tex", "stats.py", "data/ok.csv"}
    assert (t / "stats.py").read_text() == snippet.masked_text
    assert "paper2code" not in (t / "stats.py").read_text()


def test_bundled_templates_never_contain_references_or_tests(tmp_path: Path) -> None:
    """Every snippet's workspace: no test file, no reference copy, no declared hidden path, and
    none of the answer's distinctive lines (those not already in the masked file) in any file
    of any kind."""
    import os

    from rcb_env.task.loader import is_hidden

    pset = load(bundled_root())
    checked = 0
    for paper in pset.papers:
        for s in paper.snippets:
            t = build_template(paper, s, tmp_path / paper.slug / s.slug)
            names = set(walk_files(t))
            every = {
                os.path.relpath(os.path.join(d, f), t)
                for d, _dirs, files in os.walk(t)
                for f in files
            }
            assert names <= every
            assert not any(n.endswith("_ref.py") or n == "paper2code_test.py" for n in every)
            assert not any(is_hidden(n, paper.hidden_patterns) for n in every), paper.id
            assert not set(paper.hidden_paths) & every
            text = "".join((t / n).read_text(errors="replace") for n in sorted(every))
            masked = s.masked_text
            answer = [
                line.strip()
                for line in s.reference_body.splitlines()
                if len(line.strip()) >= 12 and line.strip() not in masked
            ]
            leaked = [line for line in answer if line in text]
            assert leaked == [], (s.id, leaked)
            checked += bool(answer)
    assert checked >= 20  # most snippets have distinctive lines to look for


def test_paths_are_confined_to_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x")
    (tmp_path / "outside_ref.py").write_text("secret")
    (root / "link").symlink_to(tmp_path / "outside_ref.py")
    (root / "dirlink").symlink_to(tmp_path)
    assert resolve(root, "a.py") == root / "a.py"
    assert resolve(root, "/workspace/a.py") == root / "a.py"
    for bad in (
        "../outside_ref.py",
        str(tmp_path / "outside_ref.py"),
        "link",
        "dirlink/outside_ref.py",
        "/etc/passwd",
        "/proc/self/cwd/../outside_ref.py",
    ):
        with pytest.raises(WorkspacePathError):
            read_text(root, bad)


def test_extract_body_from_an_edited_file(tmp_path: Path) -> None:
    write_pset(tmp_path, [write_paper(tmp_path, "m", math_files())])
    paper = load(tmp_path).papers[0]
    s = paper.snippet("variance")
    todo = s.todo_body()
    body = "    m = mean(xs)\n    return sum((x - m) ** 2 for x in xs) / len(xs)\n"
    edited = s.masked_text.replace(todo, body)
    assert extract_body(paper, s, edited) == (body, False)
    # unchanged: the body is the TODO comments themselves
    assert extract_body(paper, s, s.masked_text) == (todo, False)
    # an edit elsewhere in the file is reported and left out of the body
    elsewhere = edited.replace('"""Tiny maths library."""', '"""Changed docstring."""')
    got, outside = extract_body(paper, s, elsewhere)
    assert (got, outside) == (body, True)
    # lines added after the block, before the unchanged suffix, belong to the body
    extra = s.masked_text.replace(todo, body + "    # done\n")
    assert extract_body(paper, s, extra) == (body + "    # done\n", False)


def test_unified_diff_lists_changes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f.py").write_text("x = 1\n")
    (b / "f.py").write_text("x = 2\n")
    (b / "new.py").write_text("y\n")
    diff = unified_diff(a, b)
    assert "--- a/f.py" in diff
    assert "+x = 2" in diff
    assert "+++ b/new.py" in diff


def test_sweep_removes_folders_of_dead_owners_only(tmp_path: Path) -> None:
    import subprocess
    import sys

    from rcb_env.sandbox import scratch

    mine = scratch.make("rcb-grade-", tmp_path)
    dead = scratch.make("rcb-bwrap-", tmp_path)
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    host, _pid, _ticks = (dead / scratch.OWNER_FILE).read_text().split()
    (dead / scratch.OWNER_FILE).write_text(f"{host} {child.stdout.strip()} 12345")
    unowned = tmp_path / "rcb-grade-unowned"
    unowned.mkdir()  # killed before it got an owner: removed only once old
    other = tmp_path / "someone-elses"
    other.mkdir()
    assert scratch.sweep(tmp_path) == 1
    assert mine.exists()
    assert not dead.exists()
    assert unowned.exists()
    old = time.time() - 7200
    os.utime(unowned, (old, old))
    assert scratch.sweep(tmp_path) == 1
    assert not unowned.exists()
    assert other.exists()
