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
        if _is_archive(where):
            archive = local if local.is_file() else _download(where, work, log)
            tree = _find_folder(_extract(archive, work / "unpacked"), bench.folder)
        elif local.is_dir() and not (local / ".git").exists() and not local.name.endswith(".git"):
            tree = _find_folder(local, bench.folder)
        elif "://" in where or local.exists():
            tree = _find_folder(_clone(where, bench.commit, work / "repo", log), bench.folder)
        else:
            raise ConfigError(f"--from {where}: neither a folder, an archive nor a git URL")
        got = tree_hash(tree)
        if got != bench.tree_hash:
            raise FetchError(
                f"{bench.name} from {where}: the task tree's hash is {got[:16]}..., not the "
                f"pinned {bench.tree_hash[:16]}... (commit {bench.commit[:12]}): a different "
                "version or a modified copy; nothing was installed"
            )
        staged = work / "staged"
        shutil.copytree(tree, staged, ignore=shutil.ignore_patterns(".git"))
        (staged / VERIFIED).write_text(f"{bench.commit}\n{bench.tree_hash}\n")
        for dirpath, dirnames, filenames in os.walk(staged):
            for n in dirnames:
                os.chmod(os.path.join(dirpath, n), 0o755)
            for n in filenames:
                os.chmod(os.path.join(dirpath, n), 0o644)
        if dest.exists():
            shutil.rmtree(dest)
        staged.rename(dest)
    log(f"{bench.name}: verified and installed at {dest}")
    return dest
