"""rcb-env images: per-paper Docker images."""

from __future__ import annotations

from pathlib import Path

import click

from rcb_env.cli._app import (
    _load,
    _print_failures,
    cli,
    err,
    out,
    paper_option,
    pset_option,
)


@cli.group()
def images() -> None:
    """Per-paper Docker images (one per paper, tagged by a content hash)."""


@images.command(name="build")
@pset_option
@paper_option
@click.option(
    "--base", help="Base image with python3 (default python:3.11-slim or $RCB_DOCKER_BASE)."
)
@click.option(
    "--wheels",
    type=click.Path(file_okay=False, path_type=Path),
    help="Download wheels into this folder on the host and build offline (--network=none).",
)
def images_build(
    pset: tuple[str, ...], papers: tuple[str, ...], base: str | None, wheels: Path | None
) -> None:
    """Build the image of every paper (up-to-date images are kept)."""
    from rcb_env.sandbox import docker
    from rcb_env.sandbox import images as img

    loaded = _load(pset, papers)
    _print_failures(loaded)
    cfg = (
        img.ImageConfig(wheels=wheels)
        if base is None
        else img.ImageConfig(base=base, wheels=wheels)
    )
    engine = docker.client()
    for paper in loaded.papers:
        tag, built = img.build(
            engine,
            paper,
            cfg,
            progress=lambda line: err.print(line, highlight=False, soft_wrap=True),
        )
        out.print(f"{paper.id}: {tag} ({'built' if built else 'up to date'})", highlight=False)


@images.command(name="gc")
@pset_option
@click.option("--base", help="Keep images built from this base (default as for build).")
@click.option("--all", "everything", is_flag=True, help="Also remove containers of live runs.")
def images_gc(pset: tuple[str, ...], base: str | None, everything: bool) -> None:
    """Remove leftover rcb-env containers and stale rcb-env images."""
    from rcb_env.sandbox import docker
    from rcb_env.sandbox import images as img

    engine = docker.client()
    removed = docker.gc_containers(engine, everything=everything)
    loaded = _load(pset, ())
    cfg = img.ImageConfig() if base is None else img.ImageConfig(base=base)
    keep = {img.image_tag(p, cfg) for p in loaded.papers}
    stale = img.gc_images(engine, keep)
    out.print(f"removed {len(removed)} containers and {len(stale)} stale images", highlight=False)
