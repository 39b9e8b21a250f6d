"""Scratch folders (workspaces, grading copies, templates) on tmpfs, and the removal of those that
a killed rcb-env process left behind. Each folder records its owner (host, pid and the process's
start time, so a recycled pid is not mistaken for the owner)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil

from rcb_env.untrusted import read_beneath

OWNER_FILE = ".rcb-owner"
#: What is read of an owner file (``host pid start-time``); a larger one is unreadable.
_OWNER_LIMIT = 4096
#: Prefixes of rcb-env's scratch folders. Sandbox backends add theirs when they are registered
#: (:func:`rcb_env.sandbox.backend.register_backend`), so a folder of any backend is swept.
PREFIXES: set[str] = {"rcb-grade-", "rcb-templates-"}


def register_prefix(prefix: str) -> None:
    """Make :func:`sweep` recognise folders named ``prefix...``."""
    PREFIXES.add(prefix)


TRASH = "rcb-trash-"


def _start_ticks(pid: int) -> str | None:
    """The process's start time (an identity together with the pid), or None if it is gone."""
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        return None


def _me() -> str:
    return f"{os.uname().nodename} {os.getpid()} {_start_ticks(os.getpid())}"


def make(prefix: str, parent: Path) -> Path:
    """A new scratch folder owned by this process. It appears under its final name only once it
    has an owner (it is built in the trash and renamed), so a kill at any point leaves either an
    owned folder or trash, both of which :func:`sweep` handles."""
    building = Path(tempfile.mkdtemp(prefix=f"{TRASH}{prefix}", dir=parent))
    (building / OWNER_FILE).write_text(_me())
    path = parent / building.name[len(TRASH) :]
    building.rename(path)
    return path


def discard(path: Path) -> None:
    """Delete a scratch folder. It is first renamed (atomically) into the trash, so a process
    killed halfway through the deletion leaves something :func:`sweep` recognises."""
    trash = path.with_name(f"{TRASH}{path.name}")
    try:
        path.rename(trash)
    except OSError:
        trash = path
    shutil.rmtree(trash, ignore_errors=True)


def _owner(path: Path) -> str:
    """What the owner file of the scratch folder ``path`` says. The folder may be a leftover
    grading copy that sandboxed code could write, so neither the folder nor the file is
    followed if a symbolic link, and only a small regular file is read (never a FIFO).

    Raises:
        OSError: no readable owner file.
    """
    try:
        data = read_beneath(path.parent, f"{path.name}/{OWNER_FILE}", _OWNER_LIMIT)
    except ValueError as exc:  # not a folder's path (e.g. "/")
        raise OSError(f"{path}: {exc}") from exc
    return data.decode(errors="replace")


def _alive(owner: str) -> bool:
    parts = owner.split()
    if len(parts) != 3 or parts[0] != os.uname().nodename or not parts[1].isdigit():
        return True  # not ours to judge (another host sharing the folder, or unreadable)
    return _start_ticks(int(parts[1])) == parts[2]


def owned_by_another_process(path: Path) -> bool:
    """Is ``path`` a scratch folder of another rcb-env process that is still running?"""
    try:
        owner = _owner(path)
    except OSError:
        return False
    return owner != _me() and _alive(owner)


def sweep(parent: Path, unowned_after_s: float = 3600.0) -> int:
    """Remove scratch folders whose owning process is gone, and folders that never got an owner
    (a kill between creating the folder and writing the owner) once they are ``unowned_after_s``
    old. Returns how many."""
    removed = 0
    try:
        entries = list(parent.iterdir())
    except OSError:
        return 0
    for entry in entries:
        if entry.name.startswith(TRASH) and entry.is_dir():
            try:
                if time.time() - entry.stat().st_mtime > 60:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed += 1
            except OSError:
                pass
            continue
        if not entry.name.startswith(tuple(PREFIXES)) or not entry.is_dir():
            continue
        try:
            owner = _owner(entry)
        except OSError:
            try:
                stale = time.time() - entry.stat().st_mtime > unowned_after_s
            except OSError:
                continue
            if stale:
                shutil.rmtree(entry, ignore_errors=True)
                removed += 1
            continue
        if not _alive(owner):
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed
