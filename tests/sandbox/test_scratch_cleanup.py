"""Host-side clean-up that a run can break, for good (issue): a tree a run or an agent left must
never make the host's removal, walk or ownership change raise, recurse, follow a link, block or
run unbounded. Before the fix, a folder chain deeper than the recursion limit made
``shutil.rmtree`` raise ``RecursionError`` (which ``ignore_errors`` does not cover): ``eval``
died without a record, the copy stayed in the scratch folder, and every later
``SandboxFactory()`` died in its sweep of it.

Real file systems, no mocks: the trees are made the way sandboxed code would make them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rcb_env.sandbox import SandboxConfig, SandboxFactory, scratch
from rcb_env.sandbox import workspace as ws
from rcb_env.sandbox._remove import Budget, remove_tree

#: Well past the recursion limit: the depth at which shutil.rmtree, os.walk and os.fwalk fail.
DEPTH = sys.getrecursionlimit() * 3
SECRET = "host file\n"


def chain(root: Path, levels: int, at_bottom: Callable[[int], None] | None = None) -> None:
    """``levels`` nested folders ``d/d/d/...`` below ``root``, made relative to a descriptor as
    sandboxed code would (their path is far longer than PATH_MAX); ``at_bottom`` gets the
    deepest folder's descriptor."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        if at_bottom is not None:
            at_bottom(fd)
    finally:
        os.close(fd)


def hostile(root: Path, outside: Path, *, wide: int = 5000) -> None:
    """What a run can leave in its folder: a chain :data:`DEPTH` deep holding a link to a host
    folder, a FIFO and a folder without any permission; folders without write or search
    permission; a link out and a FIFO at the top; many entries in one folder."""

    def bottom(fd: int) -> None:
        os.symlink(str(outside), "link-out", dir_fd=fd)
        os.mkfifo("fifo", dir_fd=fd)
        os.mkdir("locked", dir_fd=fd)
        inner = os.open("locked", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        try:
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=inner))
            os.fchmod(inner, 0)
        finally:
            os.close(inner)

    chain(root, DEPTH, bottom)
    for name, mode in {"no-write": 0o500, "no-search": 0o600, "none": 0}.items():
        folder = root / name
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f").write_text("x")
        (folder / "sub").chmod(mode)
        folder.chmod(mode)
    (root / "link-out").symlink_to(outside)
    (root / "file-link").symlink_to(outside / "secret")
    os.mkfifo(root / "fifo")
    many = root / "many"
    many.mkdir()
    for i in range(wide):
        (many / f"f{i}").touch()
    for i in range(wide // 10):
        (many / f"dir{i}" / "x").mkdir(parents=True)


@pytest.fixture
def shm(tmp_path: Path) -> Iterator[Path]:
    """A folder on tmpfs, where the scratch folder is (deep trees are quick to make there)."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="rcb-test-cleanup-", dir="/dev/shm"))
    try:
        yield folder
    finally:
        remove_tree(folder)


@pytest.fixture
def outside(shm: Path) -> Path:
    """A folder of the host that links in the trees point to: it must survive."""
    host = shm / "host"
    host.mkdir()
    (host / "secret").write_text(SECRET)
    return host


def assert_untouched(host: Path) -> None:
    assert sorted(os.listdir(host)) == ["secret"]
    assert (host / "secret").read_text() == SECRET
    assert stat.S_IMODE(host.stat().st_mode) == 0o755


@pytest.fixture
def parent(shm: Path) -> Path:
    folder = shm / "scratch"
    folder.mkdir()
    return folder


def _dead_pid() -> int:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(child.stdout)


def _age(path: Path, seconds: float = 7200) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


# discard --------------------------------------------------------------------------------------


def test_discard_removes_a_tree_deeper_than_the_recursion_limit(
    parent: Path, outside: Path
) -> None:
    folder = scratch.make("rcb-grade-", parent)
    hostile(folder, outside)
    left = scratch.discard(folder)
    assert os.listdir(parent) == []
    assert left == []
    assert_untouched(outside)


def test_discard_of_a_link_removes_the_link_only(parent: Path, outside: Path) -> None:
    """A scratch folder swapped for a link to a host folder: the link goes, not the folder."""
    link = parent / "rcb-grade-swapped"
    link.symlink_to(outside)
    left = scratch.discard(link)
    assert os.listdir(parent) == []
    assert left == []
    assert_untouched(outside)


def test_its_owner_removes_folders_whose_permissions_a_run_took_away() -> None:
    """Without root (the ``local`` backend, or rcb-env run as a user), folders the run made
    unwritable or unsearchable are given their permissions back and removed. Run as root, the
    test makes and removes the tree as ``nobody`` (its effective ids only, for the while)."""
    base = Path(tempfile.mkdtemp(prefix="rcb-test-perm-", dir="/dev/shm"))
    base.chmod(0o777)
    try:
        with _as_nobody():
            folder = scratch.make("rcb-grade-", base)
            for name, mode in {"no-write": 0o500, "no-search": 0o600, "none": 0}.items():
                (folder / name / "sub").mkdir(parents=True)
                (folder / name / "sub" / "f").write_text("x")
                (folder / name / "sub").chmod(mode)
                (folder / name).chmod(mode)
            (folder / "file").write_text("x")
            folder.chmod(0o500)
            assert os.stat(folder).st_uid == os.geteuid()
            left = scratch.discard(folder)
            assert os.listdir(base) == []
            assert left == []
    finally:
        remove_tree(base)


@contextlib.contextmanager
def _as_nobody() -> Iterator[None]:
    """Root: effective ids of ``nobody`` inside (the real ones stay root, to come back)."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def test_an_entry_that_cannot_be_removed_is_reported_not_raised(
    parent: Path, outside: Path
) -> None:
    """An immutable file (root only; not every file system has the attribute): the rest goes,
    the call returns what stayed, and the folder waits in the trash for a later sweep."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("needs root and chattr")
    folder = scratch.make("rcb-grade-", parent)
    hostile(folder, outside, wide=100)
    stuck = folder / "many" / "stuck"
    stuck.write_text("x")
    if subprocess.run(["chattr", "+i", str(stuck)], check=False, capture_output=True).returncode:
        pytest.skip("this file system has no immutable attribute")
    try:
        left = scratch.discard(folder)
        assert len(left) == 1, left
        assert "stuck" in left[0], left
        (trash,) = os.listdir(parent)
        assert trash.startswith(scratch.TRASH)
        moved = [p for p in (parent / trash).rglob("stuck")]
        assert len(moved) == 1  # everything else is gone
        assert sum(1 for _ in (parent / trash).rglob("*")) == 2
    finally:
        for found in parent.rglob("stuck"):
            subprocess.run(["chattr", "-i", str(found)], check=True)
    _age(parent / trash)
    assert scratch.sweep(parent) == 1
    assert os.listdir(parent) == []
    assert_untouched(outside)


def test_a_removal_out_of_budget_leaves_the_rest_for_the_next_sweep(
    parent: Path, outside: Path
) -> None:
    trash = parent / f"{scratch.TRASH}rcb-grade-big"
    trash.mkdir()
    hostile(trash, outside, wide=2000)
    started = time.monotonic()
    left = remove_tree(trash, budget=Budget(entries=500))
    assert time.monotonic() - started < 30
    assert len(left) == 1, left
    assert "budget ran out" in left[0], left
    assert trash.is_dir()
    _age(trash)
    assert scratch.sweep(parent) == 1
    assert os.listdir(parent) == []
    assert_untouched(outside)


# sweep, at every SandboxFactory() ---------------------------------------------------------------


def test_a_factory_starts_over_what_killed_runs_left(parent: Path, outside: Path) -> None:
    """Trash, a grading copy of a dead process, an unowned old folder, each as hostile as a run
    can make it, and an owner file forged by the run: the factory's sweep copes with all of it
    and removes what is no longer anybody's."""
    host = os.uname().nodename
    trash = parent / f"{scratch.TRASH}rcb-grade-killed"
    trash.mkdir()
    dead = scratch.make("rcb-grade-", parent)
    (dead / scratch.OWNER_FILE).write_text(f"{host} {_dead_pid()} 12345.00")
    unowned = parent / "rcb-bwrap-unowned"
    unowned.mkdir()
    for folder in (trash, dead, unowned):
        hostile(folder, outside, wide=500)
        _age(folder)
    forged = scratch.make("rcb-grade-", parent)
    (forged / scratch.OWNER_FILE).write_text(f"{host} \u00b2 1")  # "²".isdigit(), int() raises
    factory = SandboxFactory(SandboxConfig(backend="local"), scratch=parent)
    try:
        left = set(os.listdir(parent))
        assert not left & {trash.name, dead.name, unowned.name}, left
        assert forged.name in left  # not ours to judge: kept
    finally:
        factory.close()
    assert_untouched(outside)


def test_a_sweep_never_raises(parent: Path, outside: Path) -> None:
    """Whatever is in the scratch folder: links named like scratch folders, FIFOs, owner files
    that are folders, forged or huge, a folder the sweep cannot read."""
    (parent / "rcb-grade-link").symlink_to(outside)
    (parent / f"{scratch.TRASH}link").symlink_to(outside)
    os.mkfifo(parent / "rcb-grade-fifo")
    for text in ("\u00b2", "9" * 4000, "-1", "0", "x y z w"):
        folder = scratch.make("rcb-grade-", parent)
        (folder / scratch.OWNER_FILE).write_text(f"{os.uname().nodename} {text} 1")
    folder = scratch.make("rcb-grade-", parent)
    (folder / scratch.OWNER_FILE).unlink()
    (folder / scratch.OWNER_FILE).mkdir()
    hostile(folder, outside, wide=10)
    _age(folder)
    scratch.sweep(parent)
    assert not folder.exists()
    assert (parent / "rcb-grade-link").is_symlink()
    assert_untouched(outside)


# the workspace ----------------------------------------------------------------------------------


def test_a_reset_empties_a_workspace_the_agent_made_hostile(shm: Path, outside: Path) -> None:
    template, workspace = shm / "template", shm / "workspace"
    (template / "pkg").mkdir(parents=True)
    (template / "pkg" / "a.py").write_text("x = 1\n")
    (template / ".rcb-template-complete").touch()
    ws.copy_template(template, workspace)
    hostile(workspace, outside, wide=500)
    ws.copy_template(template, workspace)
    assert sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*")) == [
        "pkg",
        "pkg/a.py",
    ]
    assert ws.changed_files(template, workspace) == []
    assert_untouched(outside)


@pytest.fixture
def small_walks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Walks of the workspace bounded at 300 entries (the real bound is 200,000), diffs at 50
    files (2,000)."""
    monkeypatch.setattr(ws, "_MAX_ENTRIES", 300)
    monkeypatch.setattr(ws, "_MAX_DIFF_FILES", 50)
    return 300


def test_walks_of_an_absurd_workspace_are_bounded(shm: Path, small_walks: int) -> None:
    """Too many entries: the agent's tools say so; the patch and the changed files (made at
    submit, where an error would end the episode) cover what was walked and say so."""
    template, workspace = shm / "template", shm / "workspace"
    template.mkdir()
    (template / "a.py").write_text("x = 1\n")
    ws.copy_template(template, workspace)
    (workspace / "a.py").write_text("x = 2\n")
    for i in range(small_walks * 2):
        (workspace / f"junk{i:04}.txt").write_text("needle\n")
    with pytest.raises(ws.WorkspacePathError, match=r"too large to walk \(more than 300 entries"):
        ws.list_tree(workspace, ".")
    with pytest.raises(ws.WorkspacePathError, match="too large to walk"):
        ws.search(workspace, "nothing-matches-this")
    changed = ws.changed_files(template, workspace)
    assert "a.py" in changed  # looked up by name even if the walk did not reach it
    assert 250 < len(changed) <= small_walks + 1  # the junk the walk took, no more
    diff = ws.unified_diff(template, workspace)
    assert "not compared in full (more than 300 entries" in diff
    assert "+x = 2" in diff  # the template's own files first
    assert f"{len(changed) - 50} more changed files not diffed" in diff


def test_walks_hold_a_bounded_length_of_paths(shm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names of 255 bytes, deep down: a walk stops at what its callers would hold of them."""
    monkeypatch.setattr(ws, "_MAX_PATH_CHARS", 100_000)
    workspace = shm / "workspace"
    folder = workspace / ("n" * 255) / ("n" * 255)
    folder.mkdir(parents=True)
    for i in range(1000):
        (folder / f"{i:04}{'x' * 250}").touch()
    with pytest.raises(ws.WorkspacePathError, match="paths of more than 100000 characters"):
        ws.search(workspace, "x")


def test_walks_of_a_workspace_deeper_than_their_bound_say_so(shm: Path) -> None:
    template, workspace = shm / "template", shm / "workspace"
    template.mkdir()
    (template / "a.py").write_text("x = 1\n")
    ws.copy_template(template, workspace)
    chain(workspace, DEPTH)
    with pytest.raises(ws.WorkspacePathError, match="nested more than 256 deep"):
        ws.list_tree(workspace, "d")
    assert ws.changed_files(template, workspace) == []  # only folders: nothing changed
    assert "nested more than 256 deep" in ws.unified_diff(template, workspace)
    ws.copy_template(template, workspace)
    assert os.listdir(workspace) == ["a.py"]


# ownership ----------------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_giving_a_hostile_tree_to_the_sandbox_user_is_iterative(shm: Path, outside: Path) -> None:
    """A workspace's control folder is the agent's: chown_tree walks any depth, follows no
    link, and holds one folder open at a time."""
    from rcb_env.sandbox.base import chown_tree

    tree = shm / "control"
    tree.mkdir()
    hostile(tree, outside, wide=50)
    chown_tree(tree, 4321, 4321)
    depth = 0
    for fd in _down(tree):
        assert os.fstat(fd).st_uid == 4321
        depth += 1
    assert depth == DEPTH + 1
    assert os.lstat(tree / "link-out").st_uid == 4321
    assert outside.stat().st_uid == 0
    assert (outside / "secret").stat().st_uid == 0
    assert_untouched(outside)
    assert remove_tree(tree) == []


def _down(top: Path) -> Iterator[int]:
    """Descriptors of ``top`` and each folder of its ``d/d/...`` chain, one open at a time."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            yield fd
            try:
                inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


# end to end: a graded body that leaves such a chain in its grading copy --------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", ["cold", "warm"])
def test_a_body_that_leaves_a_deep_chain_is_graded_and_cleaned_up(
    path: str, require_bwrap: None
) -> None:
    """Graded in bwrap: the candidate's failure (not an infrastructure error, no exception),
    the grading copy gone from the scratch folder, and a factory starts there afterwards."""
    from rcb_env import config
    from rcb_env.grading import FailureKind, Grader, GradingConfig, Outcome
    from rcb_env.task import bundled_root, load

    paper = load(bundled_root()).paper("adamw-warmup")
    snippet = paper.snippet("bias correction")
    body = (
        "        import os\n"
        "        for _ in range(3000):\n"
        "            os.mkdir('d'); os.chdir('d')\n"
        "        m_hat = v_hat = self.m\n"
    )
    parent = Path(tempfile.mkdtemp(prefix="rcb-test-scratch-", dir="/dev/shm"))
    parent.chmod(0o755)  # the sandbox user must reach the copies
    try:
        factory = SandboxFactory(
            SandboxConfig(
                backend="bwrap", python=config.task_python(), warm_grading=path == "warm"
            ),
            scratch=parent,
        )
        try:
            grader = Grader(
                GradingConfig(timeout_s=120),
                executor=factory.grading_executor(paper),
                scratch=parent,
            )
            result = grader.grade(paper, snippet, body)
            assert result.outcome is Outcome.FAILED, (result.kind, result.detail)
            assert result.kind is FailureKind.TEST_FAILURE, result.detail
            assert result.grading_path == path
            copies = [
                p for p in parent.rglob("*") if p.name.startswith(("rcb-grade-", "rcb-trash-"))
            ]
            assert copies == []
            # And a new factory starts in that scratch folder.
            SandboxFactory(SandboxConfig(backend="local"), scratch=parent).close()
        finally:
            factory.close()
        assert os.listdir(parent) == []
    finally:
        remove_tree(parent)
