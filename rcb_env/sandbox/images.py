"""Per-paper Docker images: one per paper (masking happens at reset, so 20 images serve 212
snippets), tagged by a content hash so that an up-to-date image is never rebuilt."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rcb_env import config as settings
from rcb_env.errors import SandboxError
from rcb_env.task.models import Paper

LABEL = "org.rcb-env.managed"
LABEL_PAPER = "org.rcb-env.paper"
REPOSITORY = "rcb-env/paper"
DEFAULT_BASE = settings.DEFAULT_DOCKER_BASE


def sandbox_root() -> Path:
    """``sandbox/`` with the image definitions (in the wheel, or the source checkout)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_sandbox", here.parent / "sandbox"):
        if (candidate / "Dockerfile.paper").is_file():
            return candidate
    raise SandboxError("the image definitions (sandbox/Dockerfile.paper) are not installed")


class ImageConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base: str = Field(default_factory=settings.docker_base)
    """Base image with python3 (and venv). Default python:3.11-slim, or $RCB_DOCKER_BASE."""
    wheels: Path | None = None
    """Build offline from wheels in this folder (downloaded into it on the host first) with
    ``--network=none``; None: pip installs from the index inside the build."""


def requirements(paper: Paper) -> list[str]:
    """The overlay's ``requirements``, else the paper's requirements.txt, else the default."""
    if paper.overlay.requirements:
        return list(paper.overlay.requirements)
    own = paper.root / "requirements.txt"
    source = own if own.is_file() else sandbox_root() / "requirements" / "default.txt"
    lines = [ln.split("#", 1)[0].strip() for ln in source.read_text().splitlines()]
    return [ln for ln in lines if ln]


def image_tag(paper: Paper, cfg: ImageConfig) -> str:
    recipe = (sandbox_root() / "Dockerfile.paper").read_bytes()
    h = hashlib.sha256()
    for part in (cfg.base.encode(), "\n".join(requirements(paper)).encode(), recipe):
        h.update(part)
        h.update(b"\0")
    return f"{REPOSITORY}-{paper.slug.lower()}:{h.hexdigest()[:12]}"


def download_wheels(reqs: list[str], dest: Path) -> None:
    """``pip download`` the requirements (and their dependencies) as wheels for CPython 3.11."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(reqs) + "\n")
        req_file = f.name
    try:
        run = subprocess.run(
            [
                "python3" if shutil.which("python3") else "python",
                "-m",
                "pip",
                "download",
                "--quiet",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--platform",
                "manylinux2014_x86_64",
                "--platform",
                "manylinux_2_28_x86_64",
                "-d",
                str(dest),
                "-r",
                req_file,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(req_file)
    if run.returncode != 0:
        raise SandboxError(f"pip download failed: {run.stderr.strip()[-1000:]}")


def image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build(
    client: Any,
    paper: Paper,
    cfg: ImageConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, bool]:
    """Build the paper's image unless an identical one exists. Returns (tag, built).

    Raises:
        SandboxError: the build failed (its last log lines are in the message).
    """
    import docker.errors

    say = progress or (lambda _line: None)
    tag = image_tag(paper, cfg)
    if image_exists(client, tag):
        say(f"{paper.id}: {tag} is up to date")
        return tag, False
    reqs = requirements(paper)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp)
        shutil.copyfile(sandbox_root() / "Dockerfile.paper", ctx / "Dockerfile")
        (ctx / "requirements.txt").write_text("\n".join(reqs) + "\n")
        wheels = ctx / "wheels"
        wheels.mkdir()
        buildargs = {"BASE": cfg.base}
        if cfg.wheels is not None:
            say(f"{paper.id}: downloading wheels into {cfg.wheels}")
            download_wheels(reqs, cfg.wheels)
            for whl in cfg.wheels.glob("*.whl"):
                shutil.copyfile(whl, wheels / whl.name)
            buildargs["PIP_ARGS"] = "--no-index --find-links /tmp/rcb-build/wheels"
        say(f"{paper.id}: building {tag} from {cfg.base}")
        lines: list[str] = []
        try:
            for chunk in client.api.build(
                path=str(ctx),
                tag=tag,
                buildargs=buildargs,
                network_mode="none" if cfg.wheels is not None else None,
                labels={LABEL: "1", LABEL_PAPER: paper.id},
                rm=True,
                forcerm=True,
                decode=True,
            ):
                if "stream" in chunk and chunk["stream"].strip():
                    lines.append(chunk["stream"].rstrip())
                    say(f"{paper.id}: {chunk['stream'].rstrip()}")
                if "error" in chunk:
                    tail = "\n".join(lines[-15:])
                    raise SandboxError(f"building {tag} failed: {chunk['error']}\n{tail}")
        except docker.errors.DockerException as exc:
            raise SandboxError(f"building {tag} failed: {exc}") from exc
    return tag, True


def gc_images(client: Any, keep: set[str]) -> list[str]:
    """Remove rcb-env images whose tag is not in ``keep`` (stale builds). Returns their tags."""
    import docker.errors

    removed: list[str] = []
    for image in client.images.list(filters={"label": LABEL}):
        tags = image.tags or [image.id]
        if any(t in keep for t in tags):
            continue
        try:
            client.images.remove(image.id, force=True)
            removed.extend(tags)
        except docker.errors.DockerException:
            continue
    return removed
