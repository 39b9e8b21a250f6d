"""What a verified copy of a benchmark still lacks, and fetching it: the content of its Git LFS
pointers (through the LFS batch API, verified against each pointer) and its submodule links
(each at the commit the benchmark records, verified by git's object ids). ``rcb-env get`` runs
:func:`complete` after installing; :func:`needs` says per task what is still to fetch."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from rcb_env.catalog import Benchmark
from rcb_env.catalog import lfs as lfs_
from rcb_env.catalog.assets import human
from rcb_env.catalog.fetch import (
    MISSING,
    SUBMODULE,
    VERIFIED,
    FetchError,
    _fetch_objects,
    _git_extract,
    _is_git_dir,
)

#: Marker lines written once something is fetched (after the hashes; see :mod:`.fetch`).
LFS = "lfs"
SUBMODULE_FETCHED = "submodule-fetched"


class Submodule(NamedTuple):
    path: str
    """Relative to the task tree."""
    commit: str
    """The commit the benchmark records."""
    url: str | None
    """Where it is fetched from (None: not known)."""


class Needs(NamedTuple):
    """What one task folder of an installed copy still lacks."""

    lfs: tuple[tuple[str, lfs_.Pointer], ...]
    """Files that are still LFS pointers, with the object each names."""
    submodules: tuple[Submodule, ...]
    """Empty submodule links."""
    missing: tuple[str, ...]
    """Files the copy's source did not hold (a complete source has them)."""
    fetched_lfs: int
    """LFS objects already installed."""
    fetched_submodules: tuple[str, ...]
    """Submodules already fetched."""

    @property
    def lfs_bytes(self) -> int:
        return sum(p.size for p in {p for _r, p in self.lfs})


def _marker(root: Path) -> list[str]:
    try:
        return (root / VERIFIED).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise FetchError(f"{root} is not a verified copy (no {VERIFIED})") from exc


def _write_marker(root: Path, lines: list[str]) -> None:
    tmp = root / f"{VERIFIED}.tmp"
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    os.replace(tmp, root / VERIFIED)


def _records(lines: list[str]) -> list[list[str]]:
    return [line.split("\t") for line in lines[2:] if line]


def _pointers(root: Path, skip: set[str]) -> list[tuple[str, lfs_.Pointer]]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = sorted(
            d for d in dirnames if (f"{rel_dir}/{d}" if rel_dir != "." else d) not in skip
        )
        for name in filenames:
            rel = f"{rel_dir}/{name}" if rel_dir != "." else name
            pointer = lfs_.read_pointer(Path(dirpath) / name)
            if pointer is not None:
                found.append((rel, pointer))
    return sorted(found)


def _task(rel: str) -> str:
    return rel.split("/", 1)[0]


def needs(bench: Benchmark, root: Path, urls: Mapping[str, str] | None = None) -> dict[str, Needs]:
    """Per task folder (the first path component under the tree), what the installed copy at
    ``root`` still lacks; task folders that lack nothing are left out."""
    urls = {**bench.submodules, **(urls or {})}
    records = _records(_marker(root))
    subs = [
        Submodule(r[1], r[2] if len(r) > 2 else "", urls.get(r[1]))
        for r in records
        if r[0] == SUBMODULE
    ]
    fetched_subs = [r[1] for r in records if r[0] == SUBMODULE_FETCHED]
    missing = [r[1] for r in records if r[0] == MISSING]
    fetched_lfs = [r[1] for r in records if r[0] == LFS]
    pointers = _pointers(root, {s.path for s in subs} | set(fetched_subs))
    tasks = sorted(
        {_task(r) for r, _p in pointers}
        | {_task(s.path) for s in subs}
        | {_task(m) for m in missing}
        | {_task(f) for f in fetched_lfs}
        | {_task(f) for f in fetched_subs}
    )
    return {
        t: Needs(
            lfs=tuple((r, p) for r, p in pointers if _task(r) == t),
            submodules=tuple(s for s in subs if _task(s.path) == t),
            missing=tuple(m for m in missing if _task(m) == t),
            fetched_lfs=sum(1 for f in fetched_lfs if _task(f) == t),
            fetched_submodules=tuple(f for f in fetched_subs if _task(f) == t),
        )
        for t in tasks
    }


class Completed(NamedTuple):
    lfs_files: int
    """Pointer files replaced by their content now."""
    lfs_bytes: int
    """Bytes downloaded (objects already cached cost nothing)."""
    submodules: tuple[str, ...]
    """Submodules fetched now."""


def fetch_submodule(
    sub: Submodule, root: Path, log: Callable[[str], None] = lambda _l: None
) -> None:
    """Fill the empty link ``sub.path`` under ``root`` with its commit's tree from ``sub.url``
    (a git URL, a clone or a bare mirror), every file checked against git's object id.

    Raises:
        FetchError: no URL, the commit is not there, or an object does not verify.
    """
    if not sub.url:
        raise FetchError(f"{sub.path}: a submodule link with no known repository URL")
    if len(sub.commit) != 40:
        raise FetchError(
            f"{sub.path}: this copy does not record the submodule's commit (installed by an "
            "older rcb-env): run `rcb-env get` with --force"
        )
    target = root / sub.path
    with tempfile.TemporaryDirectory(prefix=".rcb-sub-", dir=target.parent) as tmp:
        work = Path(tmp)
        local = Path(sub.url).expanduser()
        if local.is_dir() and _is_git_dir(local):
            gitdir = local
        else:
            gitdir = _fetch_objects(sub.url, sub.commit, work / "repo.git", log)
        tree = work / "tree"
        tree.mkdir()
        _hash, lacking, _nested = _git_extract(gitdir, sub.commit, "", tree, log)
        if lacking:
            raise FetchError(
                f"{sub.path}: {sub.url} at {sub.commit[:12]} lacks {len(lacking)} files "
                f"({', '.join(lacking[:3])}); nothing was installed"
            )
        for dirpath, dirnames, filenames in os.walk(tree):
            for n in dirnames:
                os.chmod(os.path.join(dirpath, n), 0o755)
            for n in filenames:
                os.chmod(os.path.join(dirpath, n), 0o644)
        if target.exists():
            shutil.rmtree(target)
        tree.rename(target)


def complete(
    bench: Benchmark,
    root: Path,
    *,
    lfs_endpoint: str | None = None,
    urls: Mapping[str, str] | None = None,
    lfs: bool = True,
    log: Callable[[str], None] = lambda _l: None,
) -> Completed:
    """Fetch what the verified copy at ``root`` lacks that can be fetched: every submodule at
    its recorded commit, then every LFS pointer's object (through ``lfs_endpoint``, default
    the repository host's; ``lfs=False``: submodules only). Each step records itself in the
    copy's marker as it lands, so an interrupted run resumes.

    Raises:
        FetchError: a submodule could not be fetched or verified (after the other steps).
        rcb_env.catalog.lfs.LfsError: an LFS object could not be fetched, or does not match its
            pointer (names the file); that pointer stays as it was.
    """
    lines = _marker(root)
    todo = needs(bench, root, urls)
    fetched: list[str] = []
    failed: list[str] = []
    for need in todo.values():
        for sub in need.submodules:
            log(f"{sub.path}: fetching submodule {sub.url} at {sub.commit[:12]}")
            try:
                fetch_submodule(sub, root, log)
            except FetchError as exc:  # the others, and the LFS objects, still come
                failed.append(str(exc))
                continue
            lines = [
                f"{SUBMODULE_FETCHED}\t{sub.path}\t{sub.commit}"
                if line.split("\t")[:2] == [SUBMODULE, sub.path]
                else line
                for line in lines
            ]
            _write_marker(root, lines)
            fetched.append(sub.path)
    pointers = [(r, p) for need in todo.values() for r, p in need.lfs] if lfs else []
    endpoint = lfs_endpoint or bench.lfs_endpoint
    try:
        downloaded = lfs_.fetch_objects(pointers, endpoint, log) if pointers else 0
    except lfs_.LfsError as exc:
        if failed:  # say every failure, not only the last
            raise lfs_.LfsError("; ".join([str(exc), *failed])) from exc
        raise
    for rel, pointer in pointers:
        lfs_.install(root / rel, pointer)
        lines.append(f"{LFS}\t{rel}\t{pointer.oid}")
    if pointers:
        _write_marker(root, lines)
        log(f"{bench.name}: {len(pointers)} LFS files installed")
    if failed:
        raise FetchError("; ".join(failed))
    return Completed(len(pointers), downloaded, tuple(fetched))


def describe(todo: Mapping[str, Needs]) -> dict[str, tuple[tuple[str, ...], int, bool]]:
    """Per task: what ``get`` would fetch, in words; the LFS bytes; whether a submodule is
    among it (the shape :func:`rcb_env.task.environments.plan` takes)."""
    out: dict[str, tuple[tuple[str, ...], int, bool]] = {}
    for task, need in todo.items():
        lines = []
        if need.lfs:
            n = len(need.lfs)
            lines.append(f"{n} LFS file{'s' if n != 1 else ''} ({human(need.lfs_bytes)})")
        for sub in need.submodules:
            where = sub.url or "no known URL"
            lines.append(f"submodule {sub.path.split('/', 1)[-1]} at {sub.commit[:12]} ({where})")
        if need.missing:
            n = len(need.missing)
            lines.append(
                f"{n} file{'s' if n != 1 else ''} this copy's source lacked (get --force from "
                "the repository)"
            )
        out[task] = (tuple(lines), need.lfs_bytes, bool(need.submodules))
    return out
