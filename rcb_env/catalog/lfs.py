"""Git LFS objects: the pointers a tree holds, fetched through the Git LFS batch API of the
repository's host (or a mirror), verified against the pointer (SHA-256 and size) and cached by
oid under the rcb-env home. Nothing that did not verify is ever installed."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from rcb_env import config
from rcb_env.errors import RcbError

HEAD = b"version https://git-lfs.github.com/spec/v1"
#: A pointer file is small text; anything larger is content.
POINTER_MAX = 1024
_MEDIA = "application/vnd.git-lfs+json"
_OID = re.compile(r"^oid sha256:([0-9a-f]{64})$", re.M)
_SIZE = re.compile(r"^size (\d+)$", re.M)
#: Objects per batch request (the reference server's limit is 100).
_BATCH = 100


class LfsError(RcbError):
    """An LFS object could not be fetched, or what was fetched is not what its pointer names."""


class Pointer(NamedTuple):
    oid: str
    """SHA-256 of the content (hex)."""
    size: int
    """Its size in bytes."""


def parse_pointer(data: bytes) -> Pointer | None:
    """The object a Git LFS pointer file names, or None if ``data`` is not a pointer."""
    if len(data) > POINTER_MAX or not data.startswith(HEAD):
        return None
    text = data.decode("utf-8", errors="replace")
    oid, size = _OID.search(text), _SIZE.search(text)
    if oid is None or size is None:
        return None
    return Pointer(oid.group(1), int(size.group(1)))


def read_pointer(path: Path) -> Pointer | None:
    """The pointer in file ``path`` (None: not a pointer, or unreadable)."""
    try:
        if path.is_symlink() or path.stat().st_size > POINTER_MAX:
            return None
        return parse_pointer(path.read_bytes())
    except OSError:
        return None


def cache_dir() -> Path:
    return config.rcb_home() / "cache" / "lfs"


def cached(oid: str) -> Path:
    """Where the verified object ``oid`` lives in the cache (Git LFS's own layout)."""
    return cache_dir() / oid[:2] / oid[2:4] / oid


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    try:
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Accept": _MEDIA, "Content-Type": _MEDIA},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as exc:
        raise LfsError(f"LFS batch request to {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except (OSError, ValueError) as exc:
        raise LfsError(f"LFS batch request to {url} failed: {exc}") from exc
    if not isinstance(answer, dict):
        raise LfsError(f"LFS batch answer from {url} is not a JSON object")
    return answer


def _download(href: str, headers: dict[str, str], pointer: Pointer, name: str) -> None:
    """Download one object to the cache, verified; ``name`` is a file that uses it (for errors)."""
    target = cached(pointer.oid)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    got = 0
    fd, tmp = tempfile.mkstemp(prefix=".part-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                request = urllib.request.Request(href, headers=headers)
                with urllib.request.urlopen(request, timeout=60) as response:
                    while chunk := response.read(1 << 20):
                        got += len(chunk)
                        if got > pointer.size:
                            break
                        digest.update(chunk)
                        out.write(chunk)
            except OSError as exc:
                raise LfsError(f"{name}: cannot download LFS object {pointer.oid}: {exc}") from exc
        if got != pointer.size or digest.hexdigest() != pointer.oid:
            raise LfsError(
                f"{name}: the LFS object served for it is not the one its pointer names "
                f"(pointer: sha256 {pointer.oid[:16]}..., {pointer.size} bytes; served: "
                f"{'more than ' if got > pointer.size else ''}{got} bytes"
                + (f", sha256 {digest.hexdigest()[:16]}..." if got <= pointer.size else "")
                + "); nothing was installed"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fetch_objects(
    wanted: Iterable[tuple[str, Pointer]],
    endpoint: str,
    log: Callable[[str], None] = lambda _l: None,
) -> int:
    """Fetch into the cache every object of ``wanted`` (``(file, pointer)`` pairs) not there
    yet, through ``endpoint``'s batch API. Returns the bytes downloaded.

    Raises:
        LfsError: the server refused an object, or a download does not match its pointer
            (names the file).
    """
    names: dict[Pointer, str] = {}
    for name, pointer in wanted:
        if not cached(pointer.oid).is_file():
            names.setdefault(pointer, name)
    todo = sorted(names, key=lambda p: p.oid)
    if not todo:
        return 0
    log(f"LFS: {len(todo)} objects, {sum(p.size for p in todo) / 2**20:.1f} MiB from {endpoint}")
    url = endpoint.rstrip("/") + "/objects/batch"
    total = 0
    for start in range(0, len(todo), _BATCH):
        chunk = todo[start : start + _BATCH]
        answer = _post(
            url,
            {
                "operation": "download",
                "transfers": ["basic"],
                "objects": [{"oid": p.oid, "size": p.size} for p in chunk],
                "hash_algo": "sha256",
            },
        )
        listed = answer.get("objects")
        by_oid = {
            str(o.get("oid")): o
            for o in (listed if isinstance(listed, list) else [])
            if isinstance(o, dict)
        }
        for pointer in chunk:
            name = names[pointer]
            obj = by_oid.get(pointer.oid)
            if obj is None:
                raise LfsError(f"{name}: {endpoint} did not answer for LFS object {pointer.oid}")
            error = obj.get("error")
            if isinstance(error, dict):
                raise LfsError(
                    f"{name}: {endpoint} refused LFS object {pointer.oid}: "
                    f"{error.get('code')} {error.get('message')}"
                )
            actions = obj.get("actions")
            download = actions.get("download") if isinstance(actions, dict) else None
            if not isinstance(download, dict) or not isinstance(download.get("href"), str):
                if cached(pointer.oid).is_file():
                    continue
                raise LfsError(f"{name}: {endpoint} gave no download for LFS object {pointer.oid}")
            if not download["href"].startswith(("https://", "http://")):
                raise LfsError(f"{name}: {endpoint} gave a download that is not http(s)")
            header = download.get("header")
            headers = (
                {str(k): str(v) for k, v in header.items()} if isinstance(header, dict) else {}
            )
            _download(download["href"], headers, pointer, name)
            total += pointer.size
    return total


def install(path: Path, pointer: Pointer) -> None:
    """Replace the pointer file ``path`` by its verified, cached content (atomically)."""
    fd, tmp = tempfile.mkstemp(prefix=".lfs-", dir=path.parent)
    os.close(fd)
    try:
        shutil.copyfile(cached(pointer.oid), tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
