"""Packages an environment requires from a git repository at a commit
(``name @ git+URL@COMMIT``): fetched at exactly that commit, built into a wheel once (cached
by name, commit and interpreter), and installed from the wheel, so an environment whose
packages are not on the index (GMFlow's mmcv and mmgeneration forks) builds like any other."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from rcb_env import config
from rcb_env.errors import ConfigError, RcbError

_REQ = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*git\+(?P<rest>\S+)\s*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class GitPackageError(RcbError):
    """A git-pinned package could not be fetched or built."""


class GitRequirement(NamedTuple):
    name: str
    url: str
    commit: str


def parse(requirement: str) -> GitRequirement | None:
    """``name @ git+URL@COMMIT`` as its parts; None for any other requirement.

    Raises:
        ConfigError: a git requirement not pinned to a full commit id (a branch or tag moves).
    """
    m = _REQ.match(requirement)
    if m is None:
        return None
    url, _, rev = m.group("rest").rpartition("@")
    if not url or not _COMMIT.match(rev):
        raise ConfigError(
            f"{requirement!r}: a git requirement must name a full commit id "
            "(name @ git+URL@<40 hex>): a branch or tag can move"
        )
    return GitRequirement(m.group("name"), url, rev)


def is_git(requirement: str) -> bool:
    return _REQ.match(requirement) is not None


def _git(*args: str, cwd: Path | None = None) -> str:
    run = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise GitPackageError(f"git {' '.join(args)}: {run.stderr.strip()[-800:]}")
    return run.stdout.strip()


def wheel_dir(req: GitRequirement, python_version: str) -> Path:
    return (
        config.rcb_home()
        / "cache"
        / "git-wheels"
        / f"{req.name}-{req.commit[:12]}-py{python_version}"
    )


def build_wheel(
    req: GitRequirement,
    python: Path,
    python_version: str,
    log: Callable[[str], None] = lambda _l: None,
    *,
    isolation: bool = True,
) -> Path:
    """The wheel of ``req`` built by ``python`` from the pinned commit (cached). Without
    ``isolation`` the build backend must already be installed in ``python`` (no index needed).

    Raises:
        GitPackageError: the commit cannot be fetched, the checkout is not that commit, or the
            build fails (with the build's own error).
    """
    out = wheel_dir(req, python_version)
    found = sorted(out.glob("*.whl"))
    if found:
        return found[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{req.name}-", dir=out.parent) as tmp:
        src = Path(tmp) / "src"
        log(f"{req.name}: fetching {req.url} at {req.commit[:12]}")
        _git("init", "-q", str(src))
        _git("fetch", "-q", "--depth", "1", req.url, req.commit, cwd=src)
        _git("-c", "advice.detachedHead=false", "checkout", "-q", "FETCH_HEAD", cwd=src)
        head = _git("rev-parse", "HEAD", cwd=src)
        if head != req.commit:
            raise GitPackageError(f"{req.name}: {req.url} gave commit {head}, not {req.commit}")
        built = Path(tmp) / "wheel"
        log(f"{req.name}: building a wheel from {req.commit[:12]}")
        run = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                *(() if isolation else ("--no-build-isolation",)),
                "--wheel-dir",
                str(built),
                str(src),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        wheels = sorted(built.glob("*.whl"))
        if run.returncode != 0 or not wheels:
            raise GitPackageError(f"{req.name}: building its wheel failed: {run.stderr[-2000:]}")
        built.rename(out)
    return sorted(out.glob("*.whl"))[0]


def resolve(
    requirements: Iterable[str],
    python: Path,
    python_version: str,
    log: Callable[[str], None] = lambda _l: None,
    *,
    isolation: bool = True,
) -> list[str]:
    """``requirements`` with every git-pinned one replaced by its built wheel (``name @
    file://...``)."""
    resolved = []
    for requirement in requirements:
        req = parse(requirement)
        if req is None:
            resolved.append(requirement)
            continue
        wheel = build_wheel(req, python, python_version, log, isolation=isolation)
        resolved.append(f"{req.name} @ {wheel.resolve().as_uri()}")
    return resolved
