"""rcb-env get and setup: a named benchmark onto this machine, and its task environments."""

from __future__ import annotations

import sys

import click

from rcb_env import catalog, envs
from rcb_env.catalog import fetch
from rcb_env.cli._app import (
    EXIT_FINDINGS,
    EXIT_OK,
    _load,
    _print_failures,
    cli,
    err,
    out,
    paper_option,
    pset_option,
)


@cli.command(name="get")
@click.argument("name")
@click.option(
    "--from",
    "source",
    help="A local folder (the repository or its task folder), a git URL, or an archive "
    "(.tar.gz/.zip, a path or an http(s) URL). Default: the repository at the pinned commit.",
)
@click.option("--force", is_flag=True, help="Fetch again even if a verified copy is here.")
def get_cmd(name: str, source: str | None, force: bool) -> None:
    """Download a named benchmark (pinned commit), verify its tree hash, install it."""
    bench = catalog.benchmark(name)
    path = fetch.fetch(
        bench, source, force=force, log=lambda line: err.print(line, highlight=False)
    )
    out.print(f"{bench.name}: {path}", highlight=False)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


@cli.command(name="setup")
@pset_option
@paper_option
@click.argument("name", required=False)
@click.option("--jobs", default=1, show_default=True, help="Environments built in parallel.")
@click.option(
    "--assets", is_flag=True, help="Also fetch the files papers' tests need (needs network)."
)
def setup_cmd(
    pset: tuple[str, ...], papers: tuple[str, ...], name: str | None, jobs: int, assets: bool
) -> None:
    """Build the task environments (venvs) the benchmark's papers need, one per requirement
    set, shared between papers; existing ones are kept. Then list each paper's availability.
    Exit 1 if an environment failed to build."""
    loaded = _load((name,) if name else pset, papers)
    _print_failures(loaded)
    reports = envs.setup(
        loaded.papers,
        jobs=jobs,
        assets=assets,
        log=lambda line: err.print(line, highlight=False),
        on_done=lambda r: err.print(
            f"{r.name}: {'built' if r.built else 'up to date' if r.ok else 'FAILED'}"
            + (f" in {r.seconds:.0f} s" if r.built else ""),
            highlight=False,
        ),
    )
    for r in reports:
        state = "ok" if r.ok else "FAILED"
        out.print(
            f"environment {r.name} ({state}) {_gib(r.bytes)}, {r.seconds:.0f} s, for "
            f"{', '.join(r.papers)}\n  {r.folder}",
            highlight=False,
            soft_wrap=True,
        )
        if not r.ok:
            out.print(f"  [red]{r.error}[/red]", highlight=False, soft_wrap=True)
    out.print(f"total {_gib(sum(r.bytes for r in reports))}", highlight=False)
    for paper in loaded.papers:
        a = envs.availability(paper)
        env = a.environment or "default"
        out.print(
            f"{paper.id}: {a.status} ({env})" + (f": {a.reason}" if a.reason else ""),
            highlight=False,
            soft_wrap=True,
        )
    sys.exit(EXIT_OK if all(r.ok for r in reports) else EXIT_FINDINGS)
