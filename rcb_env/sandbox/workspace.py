"""The agent's workspace: the masked repository without hidden files, and safe file operations.

A *template* (one per snippet) is built once and shared read-only; an episode works in a copy on
tmpfs, so a reset is a delete and a copy. File tools run on the host (as root) against the copy,
which the sandboxed agent can also write: every path is taken lexically below the workspace, and no
read or write follows a symbolic link there, opens anything but a regular file (a FIFO would block
the host) or reads more than a size cap (:mod:`rcb_env.untrusted`). Every walk of it (a listing,
a search, the changed files and the patch) is iterative and bounded in depth and entries, and
emptying it on a reset goes through :func:`~rcb_env.sandbox._remove.remove_tree`: the agent can
make a workspace absurd, never a host call that crashes or hangs.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import posixpath
import re
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from rcb_env.errors import AgentFacingError, SandboxError
from rcb_env.sandbox._remove import remove_tree
from rcb_env.task.loader import _SKIP_WALK, walk_files
from rcb_env.task.models import Paper, Snippet
from rcb_env.task.regions import extract_region, extract_span
from rcb_env.task.source import source_for
from rcb_env.untrusted import NotARegularFile, TooLarge, kind_of, open_beneath

#: extract_region and extract_span live in the task layer (rcb_env.task.regions); kept here
#: for the callers that import them from the workspace.
__all__ = [
    "WorkspacePathError",
    "extract_body",
    "extract_region",
    "extract_span",
]


class WorkspacePathError(AgentFacingError):
    """A path the agent gave is outside the workspace, hidden, or not there."""


_template_lock = threading.Lock()


def build_template(paper: Paper, snippet: Snippet, dest: Path) -> Path:
    """Write the masked tree for ``snippet`` into ``dest`` (idempotent; safe across threads).

    What the tree holds is the task source's decision (:meth:`TaskSource.write_workspace`):
    the region masked, hidden paths (tests, reference copies, declared paths) left out.

    Raises:
        SandboxError: an unfinished earlier build could not be removed.
    """
    with _template_lock:
        done = dest / ".rcb-template-complete"
        if done.exists():
            return dest
        tmp = dest.with_name(dest.name + ".partial")
        for stale in (dest, tmp):
            left = remove_tree(stale)
            if left:
                raise SandboxError(f"cannot remove an unfinished template: {left[0]}")
        tmp.mkdir(parents=True)
        source_for(paper).write_workspace(paper, snippet, tmp)
        tmp.rename(dest)
        (dest / ".rcb-template-complete").touch()
        return dest


def copy_template(template: Path, dest: Path) -> None:
    """Fresh writable copy of a template (the marker file stays behind). ``dest`` itself is kept
    (emptied, not replaced): a container may have it bind-mounted. What the agent left in it is
    removed by :func:`remove_tree` (any depth, no link followed, bounded in time).

    Raises:
        SandboxError: what the agent left could not all be removed (something immutable, or
            more than the removal's time allows): the copy would not be pristine.
    """
    dest.mkdir(parents=True, exist_ok=True)
    left = remove_tree(dest, keep_top=True)
    if left:
        raise SandboxError(f"cannot empty the workspace for a fresh copy: {'; '.join(left[:3])}")
    shutil.copytree(
        template,
        dest,
        ignore=lambda _d, names: {".rcb-template-complete"} & set(names),
        dirs_exist_ok=True,
    )


#: What a file tool reads of one file (read_file, search): more is refused, not read.
TOOL_READ_LIMIT = 8 << 20
#: What a diff reads of one file (either side); a larger file is reported, not diffed.
DIFF_READ_LIMIT = 64 << 20
#: Folders deeper than this below the workspace are not walked (a listing, search or diff).
_MAX_DEPTH = 256
#: Entries one walk of the workspace (a listing, search or diff) looks at, at most: the agent's
#: sandbox can make millions of empty files, which is no reason for the host to spend minutes
#: and gigabytes walking them.
_MAX_ENTRIES = 200_000
#: Characters of the paths one walk of the workspace yields, in all.
_MAX_PATH_CHARS = 64 << 20
#: Files one diff of the workspace covers, and bytes it reads (both sides), at most.
_MAX_DIFF_FILES = 2000
_MAX_DIFF_BYTES = 256 << 20
_CHUNK = 1 << 20

# Folders: opened only as folders, never through a symbolic link, never blocking.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def resolve(root: Path, path: str, *, must_exist: bool = True) -> Path:
    """Map an agent's path (relative to the workspace, or absolute inside the sandbox's view of
    it) to a host path strictly inside ``root``, symbolic links resolved. Nothing is opened; the
    file tools below do not use it (they follow no link at all).

    Raises:
        WorkspacePathError: outside the workspace (``..``, absolute elsewhere, a symlink out).
    """
    rel = _agent_path(root, path)
    try:
        candidate = (root / rel).resolve()
        real_root = root.resolve()
    except (OSError, RuntimeError) as exc:  # e.g. a symlink loop
        raise WorkspacePathError(f"{path}: cannot resolve ({exc})") from None
    if candidate != real_root and real_root not in candidate.parents:
        raise WorkspacePathError(f"{path}: outside the workspace")
    if must_exist and not candidate.exists():
        raise WorkspacePathError(f"{path}: no such file or directory")
    return candidate


def relative(root: Path, host_path: Path) -> str:
    """``host_path`` relative to ``root``, taken lexically (no symbolic link is resolved)."""
    for base in (root, root.resolve()):
        try:
            rel = posixpath.normpath(host_path.relative_to(base).as_posix())
        except ValueError:
            continue
        if rel != ".." and not rel.startswith("../"):
            return rel
    raise WorkspacePathError(f"{host_path}: outside the workspace")


def _agent_path(root: Path, path: str) -> str:
    """An agent's path as a normalised POSIX path relative to ``root`` (``.`` for the root),
    taken lexically: nothing on the host is looked at.

    Raises:
        WorkspacePathError: outside the workspace (``..``, absolute elsewhere).
    """
    p = path.strip()
    if "\x00" in p:
        raise WorkspacePathError(f"{path!r}: not a valid path")
    if p == "/workspace" or p.startswith("/workspace/"):
        p = p[len("/workspace") :].lstrip("/")
    if os.path.isabs(p):
        for base in dict.fromkeys((str(root), str(root.resolve()))):
            if p == base or p.startswith(base.rstrip("/") + "/"):
                p = os.path.relpath(p, base)
                break
        else:
            raise WorkspacePathError(f"{path}: outside the workspace")
    rel = posixpath.normpath(p or ".")
    if rel == ".." or rel.startswith("../") or posixpath.isabs(rel):
        raise WorkspacePathError(f"{path}: outside the workspace")
    return rel


def _join(folder: str, name: str) -> str:
    return name if folder == "." else f"{folder}/{name}"


def _open_dir(root: Path, rel: str, *, create: bool = False) -> int:
    """A descriptor of the folder ``root/rel``, reached without following any symbolic link
    (``create``: missing folders are made on the way).

    Raises:
        OSError: not there, or not a folder reached that way (ENOTDIR, ELOOP...).
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in PurePosixPath(rel).parts:
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)  # never follows a link
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lstat(root: Path, rel: str) -> os.stat_result | None:
    """The entry ``root/rel`` itself (a link is not followed), or None if it is not there.

    Raises:
        OSError: a folder on the way is not a folder reached without a symbolic link.
    """
    if rel == ".":
        return os.stat(root)
    folder, name = posixpath.split(rel)
    try:
        fd = _open_dir(root, folder or ".")
    except FileNotFoundError:
        return None
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    """What the agent put there, in words (a link is never followed)."""
    kind = kind_of(mode)
    return f"{kind} (not followed)" if stat.S_ISLNK(mode) else kind


def _entry(root: Path, rel: str, path: str) -> os.stat_result:
    """The entry the agent named (not followed if a link).

    Raises:
        WorkspacePathError: not there, or reached only through a symbolic link or a file.
    """
    try:
        st = _lstat(root, rel)
    except OSError:
        raise WorkspacePathError(
            f"{path}: a folder on the way is a symbolic link (not followed) or not a folder"
        ) from None
    if st is None:
        raise WorkspacePathError(f"{path}: no such file or directory")
    return st


def _why_not_regular(root: Path, rel: str) -> str:
    try:
        st = _lstat(root, rel)
    except OSError:
        return "a folder on the way is a symbolic link (not followed) or not a folder"
    if st is None:
        return "no such file or directory"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory"
    if stat.S_ISLNK(st.st_mode) and _link_points_outside(root, rel):
        return "is a symbolic link to a path outside the workspace (not followed)"
    return f"is {_kind(st.st_mode)}, not a regular file"


def _link_points_outside(root: Path, rel: str) -> bool:
    """Does the symbolic link ``root/rel`` name a path outside the workspace (taken lexically;
    for the message only: no link is ever followed)?"""
    folder, name = posixpath.split(rel)
    try:
        fd = _open_dir(root, folder or ".")
        try:
            target = os.readlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        _agent_path(root, target if os.path.isabs(target) else posixpath.join(folder, target))
    except WorkspacePathError:
        return True
    except OSError:
        return False
    return False


def _read(root: Path, rel: str, limit: int) -> bytes:
    """``root/rel`` if it is a regular file reached without a symbolic link, of at most
    ``limit`` bytes (a larger one is not read).

    Raises:
        FileNotFoundError, NotARegularFile, ValueError: as :func:`open_beneath`.
        TooLarge: it holds more than ``limit`` bytes.
    """
    with open_beneath(root, rel) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise TooLarge(f"{rel} holds {size} bytes, more than the limit of {limit}")
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew meanwhile
        raise TooLarge(f"{rel} holds more than the limit of {limit} bytes")
    return data


class _Bounds:
    """What one walk of the workspace may cover: :data:`_MAX_ENTRIES` entries, paths of
    :data:`_MAX_PATH_CHARS` characters in all (what a caller holds of them: a name may be 255
    bytes at each of 256 levels), folders down to :data:`_MAX_DEPTH`, and ten times
    :data:`_MAX_ENTRIES` folder components opened (each folder is reached from the root, one
    component at a time, so folders deep down cost that much more). ``cut`` says, for the
    agent, what was left out (None: nothing)."""

    def __init__(self) -> None:
        self.limit, self.depth = _MAX_ENTRIES, _MAX_DEPTH
        self.entries, self.chars, self.opens = self.limit, _MAX_PATH_CHARS, 10 * self.limit
        self.cut: str | None = None

    def take(self, folder: str, name: str) -> bool:
        """Account for the entry ``name`` of ``folder``; False (and :attr:`cut`) once over."""
        self.entries -= 1
        self.chars -= len(folder) + len(name) + 1
        if self.entries >= 0 and self.chars >= 0:
            return True
        self.cut = f"more than {self.limit} entries, or paths of more than {_MAX_PATH_CHARS} "
        self.cut += "characters in all"
        return False

    def reach(self, folder: str) -> bool:
        """Account for opening ``folder``; False (and :attr:`cut`) once over."""
        self.opens -= folder.count("/") + 1
        if self.opens >= 0:
            return True
        self.cut = f"more than {self.limit} entries, counting folders deep down"
        return False

    def too_large(self, path: str) -> WorkspacePathError:
        """The agent's error for a walk of ``path`` that was cut short."""
        return WorkspacePathError(
            f"{path}: the workspace is too large to walk ({self.cut}); remove what is not "
            "needed, or name a smaller folder"
        )


def _walk(
    root: Path, top: str, bounds: _Bounds, skip: frozenset[str] | set[str] = frozenset()
) -> Iterator[str]:
    """Every entry below the folder ``root/top`` that is not a folder (regular files, symbolic
    links, FIFOs...), as a path relative to ``root``, in :func:`os.walk`'s order (see
    :func:`_walk_folders`)."""
    for here, _dirs, files in _walk_folders(root, top, bounds, skip):
        for name in files:
            yield _join(here, name)


def _walk_folders(
    root: Path, top: str, bounds: _Bounds, skip: frozenset[str] | set[str] = frozenset()
) -> Iterator[tuple[str, list[str], list[str]]]:
    """Like :func:`os.walk` (top-down, names sorted) below ``root/top``, following no symbolic
    link, without recursion: yields (folder relative to ``root``, its subfolders, its other
    entries). A link to a folder is an entry, not a folder walked into. Each folder is opened
    afresh from ``root``, one component at a time, as a folder that is no link, so nothing
    swapped in meanwhile is entered or opened; one that is no longer a folder is skipped.
    Folders named in ``skip`` are left out. Within ``bounds``: once it is used up the walk
    ends, below its depth folders are not entered; either sets ``bounds.cut``."""
    stack = [(top, 0)]
    while stack:
        here, depth = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        if not bounds.reach(here):
            return
        try:
            fd = _open_dir(root, here)
        except OSError:
            continue
        full = False
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if not bounds.take(here, entry.name):
                        full = True
                        break
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    if not is_dir:
                        files.append(entry.name)
                    elif entry.name not in skip:
                        dirs.append(entry.name)
        except OSError:
            continue
        finally:
            os.close(fd)
        dirs.sort()
        files.sort()
        yield here, dirs, files  # what was taken of a folder that filled the bounds, too
        if full:
            return
        if depth < bounds.depth:
            stack.extend((_join(here, d), depth + 1) for d in reversed(dirs))
        elif dirs:
            bounds.cut = bounds.cut or f"folders nested more than {bounds.depth} deep"


def list_tree(root: Path, path: str = ".", max_entries: int = 2000) -> list[str]:
    """Files under ``path`` (relative POSIX paths), folders marked with a trailing ``/``.
    A symbolic link is listed by its own name (whatever it points to; it is not followed).

    Raises:
        WorkspacePathError: a bad path, or a folder too large to walk (:class:`_Bounds`).
    """
    rel = _agent_path(root, path)
    if not stat.S_ISDIR(_entry(root, rel, path).st_mode):
        return [rel]
    out: list[str] = []
    bounds = _Bounds()
    for here, dirs, files in _walk_folders(root, rel, bounds, frozenset({"__pycache__"})):
        out.extend(_join(here, d) + "/" for d in dirs)
        out.extend(_join(here, name) for name in files)
        if len(out) >= max_entries:
            break
    else:
        if bounds.cut is not None:
            raise bounds.too_large(path)
    return sorted(out)[:max_entries]


_BINARY_SNIFF = 8192


def read_text(root: Path, path: str) -> str:
    """The text of a regular file in the workspace (at most :data:`TOOL_READ_LIMIT` bytes)."""
    rel = _agent_path(root, path)
    if rel == ".":
        raise WorkspacePathError(f"{path}: is a directory")
    try:
        data = _read(root, rel, TOOL_READ_LIMIT)
    except FileNotFoundError:
        raise WorkspacePathError(f"{path}: no such file or directory") from None
    except NotARegularFile:
        why = _why_not_regular(root, rel)
        raise WorkspacePathError(f"{path}: {why}") from None
    except TooLarge:
        raise WorkspacePathError(
            f"{path}: larger than {TOOL_READ_LIMIT} bytes; not read (run a command such as "
            "head or sed to see part of it)"
        ) from None
    except ValueError:
        raise WorkspacePathError(f"{path}: outside the workspace") from None
    except OSError as exc:
        raise WorkspacePathError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if b"\x00" in data[:_BINARY_SNIFF]:
        raise WorkspacePathError(f"{path}: binary file ({len(data)} bytes)")
    return data.decode("utf-8", "replace")


_WRITE_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def write_text(root: Path, path: str, content: str) -> Path:
    """Write a regular file in the workspace (missing folders are made), never through a
    symbolic link and never into anything but a regular file."""
    rel = _agent_path(root, path)
    if rel == ".":
        raise WorkspacePathError(f"{path}: is a directory")
    folder, name = posixpath.split(rel)
    data = content.encode()
    try:
        dir_fd = _open_dir(root, folder or ".", create=True)
    except OSError:
        raise WorkspacePathError(
            f"{path}: a folder on the way is a symbolic link (not followed) or not a folder"
        ) from None
    try:
        fd = _open_for_writing(dir_fd, name, path)
    finally:
        os.close(dir_fd)
    try:
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return root / rel


def _open_for_writing(dir_fd: int, name: str, path: str) -> int:
    """A writable descriptor of the regular file ``name`` in ``dir_fd`` (created if missing).
    An existing entry is looked at through an ``O_PATH`` descriptor first, so nothing but a
    regular file is ever opened (no FIFO or device ``open`` runs)."""
    for _ in range(5):
        try:
            handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            try:
                return os.open(
                    name,
                    _WRITE_FLAGS | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                    0o666,
                    dir_fd=dir_fd,
                )
            except FileExistsError:
                continue  # something appeared meanwhile: look at it
        try:
            mode = os.fstat(handle).st_mode
            if stat.S_ISLNK(mode):
                raise WorkspacePathError(f"{path}: refusing to write through a symlink")
            if stat.S_ISDIR(mode):
                raise WorkspacePathError(f"{path}: is a directory")
            if not stat.S_ISREG(mode):
                raise WorkspacePathError(
                    f"{path}: is {_kind(mode)}, not a regular file; refusing to write to it"
                )
            # Through the O_PATH handle: the very inode just checked.
            try:
                return os.open(f"/proc/self/fd/{handle}", _WRITE_FLAGS)
            except OSError as exc:
                raise WorkspacePathError(
                    f"{path}: cannot write it ({exc.strerror or exc})"
                ) from None
        finally:
            os.close(handle)
    raise WorkspacePathError(f"{path}: it kept changing while being written; not written")


def search(
    root: Path, pattern: str, path: str = ".", glob: str | None = None, max_matches: int = 200
) -> list[tuple[str, int, str]]:
    """Regex search over text files: (file, 1-based line, line) triples. Only regular files
    (symbolic links are not followed) of at most :data:`TOOL_READ_LIMIT` bytes are searched.

    Raises:
        WorkspacePathError: a bad path or pattern, or a folder too large to walk
            (:class:`_Bounds`) before ``max_matches`` were found.
    """
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise WorkspacePathError(f"invalid regular expression: {exc}") from None
    rel = _agent_path(root, path)
    mode = _entry(root, rel, path).st_mode
    files: Iterator[str]
    bounds = _Bounds()
    if stat.S_ISDIR(mode):
        prefix = "" if rel == "." else rel + "/"
        files = (
            f
            for f in _walk(root, rel, bounds, _SKIP_WALK)
            if glob is None or PurePosixPath(f[len(prefix) :]).match(glob)
        )
    else:
        files = iter([rel])
    out: list[tuple[str, int, str]] = []
    for f in files:
        try:
            data = _read(root, f, TOOL_READ_LIMIT)
        except (OSError, ValueError):  # not a regular file (a link, a FIFO...), too large, gone
            continue
        if b"\x00" in data[:_BINARY_SNIFF]:
            continue
        for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if rx.search(line):
                out.append((f, i, line[:500]))
                if len(out) >= max_matches:
                    return out
    if bounds.cut is not None:
        raise bounds.too_large(path)
    return out


def _same_content(template_file: Path, workspace: Path, rel: str) -> bool:
    """Does the workspace's ``rel``, a regular file reached without a symbolic link, hold what
    the (trusted) template's file holds? Read in chunks, no further than the template's size."""
    try:
        with open_beneath(workspace, rel) as new, template_file.open("rb") as old:
            if os.fstat(new.fileno()).st_size != os.fstat(old.fileno()).st_size:
                return False
            while True:
                a = old.read(_CHUNK)
                if a != new.read(len(a) or 1):
                    return False
                if not a:
                    return True
    except (OSError, ValueError):
        return False


def changed_files(template: Path, workspace: Path) -> list[str]:
    """Files added, removed or modified in the workspace relative to the template. Anything in
    the workspace that is not a regular file (a symbolic link, a FIFO...) counts as changed
    and is not opened. Never fails on an absurd workspace: what lies beyond the walk's bounds
    (:class:`_Bounds`) is left out."""
    return _changes(template, workspace)[0]


def _changes(template: Path, workspace: Path) -> tuple[list[str], str | None]:
    """:func:`changed_files`, and what the walk of the workspace left out (None: nothing)."""
    before = {f for f in walk_files(template) if f != ".rcb-template-complete"}
    bounds = _Bounds()
    after = set(_walk(workspace, ".", bounds, _SKIP_WALK))
    if bounds.cut is not None:  # template files the walk did not reach: looked up by name
        after |= {f for f in before - after if _is_there(workspace, f)}
    changed = sorted(before ^ after)
    for f in sorted(before & after):
        if not _same_content(template / f, workspace, f):
            changed.append(f)
    return sorted(changed), bounds.cut


def _is_there(root: Path, rel: str) -> bool:
    """Is there an entry ``root/rel`` that is not a folder (reached without a link)?"""
    try:
        st = _lstat(root, rel)
    except OSError:
        return False
    return st is not None and not stat.S_ISDIR(st.st_mode)


def _template_bytes(path: Path) -> bytes | None:
    """A (trusted) template file's content; None if larger than :data:`DIFF_READ_LIMIT`."""
    with path.open("rb") as f:
        data = f.read(DIFF_READ_LIMIT + 1)
    return data if len(data) <= DIFF_READ_LIMIT else None


def unified_diff(template: Path, workspace: Path, files: list[str] | None = None) -> str:
    """A unified diff (``a/`` = masked original, ``b/`` = workspace) of the changed text files.
    A workspace entry that is not a regular file (a symbolic link, a FIFO...) is not opened, and
    neither side is read beyond :data:`DIFF_READ_LIMIT` bytes: such a file gets a one-line note,
    as does a workspace too large to walk (:class:`_Bounds`), whose diff covers what was walked.
    At most :data:`_MAX_DIFF_FILES` files and :data:`_MAX_DIFF_BYTES` bytes are diffed (the
    template's own files first when there are more): one line counts the rest."""
    chunks: list[str] = []
    if files is None:
        files, cut = _changes(template, workspace)
        if cut is not None:
            chunks.append(f"Workspace b/ not compared in full ({cut}): the diff covers part\n")
    if len(files) > _MAX_DIFF_FILES:
        files = sorted(files, key=lambda rel: (not (template / rel).is_file(), rel))
    spent = 0
    for done, rel in enumerate(files):
        if done >= _MAX_DIFF_FILES or spent > _MAX_DIFF_BYTES:
            chunks.append(
                f"{len(files) - done} more changed files not diffed (a diff covers at most "
                f"{_MAX_DIFF_FILES} files and {_MAX_DIFF_BYTES} bytes)\n"
            )
            break
        old_p = template / rel
        old = _template_bytes(old_p) if old_p.is_file() else b""
        new_exists = True
        try:
            new: bytes | None = _read(workspace, rel, DIFF_READ_LIMIT)
        except FileNotFoundError:
            new, new_exists = b"", False
        except TooLarge:
            new = None
        except NotARegularFile:
            why = _why_not_regular(workspace, rel)
            chunks.append(f"File b/{rel} {why}: not diffed\n")
            continue
        except (OSError, ValueError) as exc:
            chunks.append(f"File b/{rel} cannot be read ({exc}): not diffed\n")
            continue
        spent += len(old or b"") + len(new or b"")
        if old is None or new is None:
            chunks.append(
                f"Files a/{rel} and b/{rel} differ (larger than {DIFF_READ_LIMIT} bytes: "
                "not diffed)\n"
            )
            continue
        if b"\x00" in old[:_BINARY_SNIFF] or b"\x00" in new[:_BINARY_SNIFF]:
            chunks.append(f"Binary files a/{rel} and b/{rel} differ\n")
            continue
        chunks.extend(
            difflib.unified_diff(
                old.decode("utf-8", "replace").splitlines(keepends=True),
                new.decode("utf-8", "replace").splitlines(keepends=True),
                fromfile=f"a/{rel}" if old_p.exists() else "/dev/null",
                tofile=f"b/{rel}" if new_exists else "/dev/null",
            )
        )
    text = "".join(chunks)
    return text if not text or text.endswith("\n") else text + "\n"


def extract_body(paper: Paper, snippet: Snippet, edited_text: str) -> tuple[str, bool]:
    """The candidate body in the agent's edited copy of ``snippet.file`` (the task source
    decides how), and whether the file also changed outside the region."""
    return source_for(paper).extract_body(paper, snippet, edited_text)
