"""Scratch folders (workspaces, grading copies, templates) on tmpfs, and the removal of those that
a killed rcb-env process left behind. Each folder records its owner (host, pid and the process's
start time, so a recycled pid is not mistaken for the owner).

What is in a scratch folder, its owner file included, may have been made by sandboxed code, so
every removal here goes through :func:`~rcb_env.sandbox._remove.remove_tree` (bounded, total,
following nothing) and :func:`sweep`, which every ``SandboxFactory()`` runs, never raises.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from pathlib import Path

import psutil

from rcb_env.logs import get_logger
from rcb_env.sandbox._remove import Budget, remove_tree
from rcb_env.untrusted import read_beneath

log = get_logger(__name__)

OWNER_FILE = ".rcb-owner"
#: What is read of an owner file (``host pid start-time``); a larger one is unreadable.
_OWNER_LIMIT = 4096
#: Prefixes of rcb-env's scratch folders. Sandbox backends add theirs when they are registered
#: (:func:`rcb_env.sandbox.backend.register_backend`), so a folder of any backend is swept.
PREFIXES: set[str] = {"rcb-grade-", "rcb-templates-", "rcb-survivors-"}
#: How long one :func:`sweep` may spend removing (all folders together); what remains is left for
#: the next one, so a start is never held up for longer.
SWEEP_SECONDS = 30.0
#: What one :func:`discard` may spend; what remains is trash for a later :func:`sweep`.
DISCARD_SECONDS = 30.0


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


def discard(path: Path) -> list[str]:
    """Delete a scratch folder. It is first renamed (atomically) into the trash, so a process
    killed halfway through the deletion leaves something :func:`sweep` recognises, as does a
    deletion that runs out of time (:data:`DISCARD_SECONDS`) or meets something it cannot
    remove. Never raises; returns what is left (see :func:`remove_tree`)."""
    trash = path.with_name(f"{TRASH}{path.name}")
    try:
        path.rename(trash)
    except OSError:
        trash = path
    left = remove_tree(trash, budget=Budget(DISCARD_SECONDS))
    if left:
        log.warning("scratch folder not fully removed; left for a later sweep", left=left[:3])
    return left


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
    if len(parts) != 3 or parts[0] != os.uname().nodename:
        return True  # not ours to judge (another host sharing the folder, or unreadable)
    pid = parts[1]
    # isdigit() alone accepts "²" (int() then raises); sandboxed code may have written this.
    if not (pid.isascii() and pid.isdigit() and 0 < len(pid) <= 10):
        return True
    try:
        return _start_ticks(int(pid)) == parts[2]
    except (ValueError, OverflowError):
        return True


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
    old. Returns how many were removed entirely.

    Never raises, whatever the folders hold: it runs at every ``SandboxFactory()``, so a tree
    it could not cope with would stop every later run on the host. The removals together get
    :data:`SWEEP_SECONDS`; what is left then (or cannot be removed) waits for the next sweep."""
    budget = Budget(SWEEP_SECONDS)
    removed = 0
    try:
        with os.scandir(parent) as found:
            names = [entry.name for entry in found]
    except OSError:
        return 0
    for name in names:
        try:
            if _sweep_one(parent / name, unowned_after_s, budget):
                removed += 1
        except Exception as exc:  # never: a start must not depend on what a run left
            log.warning("scratch folder not swept", path=str(parent / name), error=repr(exc))
    return removed


def _sweep_one(entry: Path, unowned_after_s: float, budget: Budget) -> bool:
    """Remove ``entry`` if :func:`sweep` should; whether it is gone now."""
    trash = entry.name.startswith(TRASH)
    if not trash and not entry.name.startswith(tuple(PREFIXES)):
        return False
    try:
        st = entry.lstat()  # a link is nobody's scratch folder: never followed
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    if trash:
        # Younger trash may be in the middle of its owner's discard().
        return time.time() - st.st_mtime > 60 and not remove_tree(entry, budget=budget)
    try:
        owner = _owner(entry)
    except OSError:
        if time.time() - st.st_mtime <= unowned_after_s:
            return False
    else:
        if _alive(owner):
            return False
    # Into the trash first, as discard() does: an interrupted removal stays recognisable.
    target = entry.with_name(f"{TRASH}{entry.name}")
    with contextlib.suppress(OSError):
        entry.rename(target)
        entry = target
    return not remove_tree(entry, budget=budget)
