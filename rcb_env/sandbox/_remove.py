"""Host-side removal of trees that sandboxed code or an agent could have shaped.

A grading copy, a workspace, a warm process's area, a survivor probe's copy or the trash of a
killed rcb-env process can hold anything its sandboxed user could make: a chain of folders
thousands deep (``shutil.rmtree`` recurses once per level and raises ``RecursionError``, which
``ignore_errors`` does not cover; ``os.walk`` and ``os.fwalk`` recurse too in Python 3.11, and
``fwalk`` holds a descriptor per level), folders whose owner took their write or search
permission away, symbolic links to the host's files, FIFOs, millions of entries. A removal that
raises leaves the tree in place, and the next :func:`~rcb_env.sandbox.scratch.sweep` (at every
``SandboxFactory()``) would raise on it again: one run could stop every later one on the host.

:func:`remove_tree` therefore is total: no recursion, never more than three descriptors open,
no symbolic link followed, no other file system entered, a budget of time (and entries), and
every failure returned, never raised. Depth costs nothing: a folder that is not empty when met is
moved (``renameat``) up to the top of the tree under a fresh name and emptied from there, so no
folder is ever handled more than one level below the top. The move also refuses a mount point
(``EBUSY``), so a folder mounted inside the tree is never emptied.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path

from rcb_env.untrusted import kind_of

__all__ = ["SECONDS", "Budget", "remove_tree"]

#: How long a removal may take unless its caller says otherwise; what remains then is left for
#: the next sweep (a caller is never held up by a tree longer than that).
SECONDS = 30.0
#: At most this many leftovers are named in what :func:`remove_tree` returns.
_NAMED = 10
#: Passes over one folder: entries made meanwhile, or skipped by ``readdir`` while the folder
#: changed under it, get this many chances before the folder is reported.
_PASSES = 3

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class Budget:
    """What the host may spend on removals: a wall-clock allowance from its creation and,
    optionally, a number of entries. One budget can be shared by several removals (a sweep of
    many folders), so their total is bounded, not each one's."""

    def __init__(self, seconds: float = SECONDS, entries: int | None = None) -> None:
        self.deadline = time.monotonic() + seconds
        self.entries = entries

    def spend(self) -> bool:
        """Account for one entry; False once the budget is used up."""
        if self.entries is not None:
            if self.entries <= 0:
                return False
            self.entries -= 1
        return time.monotonic() < self.deadline


def remove_tree(path: Path, *, keep_top: bool = False, budget: Budget | None = None) -> list[str]:
    """Remove ``path`` and everything below it (``keep_top``: empty the folder ``path`` but keep
    it). ``path``'s parent is the host's and is trusted; nothing below it is.

    Never raises. Returns what could not be removed, one ``"<path>: <why>"`` line each (at most
    ten named): an immutable or append-only entry, a mount point, what was left when ``budget``
    (by default :data:`SECONDS` from now) ran out. Empty when ``path`` is gone (or emptied).
    """
    removal = _Removal(path, budget or Budget())
    try:
        removal.run(keep_top)
    except Exception as exc:  # a bug or an unforeseen state: the caller still gets an answer
        removal.note("", f"{type(exc).__name__}: {exc}")
    return removal.report()


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


class _Removal:
    """One :func:`remove_tree` call. Folders are named relative to the top: ``""`` for the top
    itself; every other folder handled is a direct child of the top (:attr:`pending`)."""

    def __init__(self, path: Path, budget: Budget) -> None:
        self.path = path
        self.budget = budget
        self.pending: list[str] = []
        """Folders (children of the top) still to be emptied and removed."""
        self.left: list[str] = []
        self.unnamed = 0
        self.out_of_budget = False
        # Names of folders moved up to the top: unguessable by whoever made the tree, and
        # skipped when the top itself is listed (they are pending already).
        self.flat = f".rcb-flat-{secrets.token_hex(6)}-"
        self.count = itertools.count()
        self.dev = 0

    def note(self, rel: str, why: str) -> None:
        if len(self.left) < _NAMED:
            self.left.append(f"{_join(str(self.path), rel) if rel else self.path}: {why}")
        else:
            self.unnamed += 1

    def _noted(self) -> int:
        return len(self.left) + self.unnamed

    def report(self) -> list[str]:
        if self.out_of_budget:
            self.note("", "the removal's budget ran out; the rest is left for the next sweep")
        return self.left + ([f"... and {self.unnamed} more"] if self.unnamed else [])

    # the tree ---------------------------------------------------------------------------------
    def run(self, keep_top: bool) -> None:
        try:
            parent = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            self._top(parent, self.path.name, keep_top)
        finally:
            os.close(parent)

    def _top(self, parent: int, name: str, keep_top: bool) -> None:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            if keep_top:
                self.note("", f"is {kind_of(st.st_mode)}, not a folder")
            else:
                self._act(lambda: os.unlink(name, dir_fd=parent), "")
            return
        top = self._open(parent, name, "", top=True)
        if top is None:
            return
        try:
            self.dev = os.fstat(top).st_dev
            for _ in range(_PASSES):
                self._empty(top, top, "")
                while self.pending and not self.out_of_budget:
                    self._folder(top, self.pending.pop())
                if self.out_of_budget or self.left or not _has_entries(top):
                    break
            else:
                self.note("", "it kept filling up while it was being emptied")
        finally:
            os.close(top)
        if not keep_top and not self.out_of_budget and not self.left:
            self._act(lambda: os.rmdir(name, dir_fd=parent), "")

    def _folder(self, top: int, rel: str) -> None:
        """Empty and remove the top's child folder ``rel``."""
        fd = self._open(top, rel, rel)
        if fd is None:
            return
        try:
            if os.fstat(fd).st_dev != self.dev:
                self.note(rel, "on another file system (not entered)")
                return
            for attempt in range(_PASSES):
                noted = self._noted()
                self._empty(fd, top, rel)
                if self.out_of_budget or self._noted() > noted:
                    return  # what stays in it is reported: not the folder itself as well
                error = self._try(lambda: os.rmdir(rel, dir_fd=top), top)
                if error is None:
                    return
                if error.errno != errno.ENOTEMPTY or attempt == _PASSES - 1:
                    self.note(rel, f"cannot remove it ({_why(error)})")
                    return
        finally:
            os.close(fd)

    def _empty(self, fd: int, top: int, rel: str) -> None:
        """One pass over the folder ``fd`` (``rel``): files, links, FIFOs... are unlinked, empty
        folders removed, the others moved up to the top and queued."""
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if fd == top and entry.name.startswith(self.flat):
                        continue  # moved up here by this removal: already queued
                    if not self.budget.spend():
                        self.out_of_budget = True
                        return
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    self._entry(fd, top, rel, entry.name, is_dir)
        except OSError as exc:
            self.note(rel, f"cannot list it ({_why(exc)})")

    def _entry(self, fd: int, top: int, rel: str, name: str, is_dir: bool) -> None:
        where = _join(rel, name)
        if not is_dir:
            error = self._try(lambda: os.unlink(name, dir_fd=fd), fd)
            if error is None:
                return
            if not isinstance(error, IsADirectoryError):  # a folder now: handled below
                self.note(where, f"cannot remove it ({_why(error)})")
                return
        error = self._try(lambda: os.rmdir(name, dir_fd=fd), fd)
        if error is None:
            return
        if isinstance(error, NotADirectoryError):  # no longer a folder
            self._act(lambda: os.unlink(name, dir_fd=fd), where, fd)
            return
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            self.note(where, f"cannot remove it ({_why(error)})")
            return
        fresh = f"{self.flat}{next(self.count)}"
        error = self._try(
            lambda: os.rename(name, fresh, src_dir_fd=fd, dst_dir_fd=top), fd, sub=name
        )
        if error is None:
            self.pending.append(fresh)
        else:  # EBUSY: a mount point; EPERM: immutable...
            self.note(where, f"cannot move it to be emptied ({_why(error)})")

    # one operation ----------------------------------------------------------------------------
    def _try(self, op: Callable[[], object], fd: int, sub: str | None = None) -> OSError | None:
        """``op()``; None if it did its job (or what it was to remove is gone). Refused for want
        of permission, the folder ``fd`` (and its subfolder ``sub``, which a move across folders
        must be able to write) get their owner's full permissions back and ``op`` runs once more:
        the sandbox's user may have taken them away (root needs none of this; an immutable entry
        stays refused)."""
        try:
            op()
            return None
        except FileNotFoundError:
            return None
        except PermissionError:
            pass
        except OSError as exc:
            return exc
        _grant(fd)
        if sub is not None:
            _grant_entry(fd, sub)
        try:
            op()
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            return exc

    def _act(self, op: Callable[[], object], rel: str, fd: int | None = None) -> None:
        error = self._try(op, fd) if fd is not None else _plain(op)
        if error is not None:
            self.note(rel, f"cannot remove it ({_why(error)})")

    def _open(self, dir_fd: int, name: str, rel: str, *, top: bool = False) -> int | None:
        """The folder ``name`` of ``dir_fd`` opened, never through a symbolic link (its search
        and read permission given back first if they were taken away); None if it is gone, or
        (noted) cannot be opened. One that is no longer a folder is unlinked, unless it is the
        top."""
        for attempt in range(2):
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                return None
            except PermissionError as exc:
                if attempt == 0:
                    _grant_entry(dir_fd, name)
                    continue
                self.note(rel, f"cannot open it ({_why(exc)})")
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and not top:
                    self._act(lambda: os.unlink(name, dir_fd=dir_fd), rel, dir_fd)
                else:
                    self.note(rel, f"cannot open it ({_why(exc)})")
            return None
        return None


def _plain(op: Callable[[], object]) -> OSError | None:
    try:
        op()
        return None
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc


def _grant(fd: int) -> None:
    """Give the folder ``fd`` its owner's read, write and search permission (quietly not)."""
    with contextlib.suppress(OSError):
        os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | stat.S_IRWXU)


def _grant_entry(dir_fd: int, name: str) -> None:
    """:func:`_grant` for the entry ``name`` of ``dir_fd`` if it is a folder. It is looked at
    through an ``O_PATH`` descriptor and changed through that very descriptor
    (``/proc/self/fd``), so a symbolic link swapped in meanwhile is never followed."""
    try:
        handle = os.open(name, _PATH_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    try:
        st = os.fstat(handle)
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError):
                os.chmod(f"/proc/self/fd/{handle}", stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    finally:
        os.close(handle)


def _has_entries(fd: int) -> bool:
    try:
        with os.scandir(fd) as entries:
            return any(True for _ in entries)
    except OSError:
        return True
