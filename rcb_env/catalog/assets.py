"""Pinned files a task's test would download (model weights, tokenizers): declared in an
overlay, fetched once on a machine with network access, verified, and read by the offline
sandboxes from a read-only folder.

Two kinds: a URL pinned by SHA-256, and files of a model hub repository pinned by an
immutable revision (a hub commit id), downloaded with the hub's own client library
(``huggingface_hub``) into the cache layout the test's code reads. Where the overlay cannot
know the pin, ``setup --assets --pin`` resolves it on the first fetch and records the revision
and every file's SHA-256 in ``$RCB_ENV_HOME/assets/pins.json``; later fetches verify against
that record."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import model_validator

from rcb_env import config
from rcb_env.errors import SandboxError
from rcb_env.frozen import Frozen

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
HUB_CACHE = "hf/hub"


class AssetError(SandboxError):
    """An asset could not be fetched, is not pinned, or its hash is not the pinned one."""


class Asset(Frozen):
    """A file (``url``) or files of a model hub repository (``hub`` + ``files``) a paper's
    tests need at run time that the sandboxes cannot download (no network)."""

    url: str | None = None
    """Where to get it (http, https or file)."""
    sha256: str | None = None
    """``url``: its SHA-256 (a mismatch installs nothing); None: recorded by ``--pin``."""
    path: str = ""
    """``url``: where it goes inside the paper's asset folder; ``hub``: the hub cache folder
    there (default ``hf/hub``, what ``HF_HOME={assets}/hf`` reads)."""
    hub: str | None = None
    """A model hub repository id (``bert-base-uncased``, ``timm/vit_giant...``)."""
    files: tuple[str, ...] = ()
    """``hub``: the repository's files the test loads; ``a|b``: the first of these the
    repository has (weights as safetensors or as a pickle), ``name?``: only if it has it."""
    repo_type: Literal["model", "dataset"] = "model"
    revision: str | None = None
    """``hub``: the commit id (40 hex); None: resolved from ``main`` and recorded by ``--pin``."""
    size: int | None = None
    """Bytes, where known (shown by ``tasks --needs``)."""

    @model_validator(mode="after")
    def _one_kind(self) -> Asset:
        if (self.url is None) == (self.hub is None):
            raise ValueError("an asset is either a url or a hub repository")
        if self.url is not None and not self.path:
            raise ValueError(f"{self.url}: a url asset needs its path")
        if self.hub is not None and not self.files:
            raise ValueError(f"{self.hub}: a hub asset needs its files")
        if self.sha256 is not None and not _SHA256.match(self.sha256):
            raise ValueError(f"sha256 {self.sha256!r} is not 64 hex digits")
        if self.revision is not None and not _COMMIT.match(self.revision):
            raise ValueError(
                f"revision {self.revision!r} is not a commit id (a branch or tag can move)"
            )
        return self

    @property
    def key(self) -> str:
        """Its identity in the pin record."""
        if self.hub is not None:
            return f"hub:{self.repo_type}:{self.hub}"
        return f"url:{self.url}"

    @property
    def folder(self) -> str:
        return self.path or HUB_CACHE

    @property
    def label(self) -> str:
        """Short: the repository and how many files, or the URL; the size where known."""
        size = f", {human(self.size)}" if self.size else ""
        if self.hub is not None:
            n = len(self.files)
            return f"{self.hub} ({n} file{'s' if n != 1 else ''}{size})"
        return f"{self.url}{f' ({human(self.size)})' if self.size else ''}"


def human(n: int) -> str:
    """Bytes for people: B, KiB, MiB or GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class Pin(NamedTuple):
    revision: str | None
    files: dict[str, str]
    """File name -> SHA-256."""


def pins_path() -> Path:
    return config.rcb_home() / "assets" / "pins.json"


def read_pins() -> dict[str, Pin]:
    try:
        data = json.loads(pins_path().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise AssetError(f"{pins_path()}: unreadable pin record: {exc}") from exc
    return {k: Pin(v.get("revision"), dict(v.get("files", {}))) for k, v in data.items()}


def record_pin(asset: Asset, pin: Pin) -> None:
    """Add ``asset``'s pin to the record (atomically)."""
    path = pins_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    pins = read_pins()
    pins[asset.key] = pin
    data = {k: {"revision": p.revision, "files": p.files} for k, p in sorted(pins.items())}
    fd, tmp = tempfile.mkstemp(prefix=".pins-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def pinned(asset: Asset) -> Pin | None:
    """The pin to verify ``asset`` against: the overlay's, else the record's; None: not pinned."""
    record = read_pins().get(asset.key)
    if asset.hub is not None:
        if record is not None and (asset.revision is None or record.revision == asset.revision):
            return record
        return Pin(asset.revision, {}) if asset.revision else None
    if asset.sha256:
        return Pin(None, {Path(asset.folder).name: asset.sha256})
    return record


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _check(asset: Asset, name: str, got: str, pin: Pin | None, owner: str) -> None:
    want = pin.files.get(name) if pin is not None else None
    if want is not None and got != want:
        raise AssetError(
            f"{owner}: {asset.label}: {name} has SHA-256 {got[:16]}..., not the pinned "
            f"{want[:16]}...; nothing was installed"
        )


def _fetch_url(asset: Asset, staging: Path, owner: str, log: Callable[[str], None]) -> str:
    target = staging / asset.folder
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"{owner}: fetching {asset.url}")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(str(asset.url), timeout=60) as r, target.open("wb") as f:
            while chunk := r.read(1 << 20):
                digest.update(chunk)
                f.write(chunk)
    except OSError as exc:
        raise AssetError(f"{owner}: cannot fetch {asset.url}: {exc}") from exc
    return digest.hexdigest()


def _fetch_hub(
    asset: Asset,
    staging: Path,
    revision: str,
    endpoint: str | None,
    owner: str,
    log: Callable[[str], None],
) -> tuple[str, dict[str, str]]:
    """Download the files with the hub's client into the cache layout; returns the commit the
    revision resolved to and every file's SHA-256."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError
    except ImportError as exc:
        raise AssetError(
            f"{owner}: fetching {asset.hub} needs huggingface_hub (pip install 'rcb-env[hub]')"
        ) from exc
    cache = staging / asset.folder
    hashes: dict[str, str] = {}
    commit = revision
    for entry in asset.files:
        optional = entry.endswith("?")
        choices = entry.removesuffix("?").split("|")
        for name in choices:
            log(f"{owner}: fetching {asset.hub}/{name} at {commit[:12]}")
            try:
                got = Path(
                    str(
                        hf_hub_download(
                            asset.hub or "",
                            name,
                            repo_type=asset.repo_type,
                            revision=commit,
                            cache_dir=cache,
                            endpoint=endpoint,
                        )
                    )
                )
            except EntryNotFoundError:
                continue  # the next choice
            except Exception as exc:  # the client's errors have no common base of their own
                raise AssetError(f"{owner}: cannot fetch {asset.hub}/{name}: {exc}") from exc
            # <cache>/<repo folder>/snapshots/<commit>/<file>: the commit the revision named
            snapshot = got.parents[len(Path(name).parts) - 1]
            commit = snapshot.name
            hashes[name] = _sha256(got)
            # the test's code asks for the default branch: offline, the client finds the
            # snapshot through refs/main (written by the client only when it resolved "main")
            refs = snapshot.parent.parent / "refs"
            refs.mkdir(exist_ok=True)
            (refs / "main").write_text(commit)
            break
        else:
            if not optional:
                raise AssetError(
                    f"{owner}: {asset.hub} has no file {' or '.join(choices)} at {commit[:12]}"
                )
    return commit, hashes


def fetch(
    asset: Asset,
    staging: Path,
    *,
    pin: bool = False,
    hub_endpoint: str | None = None,
    owner: str = "",
    log: Callable[[str], None] = lambda _l: None,
) -> None:
    """Fetch ``asset`` into ``staging`` and verify it against its pin; with ``pin``, an asset
    the overlay does not pin and the record does not know is resolved and recorded.

    Raises:
        AssetError: not pinned (without ``pin``), a download failed, or a hash or revision
            differs from the pin.
    """
    known = pinned(asset)
    if known is None and not pin:
        raise AssetError(
            f"{owner}: {asset.label} is not pinned (no "
            f"{'revision' if asset.hub else 'sha256'} in the overlay, none recorded): run "
            "`rcb-env setup --assets --pin` to resolve and record it on this fetch"
        )
    if asset.url is not None:
        name = Path(asset.folder).name
        got = _fetch_url(asset, staging, owner, log)
        _check(asset, name, got, known, owner)
        if known is None or name not in known.files:
            record_pin(asset, Pin(None, {name: got}))
        return
    revision = (known.revision if known is not None else None) or "main"
    commit, hashes = _fetch_hub(asset, staging, revision, hub_endpoint, owner, log)
    if known is not None and known.revision and commit != known.revision:
        raise AssetError(
            f"{owner}: {asset.hub} resolved to {commit[:12]}, not the pinned "
            f"{known.revision[:12]}; nothing was installed"
        )
    for name, got in hashes.items():
        _check(asset, name, got, known, owner)
    lost = sorted(set(known.files) - set(hashes)) if known is not None else []
    if lost:
        raise AssetError(
            f"{owner}: {asset.hub} at {commit[:12]} no longer gives the recorded "
            f"{', '.join(lost)}; nothing was installed"
        )
    if known is None or set(hashes) - set(known.files):
        record_pin(asset, Pin(commit, {**(known.files if known else {}), **hashes}))
        log(f"{owner}: recorded {asset.hub} at {commit[:12]} ({len(hashes)} files)")
