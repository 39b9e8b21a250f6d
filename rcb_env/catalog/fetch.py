"""Getting a named benchmark onto this machine: from its repository (git, at the pinned commit),
an archive (``.tar.gz``/``.tgz``/``.zip``, local or over HTTP(S)), or a local folder (the
repository or the task folder itself); the task folder is verified against the pinned tree hash
and installed atomically under the rcb-env home. A mismatch installs nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from rcb_env.catalog import Benchmark
from rcb_env.errors import ConfigError, RcbError

VERIFIED = ".rcb-verified"
_ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")


class FetchError(RcbError):
    """The benchmark could not be fetched or did not verify."""


def tree_hash(root: Path) -> str:
    """SHA-256 over every regular file under ``root``: sorted relative POSIX paths, each with the
    SHA-256 of its bytes. Symlinks are refused (a published tree has none)."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if rel == VERIFIED:
                continue
            if path.is_symlink():
                raise FetchError(f"{rel}: a symbolic link in a benchmark tree")
            entries.append((rel, hashlib.sha256(path.read_bytes()).hexdigest()))
    h = hashlib.sha256()
    for rel, digest in sorted(entries):
        h.update(f"{rel}\0{digest}\n".encode())
    return h.hexdigest()


#: What a ``verify="git"`` copy lacks, one line each in the verified marker after the hashes.
MISSING = "missing"
SUBMODULE = "submodule"


def listing_hash(entries: list[tuple[str, str, str, str]]) -> str:
    """SHA-256 over git's listing of a folder: sorted ``(path, mode, type, object id)``, paths
    relative to the folder. Pins the content without needing it: every file's object id is the
    SHA-1 of its bytes, checked when the file is extracted."""
    h = hashlib.sha256()
    for path, mode, kind, oid in sorted(entries):
        h.update(f"{path}\0{mode}\0{kind}\0{oid}\n".encode())
    return h.hexdigest()


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _is_git_dir(path: Path) -> bool:
    """A repository (work tree with ``.git``) or a bare one (``HEAD`` and ``objects/``)."""
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def _listing(gitdir: Path, commit: str, folder: str) -> list[tuple[str, str, str, str]]:
    """git's listing of ``folder`` at ``commit``: (path relative to folder, mode, type, id)."""
    spec = ["--", folder] if folder else []
    run = subprocess.run(
        ["git", "-C", str(gitdir), "ls-tree", "-r", "-z", "--full-tree", commit, *spec],
        capture_output=True,
        check=False,
    )
    if run.returncode != 0:
        raise FetchError(
            f"{gitdir}: cannot list {folder}/ at {commit[:12]} (is the commit there?): "
            f"{run.stderr.decode(errors='replace').strip()[-400:]}"
        )
    entries = []
    prefix = folder.rstrip("/") + "/" if folder else ""
    for record in run.stdout.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, kind, oid = meta.decode().split()
        rel = path.decode("utf-8", "surrogateescape")
        entries.append((rel.removeprefix(prefix), mode, kind, oid))
    if not entries:
        raise FetchError(f"{gitdir}: no {folder or 'file'}/ folder at {commit[:12]}")
    return entries


def _git_extract(
    gitdir: Path, commit: str, folder: str, dest: Path, log: Callable[[str], None]
) -> tuple[str, list[str], list[tuple[str, str]]]:
    """Write ``folder`` at ``commit`` from ``gitdir``'s object store into ``dest``: every file
    whose object is there (checked against its id), an empty folder per submodule link.
    Returns the listing hash, the files the store lacks and the submodule folders with the
    commit each records."""
    entries = _listing(gitdir, commit, folder)
    missing: list[str] = []
    submodules: list[tuple[str, str]] = []
    blobs = [(rel, mode, oid) for rel, mode, kind, oid in entries if kind == "blob"]
    for rel, _mode, kind, oid in entries:
        if kind == "commit":
            submodules.append((rel, oid))
            (dest / rel).mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        ["git", "-C", str(gitdir), "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        for rel, mode, oid in blobs:
            if ".." in Path(rel).parts or rel.startswith("/"):
                raise FetchError(f"unsafe path in the repository: {rel}")
            proc.stdin.write(oid.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) < 3:  # "<id> missing"
                missing.append(rel)
                continue
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)  # the newline after the contents
            if mode == "120000":
                raise FetchError(f"{rel}: a symbolic link in a benchmark tree")
            if _blob_id(data) != oid:
                raise FetchError(f"{rel}: its bytes do not match git's object id {oid}")
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        proc.stdin.close()
    if missing:
        log(f"{len(missing)} files are not in this copy's object store (recorded as missing)")
    return listing_hash(entries), missing, submodules


def _is_archive(source: str) -> bool:
    return source.lower().split("?", 1)[0].endswith(_ARCHIVES)


def _download(url: str, dest: Path, log: Callable[[str], None]) -> Path:
    name = Path(urllib.parse.urlparse(url).path).name or "archive"
    target = dest / name
    log(f"downloading {url}")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, target.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except OSError as exc:
        raise FetchError(f"cannot download {url}: {exc}") from exc
    return target


def _extract(archive: Path, dest: Path) -> Path:
    dest.mkdir()
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                for member in z.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise FetchError(f"{archive.name}: unsafe member {member}")
                z.extractall(dest)
        else:
            with tarfile.open(archive) as t:
                t.extractall(dest, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"cannot unpack {archive.name}: {exc}") from exc
    return dest


def _git(*args: str, cwd: Path | None = None) -> None:
    run = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise FetchError(f"git {' '.join(args)}: {run.stderr.strip()[-800:]}")


def _clone(url: str, commit: str, dest: Path, log: Callable[[str], None]) -> Path:
    log(f"cloning {url} at {commit[:12]}")
    dest.mkdir()
    _git("init", "-q", str(dest))
    _git("fetch", "-q", "--depth", "1", url, commit, cwd=dest)
    _git("-c", "advice.detachedHead=false", "checkout", "-q", "FETCH_HEAD", cwd=dest)
    return dest


def _fetch_objects(url: str, commit: str, dest: Path, log: Callable[[str], None]) -> Path:
    """A bare repository holding ``commit`` from ``url`` (no work tree)."""
    log(f"fetching {url} at {commit[:12]}")
    _git("init", "-q", "--bare", str(dest))
    _git("fetch", "-q", "--depth", "1", url, commit, cwd=dest)
    return dest


def _fetch_git_verified(
    bench: Benchmark, where: str, work: Path, log: Callable[[str], None]
) -> tuple[Path, str]:
    """``verify="git"``: the folder extracted from a repository's objects, and the marker's
    extra lines (what the copy lacks)."""
    local = Path(where).expanduser()
    if local.is_dir() and _is_git_dir(local):
        gitdir = local
    elif "://" in where or where.endswith(".git"):
        gitdir = _fetch_objects(where, bench.commit, work / "repo.git", log)
    else:
        raise ConfigError(
            f"--from {where}: {bench.name} is verified through git's object ids, so its source "
            "must be a git repository (a URL, a clone or a bare mirror), not a folder or archive"
        )
    tree = work / "tree"
    tree.mkdir()
    got, missing, submodules = _git_extract(gitdir, bench.commit, bench.folder, tree, log)
    if got != bench.tree_hash:
        raise FetchError(
            f"{bench.name} from {where}: git's listing of {bench.folder}/ at "
            f"{bench.commit[:12]} hashes to {got[:16]}..., not the pinned "
            f"{bench.tree_hash[:16]}...; nothing was installed"
        )
    extra = "".join(f"{MISSING}\t{m}\n" for m in missing)
    extra += "".join(f"{SUBMODULE}\t{m}\t{oid}\n" for m, oid in submodules)
    return tree, extra


def verified_gaps(root: Path) -> tuple[set[str], set[str]]:
    """What an installed copy lacks (files not in its source's object store) and its empty
    submodule folders, relative to ``root``; empty sets for a complete copy or a plain folder."""
    missing: set[str] = set()
    submodules: set[str] = set()
    try:
        lines = (root / VERIFIED).read_text(encoding="utf-8").splitlines()
    except OSError:
        return missing, submodules
    for line in lines[2:]:
        kind, _, rest = line.partition("\t")
        rel = rest.split("\t", 1)[0]
        if kind == MISSING:
            missing.add(rel)
        elif kind == SUBMODULE:
            submodules.add(rel)
    return missing, submodules


def _find_folder(root: Path, folder: str) -> Path:
    """The task folder inside an unpacked repository (archives add a top-level folder)."""
    for candidate in (root / folder, *(d / folder for d in sorted(root.iterdir()) if d.is_dir())):
        if candidate.is_dir():
            return candidate
    if (root / "papers.yaml").is_file():
        return root  # the task folder itself
    raise FetchError(f"no {folder}/ folder in what was fetched")


def fetch(
    bench: Benchmark,
    source: str | None = None,
    *,
    force: bool = False,
    log: Callable[[str], None] = lambda _line: None,
) -> Path:
    """Install ``bench`` from ``source`` (default: its repository at the pinned commit) and
    return the verified local copy. An already verified copy is kept unless ``force``.

    Raises:
        FetchError: it could not be fetched, or its tree hash is not the pinned one.
    """
    dest = bench.local_path()
    if (dest / VERIFIED).is_file() and not force:
        log(f"{bench.name}: already here, verified ({dest})")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".rcb-fetch-", dir=dest.parent) as tmp:
        work = Path(tmp)
        where = source or bench.repository
        local = Path(where).expanduser()
        extra = ""
        if bench.verify == "git":
            tree, extra = _fetch_git_verified(bench, where, work, log)
        elif _is_archive(where):
            archive = local if local.is_file() else _download(where, work, log)
            tree = _find_folder(_extract(archive, work / "unpacked"), bench.folder)
        elif local.is_dir() and not _is_git_dir(local) and not local.name.endswith(".git"):
            tree = _find_folder(local, bench.folder)
        elif "://" in where or local.exists():
            tree = _find_folder(_clone(where, bench.commit, work / "repo", log), bench.folder)
        else:
            raise ConfigError(f"--from {where}: neither a folder, an archive nor a git URL")
        got = bench.tree_hash if bench.verify == "git" else tree_hash(tree)
        if got != bench.tree_hash:
            raise FetchError(
                f"{bench.name} from {where}: the task tree's hash is {got[:16]}..., not the "
                f"pinned {bench.tree_hash[:16]}... (commit {bench.commit[:12]}): a different "
                "version or a modified copy; nothing was installed"
            )
        results = _results_file(bench, tree.parent, log)
        staged = work / "staged"
        shutil.copytree(tree, staged, ignore=shutil.ignore_patterns(".git"))
        (staged / VERIFIED).write_text(f"{bench.commit}\n{bench.tree_hash}\n{extra}")
        for dirpath, dirnames, filenames in os.walk(staged):
            for n in dirnames:
                os.chmod(os.path.join(dirpath, n), 0o755)
            for n in filenames:
                os.chmod(os.path.join(dirpath, n), 0o644)
        if dest.exists():
            shutil.rmtree(dest)
        staged.rename(dest)
        if results is not None:
            shutil.copyfile(results, bench.results_path())
            bench.results_path().chmod(0o644)
            log(f"{bench.name}: the paper's results file verified, at {bench.results_path()}")
        elif bench.results is not None:
            bench.results_path().unlink(missing_ok=True)  # never an older copy's beside these
    log(f"{bench.name}: verified and installed at {dest}")
    return dest


def _results_file(bench: Benchmark, root: Path, log: Callable[[str], None]) -> Path | None:
    """The benchmark's results file in the fetched repository ``root`` (at its path there, or
    by its name at the top of a folder given), if its content is the pinned one."""
    if bench.results is None or bench.results_sha256 is None:
        return None
    for candidate in (root / bench.results, root / Path(bench.results).name):
        if candidate.is_file():
            digest = hashlib.sha256(candidate.read_bytes()).hexdigest()
            if digest == bench.results_sha256:
                return candidate
            log(f"{bench.name}: {candidate.name} is not the pinned results file; left out")
            return None
    return None
