"""rcb-env summary and compare: the rates of runs."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from rcb_env.cli._app import _load, _shown, cli, err, out
from rcb_env.errors import RcbError
from rcb_env.results.compare import compare
from rcb_env.results.imported import import_results
from rcb_env.results.render import print_comparison, print_summary
from rcb_env.results.summary import summarize_run


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def summary(run_dir: Path, as_json: bool) -> None:
    """Scaled and plain pass rates of a run, overall and per paper."""
    s = summarize_run(run_dir)
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


@cli.command(name="import-results")
@click.argument("stats_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs") / "published",
    show_default=True,
)
@click.option(
    "--pset",
    default="researchcodebench",
    show_default=True,
    help="The benchmark the results are of (its weights are used; skipped if not fetched).",
)
def import_results_cmd(stats_file: Path, runs_dir: Path, pset: str) -> None:
    """The paper's results file (ResearchCodeBench's overall_stats.json) as one run per model,
    marked imported; prints each model's rates by rcb-env's formulas beside the file's own."""
    try:
        loaded = _load(pset, ())
    except RcbError as exc:
        err.print(f"{exc}; using the file's own line counts", highlight=False)
        loaded = None
    models = import_results(stats_file, runs_dir, pset=loaded)
    table = Table(title=f"Imported {len(models)} models from {_shown(stats_file)}")
    for col in ("model", "snippets", "scaled %", "file", "plain %", "file", "run"):
        table.add_column(col, justify="left" if col in ("model", "run") else "right")
    worst = 0.0
    for m in sorted(models, key=lambda m: -(m.summary.overall.scaled if m.summary.overall else 0)):
        o = m.summary.overall
        if o is None:
            continue
        for ours, theirs in ((o.scaled, m.published_scaled), (o.plain, m.published_plain)):
            if theirs is not None:
                worst = max(worst, abs(ours - theirs))
        table.add_row(
            m.pretty_name,
            str(o.snippets),
            f"{o.scaled:.2f}",
            "-" if m.published_scaled is None else f"{m.published_scaled:.2f}",
            f"{o.plain:.2f}",
            "-" if m.published_plain is None else f"{m.published_plain:.2f}",
            _shown(m.run_dir),
        )
    out.print(table)
    mismatched = sum(m.weight_mismatches for m in models)
    out.print(
        f"largest difference from the file's own rates: {worst:.4f} points; snippets whose "
        f"published line count differs from rcb-env's weight: {mismatched}",
        highlight=False,
    )
