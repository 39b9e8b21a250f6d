"""rcb-env summary and compare: the rates of runs."""

from __future__ import annotations

from pathlib import Path

import click

from rcb_env.cli._app import (
    _shown,
    cli,
    out,
)
from rcb_env.results import read_records, summarize
from rcb_env.results.compare import compare
from rcb_env.results.render import print_comparison, print_summary


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def summary(run_dir: Path, as_json: bool) -> None:
    """Scaled and plain pass rates of a run, overall and per paper."""
    s = summarize(read_records(run_dir / "episodes.jsonl"))
    if as_json:
        out.print_json(s.model_dump_json())
    else:
        print_summary(out, s, _shown(run_dir))


@cli.command(name="compare")
@click.argument(
    "run_dirs",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--force", is_flag=True, help="Compare runs with different tasks or budgets anyway.")
def compare_cmd(run_dirs: tuple[Path, ...], force: bool) -> None:
    """Runs side by side: pass rates (± std), tokens, cost, steps, time, infra errors."""
    print_comparison(out, compare(list(run_dirs), force=force))
