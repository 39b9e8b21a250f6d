"""The agent's workspace: the masked repository without hidden files, and safe file operations.

A *template* (one per snippet) is built once and shared read-only; an episode works in a copy on
tmpfs, so a reset is a delete and a copy. File tools run on the host against the copy, with every
path resolved (symlinks included) and refused unless it stays inside the workspace.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import threading
from pathlib import Path, PurePosixPath

from rcb_env.errors import AgentFacingError
from rcb_env.task import annotations as ann
from rcb_env.task.loader import walk_files
from rcb_env.task.models import Paper, Snippet
from rcb_env.task.source import source_for


class WorkspacePathError(AgentFacingError):
    """A path the agent gave is outside the workspace, hidden, or not there."""


_template_lock = threading.Lock()


def build_template(paper: Paper, snippet: Snippet, dest: Path) -> Path:
    """Write the masked tree for ``snippet`` into ``dest`` (idempotent; safe across threads).

    What the tree holds is the task source's decision (:meth:`TaskSource.write_workspace`):
    the region masked, hidden paths (tests, reference copies, declared paths) left out.
    """
    with _template_lock:
        done = dest / ".rcb-template-complete"
        if done.exists():
            return dest
        if dest.exists():
            shutil.rmtree(dest)
        tmp = dest.with_name(dest.name + ".partial")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        source_for(paper).write_workspace(paper, snippet, tmp)
        tmp.rename(dest)
        (dest / ".rcb-template-complete").touch()
        return dest


def copy_template(template: Path, dest: Path) -> None:
    """Fresh writable copy of a template (the marker file stays behind). ``dest`` itself is kept
    (emptied, not replaced): a container may have it bind-mounted."""
    dest.mkdir(parents=True, exist_ok=True)
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    shutil.copytree(
        template,
        dest,
        ignore=lambda _d, names: {".rcb-template-complete"} & set(names),
        dirs_exist_ok=True,
    )


def resolve(root: Path, path: str, *, must_exist: bool = True) -> Path:
    """Map an agent's path (relative to the workspace, or absolute inside the sandbox's view of
    it) to a host path strictly inside ``root``.

    Raises:
        WorkspacePathError: outside the workspace (``..``, absolute elsewhere, a symlink out).
    """
    p = path.strip()
    for prefix in ("/workspace/", "/workspace"):
        if p == "/workspace" or p.startswith("/workspace/"):
            p = p[len(prefix) :]
            break
    if os.path.isabs(p):
        rootstr = str(root)
        if p != rootstr and not p.startswith(rootstr + os.sep):
            raise WorkspacePathError(f"{path}: outside the workspace")
        p = os.path.relpath(p, rootstr)
    candidate = (root / (p or ".")).resolve()
    real_root = root.resolve()
    if candidate != real_root and real_root not in candidate.parents:
        raise WorkspacePathError(f"{path}: outside the workspace")
    if must_exist and not candidate.exists():
        raise WorkspacePathError(f"{path}: no such file or directory")
    return candidate


def relative(root: Path, host_path: Path) -> str:
    rel = host_path.resolve().relative_to(root.resolve()).as_posix()
    return rel if rel != "." else "."


def list_tree(root: Path, path: str = ".", max_entries: int = 2000) -> list[str]:
    """Files under ``path`` (relative POSIX paths), folders marked with a trailing ``/``."""
    base = resolve(root, path)
    if base.is_file():
        return [relative(root, base)]
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        here = Path(dirpath)
        for d in dirnames:
            out.append(relative(root, here / d) + "/")
        for f in sorted(filenames):
            out.append(relative(root, here / f))
        if len(out) >= max_entries:
            break
    return sorted(out)[:max_entries]


_BINARY_SNIFF = 8192


def read_text(root: Path, path: str) -> str:
    target = resolve(root, path)
    if target.is_dir():
        raise WorkspacePathError(f"{path}: is a directory")
    data = target.read_bytes()
    if b"\x00" in data[:_BINARY_SNIFF]:
        raise WorkspacePathError(f"{path}: binary file ({len(data)} bytes)")
    return data.decode("utf-8", "replace")


def write_text(root: Path, path: str, content: str) -> Path:
    target = resolve(root, path, must_exist=False)
    if target.is_dir():
        raise WorkspacePathError(f"{path}: is a directory")
    if target.is_symlink():
        raise WorkspacePathError(f"{path}: refusing to write through a symlink")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content.encode())
    return target


def search(
    root: Path, pattern: str, path: str = ".", glob: str | None = None, max_matches: int = 200
) -> list[tuple[str, int, str]]:
    """Regex search over text files: (file, 1-based line, line) triples."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise WorkspacePathError(f"invalid regular expression: {exc}") from None
    base = resolve(root, path)
    files = (
        [base]
        if base.is_file()
        else [base / f for f in walk_files(base) if glob is None or PurePosixPath(f).match(glob)]
    )
    out: list[tuple[str, int, str]] = []
    for f in files:
        try:
            real = resolve(root, str(f))
        except WorkspacePathError:
            continue
        data = real.read_bytes()
        if b"\x00" in data[:_BINARY_SNIFF]:
            continue
        for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if rx.search(line):
                out.append((relative(root, real), i, line[:500]))
                if len(out) >= max_matches:
                    return out
    return out


def changed_files(template: Path, workspace: Path) -> list[str]:
    """Files added, removed or modified in the workspace relative to the template."""
    before = {f for f in walk_files(template) if f != ".rcb-template-complete"}
    after = set(walk_files(workspace))
    changed = sorted(before ^ after)
    for f in sorted(before & after):
        if (template / f).read_bytes() != (workspace / f).read_bytes():
            changed.append(f)
    return sorted(changed)


def unified_diff(template: Path, workspace: Path, files: list[str] | None = None) -> str:
    """A unified diff (``a/`` = masked original, ``b/`` = workspace) of the changed text files."""
    chunks: list[str] = []
    for rel in files if files is not None else changed_files(template, workspace):
        old_p, new_p = template / rel, workspace / rel
        old = old_p.read_bytes() if old_p.is_file() else b""
        new = new_p.read_bytes() if new_p.is_file() and not new_p.is_symlink() else b""
        if b"\x00" in old[:_BINARY_SNIFF] or b"\x00" in new[:_BINARY_SNIFF]:
            chunks.append(f"Binary files a/{rel} and b/{rel} differ\n")
            continue
        chunks.extend(
            difflib.unified_diff(
                old.decode("utf-8", "replace").splitlines(keepends=True),
                new.decode("utf-8", "replace").splitlines(keepends=True),
                fromfile=f"a/{rel}" if old_p.exists() else "/dev/null",
                tofile=f"b/{rel}" if new_p.exists() else "/dev/null",
            )
        )
    text = "".join(chunks)
    return text if not text or text.endswith("\n") else text + "\n"


def extract_body(paper: Paper, snippet: Snippet, edited_text: str) -> tuple[str, bool]:
    """The candidate body in the agent's edited copy of ``snippet.file`` (the task source
    decides how), and whether the file also changed outside the region."""
    return source_for(paper).extract_body(paper, snippet, edited_text)


def extract_region(masked_text: str, placeholder: list[str], edited_text: str) -> tuple[str, bool]:
    """What now stands where the ``placeholder`` lines stood in ``masked_text``.

    Lines are aligned with difflib; the body is everything between the last unchanged line before
    the placeholder and the first unchanged line after it. Returns the body and whether the file
    was also changed outside that region (such edits are ignored for grading).

    Raises:
        ValueError: ``masked_text`` does not contain the placeholder lines.
    """
    masked = ann.split_lines(masked_text)
    want = [line.rstrip("\r\n") for line in placeholder]
    n = len(want)
    start = next(
        (
            i
            for i in range(len(masked) - n + 1)
            if [line.rstrip("\r\n") for line in masked[i : i + n]] == want
        ),
        None,
    )
    if start is None or n == 0:
        raise ValueError("the masked text has no placeholder block")
    return extract_span(masked_text, start, start + n, edited_text)


def extract_span(masked_text: str, start: int, end: int, edited_text: str) -> tuple[str, bool]:
    """What now stands where lines ``start:end`` (0-based, end exclusive; may be empty) stood in
    ``masked_text``; see :func:`extract_region`."""
    masked = ann.split_lines(masked_text)
    edited = ann.split_lines(edited_text)
    n = end - start
    mapping: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, masked, edited, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            mapping[block.a + k] = block.b + k
    before = [i for i in range(start) if i in mapping]
    after = [i for i in range(end, len(masked)) if i in mapping]
    lo = mapping[before[-1]] + 1 if before else 0
    hi = mapping[after[0]] if after else len(edited)
    hi = max(hi, lo)
    body = "".join(edited[lo:hi])
    # Untouched context maps line for line; a changed, deleted or added line outside the region
    # breaks either count.
    context = len(masked) - n
    outside = len(before) + len(after) != context or len(edited) - (hi - lo) != context
    return body, outside
