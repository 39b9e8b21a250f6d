"""Per-paper Docker images: the environment ``rcb-env setup`` builds for bwrap, in an image.

Two levels, so that papers share what they can:

- an **environment image** per requirement set (the overlay's ``environments:`` entry, or a
  paper's own requirements): the base image plus one venv at ``/opt/rcb-venv`` with the pinned
  requirements and rcb-env's stand-ins. Built in two stages: the wheels reach only the first
  stage, whose venv alone is copied into the second, so no wheel stays inside the image.
- a **paper image** per paper: ``FROM`` its environment image, with only the paper's labels (no
  layer of its own), so 18 papers of four environments hold four environments on disk.

Both are tagged by content: the base image's name, the requirement set, the stand-ins' code and
the Dockerfiles; the base image's id is recorded as a label, and an image built from another
base of the same name is rebuilt. Masking happens at reset: an image holds nothing of a task
(no test file, no reference copy, no answer).

Offline builds (``wheels``: a host folder) resolve the requirements on the host for the base
image's interpreter and C library (``pip download`` with the manylinux tags the base runs),
build packages published only as source into wheels on the host (``pip wheel``), and build
with ``--network=none`` from exactly that environment's wheels.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rcb_env import config as settings
from rcb_env.catalog import standins as standin_pkgs
from rcb_env.errors import ConfigError, SandboxError
from rcb_env.frozen import Frozen
from rcb_env.task.models import Paper

LABEL = "org.rcb-env.managed"
LABEL_PAPER = "org.rcb-env.paper"
LABEL_ENV = "org.rcb-env.environment"
LABEL_BASE = "org.rcb-env.base"
LABEL_BASE_ID = "org.rcb-env.base-id"
LABEL_STAGE = "org.rcb-env.stage"
REPOSITORY = "rcb-env/paper"
ENV_REPOSITORY = "rcb-env/env"
DEFAULT_BASE = settings.DEFAULT_DOCKER_BASE


def sandbox_root() -> Path:
    """``sandbox/`` with the image definitions (in the wheel, or the source checkout)."""
    here = Path(__file__).resolve().parents[3]
    for candidate in (here / "_sandbox", here.parent / "sandbox"):
        if (candidate / "Dockerfile.paper").is_file():
            return candidate
    raise SandboxError("the image definitions (sandbox/Dockerfile.paper) are not installed")


class ImageConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base: str = Field(default_factory=settings.docker_base)
    """Base image with python3 (and venv): ``RCB_DOCKER_BASE``, else the one remembered by
    ``images build --base``, else python:3.11-slim."""
    wheels: Path | None = None
    """Build offline: resolve on the host into this folder (one subfolder per environment) and
    build with ``--network=none``; None: pip installs from the index inside the build."""


class Recipe(Frozen):
    """What an environment image holds."""

    name: str
    """The overlay's environment name, or ``requirements`` for a paper's own requirements."""
    requirements: tuple[str, ...]
    standins: tuple[str, ...] = ()


def requirements(paper: Paper) -> list[str]:
    """The overlay's ``requirements``, else the paper's requirements.txt, else the default."""
    if paper.overlay.requirements:
        return list(paper.overlay.requirements)
    own = paper.root / "requirements.txt"
    source = own if own.is_file() else sandbox_root() / "requirements" / "default.txt"
    lines = [ln.split("#", 1)[0].strip() for ln in source.read_text().splitlines()]
    return [ln for ln in lines if ln]


def recipe(paper: Paper) -> Recipe:
    """The environment ``paper`` runs in (the same requirement set and stand-ins as setup's)."""
    # Papers with the same requirements of their own share one image too (the tag is by content).
    name = paper.overlay.environment or "requirements"
    return Recipe(
        name=_docker_name(name),
        requirements=tuple(requirements(paper)),
        standins=paper.overlay.standins,
    )


def _docker_name(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.") or "env"


def _hash(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
        h.update(b"\0")
    return h.hexdigest()[:12]


def _standin_bytes(names: Iterable[str]) -> bytes:
    out = b""
    for name in sorted(names):
        root = standin_pkgs.path(name)
        for f in sorted(root.rglob("*.py")):
            out += f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes()
    return out


def env_tag(rec: Recipe, cfg: ImageConfig) -> str:
    """The environment image's tag: a hash of the base, the requirements, the stand-ins and
    the Dockerfile."""
    digest = _hash(
        cfg.base.encode(),
        "\n".join(rec.requirements).encode(),
        _standin_bytes(rec.standins),
        (sandbox_root() / "Dockerfile.env").read_bytes(),
    )
    return f"{ENV_REPOSITORY}-{rec.name}:{digest}"


def image_tag(paper: Paper, cfg: ImageConfig) -> str:
    """The paper image's tag: a hash of its environment image's tag, the paper and the
    Dockerfile."""
    digest = _hash(
        env_tag(recipe(paper), cfg).encode(),
        paper.id.encode(),
        (sandbox_root() / "Dockerfile.paper").read_bytes(),
    )
    return f"{REPOSITORY}-{_docker_name(paper.slug)}:{digest}"


# -- the base image's platform ------------------------------------------------------------------


class Platform(Frozen):
    """What the base image runs: its interpreter and its C library."""

    python: str
    """``3.11``."""
    glibc: tuple[int, int]
    machine: str
    """``x86_64``, ``aarch64``."""

    def tags(self) -> list[str]:
        """pip's ``--platform`` values of every wheel this base runs: ``manylinux_2_5`` up to
        its glibc, the legacy aliases, and ``linux`` (wheels built on the host)."""
        major, minor = self.glibc
        tags = [f"manylinux_{major}_{m}_{self.machine}" for m in range(minor, 4, -1)]
        legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
        tags += [f"{name}_{self.machine}" for name, m in legacy.items() if m <= minor]
        return [*tags, f"linux_{self.machine}"]


_PROBE = (
    "import os, platform, sys; v = os.confstr('CS_GNU_LIBC_VERSION') or 'glibc 0.0'; "
    "print('%d.%d' % sys.version_info[:2], v.split()[1], platform.machine())"
)


def base_platform(client: Any, base: str) -> Platform:
    """Ask the base image itself (a throwaway container without network).

    Raises:
        ConfigError: the base image is not there, or has no python3.
    """
    import docker.errors

    try:
        raw = client.containers.run(
            base, ["python3", "-c", _PROBE], network_mode="none", remove=True
        )
    except docker.errors.ImageNotFound as exc:
        raise ConfigError(
            f"the base image {base} is not on this Docker engine: pull it, or build one with "
            "sandbox/build-base.sh, and pass it with --base"
        ) from exc
    except docker.errors.DockerException as exc:
        raise ConfigError(f"the base image {base} cannot run python3: {exc}") from exc
    python, glibc, machine = raw.decode().split()
    major, minor = (int(x) for x in glibc.split(".")[:2])
    return Platform(python=python, glibc=(major, minor), machine=machine)


# -- wheels on the host ---------------------------------------------------------------------------

_NO_DIST = re.compile(r"No matching distribution found for (\S+)")


def _pip(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def gather_wheels(
    reqs: Iterable[str],
    dest: Path,
    platform: Platform,
    *,
    log: Callable[[str], None] = lambda _l: None,
) -> list[Path]:
    """Every wheel that installs ``reqs`` on ``platform``, into ``dest``; returns them.

    ``pip download`` for the base image's interpreter and tags; a requirement without a wheel
    (a package published only as source) is built into one on the host with ``pip wheel`` and
    the download is tried again.

    Raises:
        SandboxError: pip could not resolve or build them (pip's message is in it).
    """
    dest.mkdir(parents=True, exist_ok=True)
    req_file = dest / "requirements.in"
    req_file.write_text("\n".join(reqs) + "\n")
    platform_args = [a for tag in platform.tags() for a in ("--platform", tag)]
    built: set[str] = set()
    while True:
        run = _pip(
            [
                "download",
                "--quiet",
                "--only-binary=:all:",
                "--python-version",
                platform.python,
                "--implementation",
                "cp",
                *platform_args,
                "--find-links",
                str(dest),
                "-d",
                str(dest),
                "-r",
                str(req_file),
            ]
        )
        if run.returncode == 0:
            return sorted(dest.glob("*.whl"))
        missing = _NO_DIST.search(run.stderr)
        if missing is None or missing.group(1) in built:
            raise SandboxError(f"pip download failed: {run.stderr.strip()[-1500:]}")
        source_only = missing.group(1)
        built.add(source_only)
        log(f"{source_only}: no wheel for {platform.python}/{platform.machine}; building one")
        wheel = _pip(["wheel", "--quiet", "--no-deps", "-w", str(dest), source_only])
        if wheel.returncode != 0:
            raise SandboxError(f"pip wheel {source_only} failed: {wheel.stderr.strip()[-1500:]}")


# -- building -------------------------------------------------------------------------------------


def image_exists(client: Any, tag: str) -> bool:
    """Is the image ``tag`` (a tag, an id, or ``name@sha256:...``) on the engine? A reference
    the engine refuses as malformed is not there either."""
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.is_client_error():
            return False
        raise
    return True


def _image_id(client: Any, ref: str) -> str | None:
    import docker.errors

    try:
        return str(client.images.get(ref).id)
    except docker.errors.ImageNotFound:
        return None


def _current(client: Any, tag: str, base_id: str | None) -> bool:
    """Is ``tag`` there, built from the base image as it is now?"""
    import docker.errors

    try:
        labels = client.images.get(tag).labels or {}
    except docker.errors.ImageNotFound:
        return False
    return base_id is None or labels.get(LABEL_BASE_ID) == base_id


def _run_build(
    client: Any,
    ctx: Path,
    tag: str,
    *,
    buildargs: dict[str, str],
    labels: dict[str, str],
    offline: bool,
    say: Callable[[str], None],
) -> None:
    import docker.errors

    lines: list[str] = []
    try:
        for chunk in client.api.build(
            path=str(ctx),
            tag=tag,
            buildargs=buildargs,
            network_mode="none" if offline else None,
            labels={LABEL: "1", **labels},
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "stream" in chunk and chunk["stream"].strip():
                lines.append(chunk["stream"].rstrip())
                say(chunk["stream"].rstrip())
            if "error" in chunk:
                tail = "\n".join(lines[-15:])
                raise SandboxError(f"building {tag} failed: {chunk['error']}\n{tail}")
    except docker.errors.DockerException as exc:
        raise SandboxError(f"building {tag} failed: {exc}") from exc


@contextlib.contextmanager
def _context(parent: Path | None) -> Iterator[Path]:
    """A build context folder (next to the wheels when there are some, so they hard-link)."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".context-", dir=parent) as tmp:
        yield Path(tmp)


def _place(src: Path, dst: Path) -> None:
    try:
        dst.hardlink_to(src)
    except OSError:
        shutil.copyfile(src, dst)


def build_env(
    client: Any,
    rec: Recipe,
    cfg: ImageConfig,
    *,
    platform: Platform | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, bool]:
    """Build the environment image unless a current one exists. Returns (tag, built).

    Raises:
        SandboxError: resolving its wheels or the build failed.
    """
    say = progress or (lambda _line: None)
    tag = env_tag(rec, cfg)
    base_id = _image_id(client, cfg.base)
    if _current(client, tag, base_id):
        return tag, False
    if base_id is None:
        raise ConfigError(
            f"the base image {cfg.base} is not on this Docker engine: pull it, or build one "
            "with sandbox/build-base.sh, and pass it with --base"
        )
    folder = None
    if cfg.wheels is not None:
        folder = cfg.wheels / tag.split("/", 1)[1].replace(":", "-")
    with _context(folder.parent if folder is not None else None) as ctx:
        shutil.copyfile(sandbox_root() / "Dockerfile.env", ctx / "Dockerfile")
        (ctx / "requirements.txt").write_text("\n".join(rec.requirements) + "\n")
        (ctx / "wheels").mkdir()
        (ctx / "standins").mkdir()
        for name in rec.standins:
            shutil.copytree(
                standin_pkgs.path(name),
                ctx / "standins" / name,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        buildargs = {"BASE": cfg.base}
        if folder is not None:
            plat = platform or base_platform(client, cfg.base)
            say(
                f"{rec.name}: resolving wheels for python {plat.python}, glibc "
                f"{plat.glibc[0]}.{plat.glibc[1]} into {folder}"
            )
            for whl in gather_wheels(rec.requirements, folder, plat, log=say):
                _place(whl, ctx / "wheels" / whl.name)
            buildargs["PIP_ARGS"] = "--no-index --find-links /rcb-build/wheels"
        say(f"{rec.name}: building {tag} from {cfg.base}")
        _run_build(
            client,
            ctx,
            tag,
            buildargs=buildargs,
            labels={LABEL_ENV: rec.name, LABEL_BASE: cfg.base, LABEL_BASE_ID: base_id},
            offline=folder is not None,
            say=lambda line: say(f"{rec.name}: {line}"),
        )
    return tag, True


def build(
    client: Any,
    paper: Paper,
    cfg: ImageConfig,
    *,
    platform: Platform | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, bool]:
    """Build the paper's image (and its environment image) unless a current one exists.
    Returns (tag, built).

    Raises:
        SandboxError: the build failed (its last log lines are in the message).
    """
    say = progress or (lambda _line: None)
    tag = image_tag(paper, cfg)
    env, env_built = build_env(client, recipe(paper), cfg, platform=platform, progress=say)
    env_id = _image_id(client, env)
    if not env_built and image_exists(client, tag):
        labels = client.images.get(tag).labels or {}
        if labels.get(LABEL_BASE_ID) == (client.images.get(env).labels or {}).get(LABEL_BASE_ID):
            say(f"{paper.id}: {tag} is up to date")
            return tag, False
    with _context(None) as ctx:
        shutil.copyfile(sandbox_root() / "Dockerfile.paper", ctx / "Dockerfile")
        env_labels = client.images.get(env).labels or {}
        _run_build(
            client,
            ctx,
            tag,
            buildargs={"ENV": env_id or env},
            labels={
                LABEL_PAPER: paper.id,
                LABEL_ENV: env,
                LABEL_BASE: cfg.base,
                LABEL_BASE_ID: env_labels.get(LABEL_BASE_ID, ""),
            },
            offline=True,
            say=lambda line: say(f"{paper.id}: {line}"),
        )
    return tag, True


def _label_problem(client: Any, paper: Paper, cfg: ImageConfig, tag: str) -> str | None:
    """Why the image under ``tag`` is not ``paper``'s image as ``cfg`` builds it on this engine,
    or None: ``tag`` is the paper's content tag, and the image there is one rcb-env built for
    this paper from the base image as the engine holds it now."""
    expected = image_tag(paper, cfg)
    if tag != expected:
        return f"the build gave {tag}, not the content tag {expected}"
    if not image_exists(client, tag):
        return f"{tag} is not on the engine after its build"
    labels = client.images.get(tag).labels or {}
    base_id = _image_id(client, cfg.base)
    if labels.get(LABEL) != "1" or labels.get(LABEL_PAPER) != paper.id:
        return f"{tag} is not rcb-env's image of {paper.id} (its labels: {labels})"
    if labels.get(LABEL_BASE_ID) != base_id:
        return f"{tag} was not built from the base image {cfg.base} as it is now ({base_id})"
    return None


def lock_path(tag: str) -> Path:
    """The file lock of ``tag``'s builds on this machine (under ``$RCB_ENV_HOME/locks``)."""
    return settings.rcb_home() / "locks" / f"image-{_hash(tag.encode())}.lock"


@contextlib.contextmanager
def _build_lock(tag: str) -> Iterator[None]:
    import fcntl

    path = lock_path(tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def ensure(
    client: Any,
    paper: Paper,
    cfg: ImageConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, bool]:
    """``paper``'s image on this engine: there already, or built here with ``cfg`` (this
    machine's base image and wheels folder) and checked by its content tag (the tag is the one
    the paper's content gives, the image is labelled as this paper's, from the engine's base
    image). One build per tag at a time on the machine: a file lock (:func:`lock_path`) makes
    jobs that need the same image wait for the first one's build and then use it. Returns
    (tag, built here).

    Raises:
        SandboxError: the image is not there and cannot be built here (no base image, pip
            could not resolve the requirements, the build failed: the reason is in it), or
            the built image fails the check.
    """
    tag = image_tag(paper, cfg)
    if image_exists(client, tag):
        return tag, False
    with _build_lock(tag):
        if image_exists(client, tag):  # built by another job while this one waited
            return tag, False
        try:
            built, _ = build(client, paper, cfg, progress=progress)
        except ConfigError as exc:  # the base image is not on the engine
            raise SandboxError(str(exc)) from exc
        problem = _label_problem(client, paper, cfg, built)
        if problem is not None:
            raise SandboxError(problem)
    return tag, True


class BuildResult(Frozen):
    """One paper's image build."""

    paper: str
    tag: str
    ok: bool
    built: bool = False
    """Built now (False: it was up to date, or failed)."""
    seconds: float = 0.0
    size: int = 0
    """The image's size in bytes (its environment's layers included)."""
    error: str = ""


def build_all(
    client: Any,
    papers: Iterable[Paper],
    cfg: ImageConfig,
    *,
    progress: Callable[[str], None] | None = None,
    on_done: Callable[[BuildResult], None] | None = None,
) -> list[BuildResult]:
    """Build every paper's image; a paper whose build fails is reported with the reason and
    the others still build (papers of a failed environment fail at once, with its error)."""
    papers = list(papers)
    plat = base_platform(client, cfg.base) if cfg.wheels is not None and papers else None
    failed_env: dict[str, str] = {}
    results: list[BuildResult] = []
    for paper in papers:
        tag = image_tag(paper, cfg)
        env = env_tag(recipe(paper), cfg)
        t0 = time.monotonic()
        if env in failed_env:
            result = BuildResult(paper=paper.id, tag=tag, ok=False, error=failed_env[env])
        else:
            try:
                tag, built = build(client, paper, cfg, platform=plat, progress=progress)
                result = BuildResult(
                    paper=paper.id,
                    tag=tag,
                    ok=True,
                    built=built,
                    seconds=round(time.monotonic() - t0, 1),
                    size=int(client.images.get(tag).attrs.get("Size", 0)),
                )
            except SandboxError as exc:
                if not image_exists(client, env):
                    failed_env[env] = str(exc)
                result = BuildResult(
                    paper=paper.id,
                    tag=tag,
                    ok=False,
                    seconds=round(time.monotonic() - t0, 1),
                    error=str(exc),
                )
        results.append(result)
        if on_done is not None:
            on_done(result)
    return results


# -- listing, moving, removing --------------------------------------------------------------------


class ImageInfo(Frozen):
    tag: str
    id: str
    paper: str
    """The paper (empty for an environment image)."""
    environment: str
    size: int
    shared: int
    """Bytes shared with other images (layers of the same environment or base)."""
    created: str


def _ours(tag: str) -> bool:
    """A tag of an image rcb-env built (an image built FROM one inherits its labels)."""
    return tag.startswith((f"{REPOSITORY}-", f"{ENV_REPOSITORY}-"))


def list_images(client: Any) -> list[ImageInfo]:
    """rcb-env's images on the engine, with their sizes."""
    shared: dict[str, int] = {}
    with contextlib.suppress(Exception):
        for entry in client.df().get("Images") or []:
            shared[str(entry.get("Id"))] = int(entry.get("SharedSize") or 0)
    found: list[ImageInfo] = []
    for image in client.images.list(filters={"label": LABEL}):
        labels = image.labels or {}
        for tag in [t for t in image.tags if _ours(t)]:
            found.append(
                ImageInfo(
                    tag=tag,
                    id=str(image.id),
                    paper=labels.get(LABEL_PAPER, ""),
                    environment=labels.get(LABEL_ENV, ""),
                    size=int(image.attrs.get("Size", 0)),
                    shared=max(0, shared.get(str(image.id), 0)),
                    created=str(image.attrs.get("Created", ""))[:19],
                )
            )
    return sorted(found, key=lambda i: (i.paper == "", i.environment, i.paper, i.tag))


def _archive_manifest(path: Path) -> dict[str, str]:
    """``tag -> image id`` as the archive (``docker save`` format) records it."""
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile("manifest.json")
            if member is None:
                raise SandboxError(f"{path} is not an image archive (no manifest.json)")
            manifest = json.load(member)
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise SandboxError(f"{path} is not an image archive: {exc}") from exc
    out: dict[str, str] = {}
    for entry in manifest:
        config_name = str(entry.get("Config", ""))
        image_id = "sha256:" + Path(config_name).name.removesuffix(".json")
        for tag in entry.get("RepoTags") or []:
            out[str(tag)] = image_id
    return out


def save(client: Any, tags: Iterable[str], path: Path) -> dict[str, str]:
    """Write the images (with their environment and base layers, once each) into one archive
    (``docker save``). Returns ``tag -> image id``.

    Raises:
        SandboxError: an image is not there, or the engine failed.
    """
    tags = sorted(set(tags))
    missing = [t for t in tags if not image_exists(client, t)]
    if missing:
        raise SandboxError(f"no such image: {', '.join(missing)} (rcb-env images build first)")
    if not tags:
        raise SandboxError("no image to save")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    # The CLI: the SDK's save takes one image, and several in one archive share their layers.
    run = subprocess.run(
        ["docker", "save", "-o", str(partial), *tags], capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        partial.unlink(missing_ok=True)
        raise SandboxError(f"docker save failed: {run.stderr.strip()[-1000:]}")
    partial.replace(path)
    return _archive_manifest(path)


def load(client: Any, path: Path, *, expect: Iterable[str] = ()) -> dict[str, str]:
    """Load an archive written by :func:`save`, and check it: each tag names the image its
    content has (the archive's own record and the engine's id after the load agree), and every
    tag in ``expect`` is in it. Returns ``tag -> image id``.

    Raises:
        SandboxError: the archive is not one, or a check failed (what was loaded is named).
    """
    import docker.errors

    recorded = _archive_manifest(path)
    wanted = set(expect) - set(recorded)
    if wanted:
        raise SandboxError(f"{path} does not hold {', '.join(sorted(wanted))}")
    try:
        with path.open("rb") as f:
            client.api.load_image(f)
    except docker.errors.DockerException as exc:
        raise SandboxError(f"loading {path} failed: {exc}") from exc
    for tag, image_id in recorded.items():
        got = _image_id(client, tag)
        if got != image_id:
            raise SandboxError(f"{path}: {tag} loaded as {got}, but the archive records {image_id}")
        if tag.startswith((REPOSITORY, ENV_REPOSITORY)) and LABEL not in (
            client.images.get(tag).labels or {}
        ):
            raise SandboxError(f"{path}: {tag} is not an image rcb-env built")
    return recorded


def gc_images(client: Any, keep: set[str], papers: set[str] | None = None) -> list[str]:
    """Remove rcb-env images whose tag is not in ``keep`` (stale builds) among the images of
    ``papers`` (None: every paper), keeping every other paper's images (another benchmark's,
    built at another time), the environment images that a kept image is built on, and leftover
    build stages. Returns the removed tags."""
    import docker.errors

    removed: list[str] = []
    kept_envs: set[str] = set()
    images = client.images.list(filters={"label": LABEL})
    # Paper images first: an environment image cannot go while one is built on it.
    images.sort(key=lambda i: LABEL_PAPER not in (i.labels or {}))
    for image in images:
        labels = image.labels or {}
        tags = image.tags or [image.id]
        paper = labels.get(LABEL_PAPER)
        others = paper is not None and papers is not None and paper not in papers
        if (
            others
            or any(t in keep or not _ours(t) for t in image.tags)
            or (paper is None and any(t in kept_envs for t in image.tags))
        ):
            if paper is not None:  # a paper image names the environment image it is on
                kept_envs.add(labels.get(LABEL_ENV, ""))
            continue
        try:
            client.images.remove(image.id, force=True)
            removed.extend(tags)
        except docker.errors.DockerException:
            continue
    with contextlib.suppress(docker.errors.DockerException):
        client.images.prune(filters={"dangling": True, "label": LABEL_STAGE})
    return removed
