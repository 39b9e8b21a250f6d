"""Host-side reads and writes in folders sandboxed code can write (the workspace, the shell's
control folder, leftover scratch folders): no symbolic link is followed, no FIFO is opened (it
would block the host), nothing is read without a size cap. No sandbox needed: the functions run
on tmp trees, and the shell session is a plain ``bash`` on the host, as the ``local`` backend's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

import rcb_env
from rcb_env.sandbox import scratch
from rcb_env.sandbox.session import ShellSession
from rcb_env.sandbox.workspace import (
    WorkspacePathError,
    changed_files,
    list_tree,
    read_text,
    search,
    unified_diff,
    write_text,
)

T = TypeVar("T")

SECRET = "TOP-SECRET host file\n"


def promptly(fn: Callable[[], T], *fifos: Path, within_s: float = 5.0) -> T:
    """``fn()``, which must return (or raise) within ``within_s``. If it blocks (on a FIFO),
    the FIFOs are opened from here so that it can end, and the test fails."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(within_s)
    if thread.is_alive():
        for fifo in fifos:  # a reader and a writer at once: whoever waits on it goes on
            fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
            os.close(fd)
        thread.join(5)
        pytest.fail(f"blocked for more than {within_s} s (on a FIFO?)")
    if error:
        raise error[0]
    return result[0]


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(template, workspace, a host folder outside both holding ``secret.txt``)."""
    template, workspace, outside = tmp_path / "t", tmp_path / "ws", tmp_path / "host"
    for folder in (template, workspace, outside):
        folder.mkdir()
    for rel, text in {"a.py": "x = 1\n", "b.py": "x = 2\n", "pkg/c.py": "x = 3\n"}.items():
        for root in (template, workspace):
            (root / rel).parent.mkdir(exist_ok=True)
            (root / rel).write_text(text)
    (outside / "secret.txt").write_text(SECRET)
    return template, workspace, outside


# workspace: FIFOs -----------------------------------------------------------------------------


def test_a_fifo_in_the_workspace_blocks_no_file_tool(trees: tuple[Path, Path, Path]) -> None:
    template, ws, _ = trees
    fifo = ws / "a.py"
    fifo.unlink()
    os.mkfifo(fifo)

    with pytest.raises(WorkspacePathError, match="FIFO"):
        promptly(lambda: read_text(ws, "a.py"), fifo)
    hits = promptly(lambda: search(ws, "x = "), fifo)
    assert [f for f, _, _ in hits] == ["b.py", "pkg/c.py"]
    assert promptly(lambda: search(ws, "x", "a.py"), fifo) == []
    assert promptly(lambda: changed_files(template, ws), fifo) == ["a.py"]
    diff = promptly(lambda: unified_diff(template, ws), fifo)
    assert "b/a.py" in diff
    assert "FIFO" in diff
    with pytest.raises(WorkspacePathError, match="FIFO"):
        promptly(lambda: write_text(ws, "a.py", "y = 1\n"), fifo)
    assert fifo.is_fifo()
    # ordinary files still work
    assert read_text(ws, "b.py") == "x = 2\n"
    write_text(ws, "new/d.py", "z\n")
    assert read_text(ws, "new/d.py") == "z\n"
    assert changed_files(template, ws) == ["a.py", "new/d.py"]


# workspace: symbolic links --------------------------------------------------------------------


def test_a_link_out_of_the_workspace_is_neither_followed_nor_read(
    trees: tuple[Path, Path, Path],
) -> None:
    template, ws, outside = trees
    # The template holds what the host file holds: following the link would make it "unchanged".
    (template / "leak.py").write_text(SECRET)
    (ws / "leak.py").symlink_to(outside / "secret.txt")
    (ws / "pkg" / "c.py").unlink()
    (ws / "pkg" / "c.py").symlink_to(outside / "secret.txt")

    assert changed_files(template, ws) == ["leak.py", "pkg/c.py"]
    diff = unified_diff(template, ws)
    assert "b/leak.py" in diff
    assert "b/pkg/c.py" in diff
    assert "symbolic link" in diff
    assert "TOP-SECRET" not in diff
    for rel in ("leak.py", "pkg/c.py"):
        with pytest.raises(WorkspacePathError, match="symbolic link"):
            read_text(ws, rel)
    assert all("TOP-SECRET" not in line for _, _, line in search(ws, "SECRET"))
    with pytest.raises(WorkspacePathError, match="symlink"):
        write_text(ws, "leak.py", "overwritten\n")
    assert (outside / "secret.txt").read_text() == SECRET


def test_a_linked_folder_is_not_written_through(trees: tuple[Path, Path, Path]) -> None:
    template, ws, outside = trees
    (ws / "sub").symlink_to(outside)
    with pytest.raises(WorkspacePathError, match="symbolic link"):
        write_text(ws, "sub/secret.txt", "overwritten\n")
    with pytest.raises(WorkspacePathError, match="symbolic link"):
        write_text(ws, "sub/new.txt", "planted\n")
    assert (outside / "secret.txt").read_text() == SECRET
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert changed_files(template, ws) == ["sub"]


_DEV_ZERO_CHILD = textwrap.dedent(
    """\
    import resource, sys
    from pathlib import Path
    # Reading /dev/zero whole would take all the memory there is: 1 GiB is plenty here.
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from rcb_env.sandbox import workspace as ws
    template, root = Path(sys.argv[1]), Path(sys.argv[2])
    print(ws.changed_files(template, root))
    print(ws.unified_diff(template, root))
    print(ws.search(root, "x"))
    try:
        ws.read_text(root, "zero.py")
    except ws.WorkspacePathError as exc:
        print(exc)
    """
)


def test_a_link_to_dev_zero_is_not_read(trees: tuple[Path, Path, Path]) -> None:
    template, ws, _ = trees
    (template / "zero.py").write_text("z = 0\n")
    (ws / "zero.py").symlink_to("/dev/zero")
    env = {**os.environ, "PYTHONPATH": str(Path(rcb_env.__file__).parents[1])}
    child = subprocess.run(
        [sys.executable, "-c", _DEV_ZERO_CHILD, str(template), str(ws)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert "['zero.py']" in child.stdout
    assert "b/zero.py" in child.stdout
    assert "zero.py: is a symbolic link" in child.stdout


def test_links_do_not_break_a_listing(trees: tuple[Path, Path, Path]) -> None:
    _, ws, outside = trees
    (ws / "dangling").symlink_to(outside / "gone" / "nowhere.py")
    (ws / "pkg" / "out").symlink_to(outside)
    (ws / "loop").symlink_to("loop")
    listing = list_tree(ws)
    assert listing == ["a.py", "b.py", "dangling", "loop", "pkg/", "pkg/c.py", "pkg/out"]
    assert list_tree(ws, "dangling") == ["dangling"]
    assert list_tree(ws, "pkg") == ["pkg/c.py", "pkg/out"]
    assert "secret.txt" not in "".join(listing)


def test_files_over_the_cap_are_not_read(trees: tuple[Path, Path, Path]) -> None:
    template, ws, _ = trees
    with (ws / "big.py").open("wb") as f:  # sparse: costs nothing
        f.truncate(65 << 20)
    with pytest.raises(WorkspacePathError, match="larger than"):
        read_text(ws, "big.py")
    (template / "big.py").write_text("small\n")
    diff = unified_diff(template, ws)
    assert "b/big.py" in diff
    assert "not diffed" in diff
    assert changed_files(template, ws) == ["big.py"]


# the shell's control folder -------------------------------------------------------------------


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[tuple[ShellSession, Path]]:
    """A host shell session (as the ``local`` backend's) and its control folder."""
    workspace, control = tmp_path / "ws", tmp_path / "ctl"
    workspace.mkdir()
    control.mkdir()
    session = ShellSession(
        lambda: ["env", "-C", str(workspace)],
        control_host=control,
        control_inside=str(control),
        output_limit=2000,
    )
    try:
        yield session, control
    finally:
        session.kill()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A host file the sandbox must not get at."""
    path = tmp_path / "host" / "victim.txt"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


# The current command's number, from its own stdout (redirected to out_N in the control folder).
_NEXT = 'o=$(readlink /proc/$$/fd/1); n=${o##*_}; next="$(dirname "$o")/cmd_$((n + 1)).sh"; '


def test_a_planted_command_file_link_is_not_written_through(
    shell: tuple[ShellSession, Path], victim: Path
) -> None:
    session, _ = shell
    r = session.run(_NEXT + f'ln -s {victim} "$next"', timeout_s=30)
    assert r.exit_code == 0, r.stderr
    r = promptly(lambda: session.run("echo hello", timeout_s=30))
    assert (r.exit_code, r.stdout) == (0, "hello\n")
    assert victim.read_text() == SECRET


def test_a_planted_command_file_fifo_does_not_block(shell: tuple[ShellSession, Path]) -> None:
    session, control = shell
    r = session.run(_NEXT + 'mkfifo "$next"; echo "$next"', timeout_s=30)
    assert r.exit_code == 0, r.stderr
    fifo = Path(r.stdout.strip())
    assert fifo.parent == control
    assert fifo.is_fifo()
    r = promptly(lambda: session.run("echo hello", timeout_s=30), fifo)
    assert (r.exit_code, r.stdout) == (0, "hello\n")


def test_an_output_file_swapped_for_a_link_returns_nothing(
    shell: tuple[ShellSession, Path], victim: Path
) -> None:
    session, _ = shell
    r = session.run(f'ln -sf {victim} "$(readlink /proc/$$/fd/1)"; echo done', timeout_s=30)
    assert "TOP-SECRET" not in r.stdout + r.stderr
    assert r.exit_code == 0
    r = session.run(f'ln -sf {victim} "$(readlink /proc/$$/fd/2)"; echo oops >&2', timeout_s=30)
    assert "TOP-SECRET" not in r.stdout + r.stderr
    assert victim.read_text() == SECRET
    # and a FIFO in its place reads as no output, without blocking
    r = promptly(
        lambda: session.run('o=$(readlink /proc/$$/fd/1); rm "$o"; mkfifo "$o"', timeout_s=30)
    )
    assert (r.exit_code, r.stdout) == (0, "")
    assert session.run("echo still here", timeout_s=30).stdout == "still here\n"


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_planted_launcher_log_is_not_touched(
    shell: tuple[ShellSession, Path], victim: Path, kind: str
) -> None:
    session, control = shell
    log = control / "launcher.log"
    plant = f"rm -f {log}; " + (f"ln -s {victim} {log}" if kind == "link" else f"mkfifo {log}")
    # The command ends the shell: the next command starts a new one.
    r = session.run(f"{plant}; exit 3", timeout_s=30)
    assert r.exit_code == 3
    fifos = [log] if kind == "fifo" else []
    r = promptly(lambda: session.run("echo restarted", timeout_s=30), *fifos)
    assert r.stdout == "restarted\n"
    assert victim.read_text() == SECRET
    assert log.is_symlink() if kind == "link" else log.is_fifo()


# leftover scratch folders ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_an_owner_file_is_not_followed_or_opened_if_not_regular(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "rcb-grade-leftover"
    folder.mkdir()
    owner = folder / scratch.OWNER_FILE
    if kind == "link":
        # names a process that is running (init): followed, the folder would look owned
        alive = tmp_path / "alive"
        alive.write_text(f"{os.uname().nodename} 1 {psutil.Process(1).create_time():.2f}")
        owner.symlink_to(alive)
        fifos: list[Path] = []
    else:
        os.mkfifo(owner)
        fifos = [owner]
    assert promptly(lambda: scratch.owned_by_another_process(folder), *fifos) is False
    os.utime(folder, (0, 0))  # long unowned
    assert promptly(lambda: scratch.sweep(tmp_path), *fifos) == 1
    assert not folder.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_giving_a_tree_to_the_sandbox_user_follows_no_link(tmp_path: Path) -> None:
    """A file the agent just wrote, swapped for a link to a folder of the host, or a link
    inside the tree: chown_tree changes the links themselves, never what they point to."""
    from rcb_env.sandbox.base import HOST_OWNED, chown_tree

    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("x")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "file").write_text("y")
    (tree / HOST_OWNED).mkdir()
    os.symlink(host, tree / "sub" / "link")
    os.symlink(host, tmp_path / "swapped")
    chown_tree(tree, 4321, 4321)
    chown_tree(tmp_path / "swapped", 4321, 4321)
    assert (tree / "sub" / "file").stat().st_uid == 4321
    assert tree.stat().st_uid == 4321
    assert os.lstat(tree / "sub" / "link").st_uid == 4321
    assert (tree / HOST_OWNED).stat().st_uid == 0
    assert host.stat().st_uid == 0
    assert (host / "secret").stat().st_uid == 0
