"""rcb-env summary and compare: the rates of runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from rcb_env.cli.app import cli, err, load_selection, out, shown, subset_option
from rcb_env.errors import ConfigError, RcbError
from rcb_env.results import stats
from rcb_env.results.compare import compare_statistics, load_runs, run_row
from rcb_env.results.imported import import_results
from rcb_env.results.inference import Bootstrap, plan, run_statistics, scores
from rcb_env.results.records import RECORDS, read_records
from rcb_env.results.render import print_comparison, print_plan, print_summary
from rcb_env.results.summary import summarize_run
from rcb_env.task.selection import load_subset


def bootstrap_options(f: Any) -> Any:
    """--samples, --resamples, --seed: how rates and their intervals are computed."""
    for option in reversed(
        (
            click.option(
                "--samples",
                "k",
                type=click.IntRange(min=1),
                default=1,
                show_default=True,
                help="Report pass@1..K (pass@1: the mean over each snippet's samples; pass@j: "
                "the unbiased 1 - C(n-c, j)/C(n, j) per snippet, then the line weighting).",
            ),
            click.option(
                "--resamples",
                type=click.IntRange(min=100),
                default=stats.DEFAULT_RESAMPLES,
                show_default=True,
                help="Bootstrap resamples (papers drawn with replacement).",
            ),
            click.option(
                "--seed",
                type=int,
                default=stats.DEFAULT_SEED,
                show_default=True,
                help="The bootstrap's seed (numpy default_rng).",
            ),
        )
    ):
        f = option(f)
    return f


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@bootstrap_options
@click.option("--json", "as_json", is_flag=True, help="One JSON document (the summary and, under "
              "'statistics', every rate with its interval).")  # fmt: skip
@subset_option
def summary(
    run_dir: Path, k: int, resamples: int, seed: int, as_json: bool, subset: str | None
) -> None:
    """Scaled and plain pass rates of a run, overall and per paper, with 95% intervals
    (paper-clustered bootstrap)."""
    s = summarize_run(run_dir, load_subset(subset) if subset else None)
    st = run_statistics(
        read_records(run_dir / RECORDS),
        s.totals,
        k=k,
        boot=Bootstrap(resamples=resamples, seed=seed),
    )
    if as_json:
        doc = s.model_dump(mode="json")
        doc["statistics"] = st.model_dump(mode="json")
        out.print_json(json.dumps(doc))
    else:
        print_summary(out, s, shown(run_dir), st)


@cli.command(name="compare")
@click.argument(
    "run_dirs",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--force", is_flag=True, help="Compare runs with different tasks or budgets anyway.")
@click.option("--baseline", help="The run the others are compared with (folder or name; default: "
              "the first).")  # fmt: skip
@click.option("--paper", "papers", multiple=True, help="Only this paper's snippets (repeatable).")
@bootstrap_options
@click.option("--json", "as_json", is_flag=True, help="One JSON document: every rate with its "
              "interval, every run against the baseline.")  # fmt: skip
@subset_option
def compare_cmd(
    run_dirs: tuple[Path, ...],
    force: bool,
    baseline: str | None,
    papers: tuple[str, ...],
    k: int,
    resamples: int,
    seed: int,
    as_json: bool,
    subset: str | None,
) -> None:
    """Runs side by side: pass rates with 95% intervals, tokens, cost, steps, time, infra
    errors; then every run against the baseline, paired by snippet: the difference, its
    interval, p-value (Holm-corrected for several runs) and the smallest detectable
    difference."""
    loaded = load_runs(
        list(run_dirs),
        force=force,
        papers=papers,
        subset=load_subset(subset) if subset else None,
    )
    report = compare_statistics(
        list(run_dirs),
        baseline=baseline,
        k=k,
        boot=Bootstrap(resamples=resamples, seed=seed),
        loaded=loaded,
    )
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        print_comparison(out, [run_row(r) for r in loaded], report)


@cli.command(name="plan")
@click.option("--baseline", required=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A run of the baseline (its snippets and variance).")  # fmt: skip
@click.option("--difference", required=True, type=click.FloatRange(min=0, min_open=True),
              help="The difference to detect, in points (percentage points).")  # fmt: skip
@click.option("--against", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A pilot run of the candidate on the same snippets (measures how the two "
              "differ snippet by snippet).")  # fmt: skip
@click.option("--paper", "papers", multiple=True, help="Only this paper's snippets (repeatable).")
@click.option("--metric", type=click.Choice(["scaled", "plain"]), default="scaled",
              show_default=True)  # fmt: skip
@click.option("--power", type=click.FloatRange(0.5, 1, max_open=True), default=0.8,
              show_default=True)  # fmt: skip
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Two-sided level.")  # fmt: skip
@click.option("--resamples", type=click.IntRange(min=100), default=stats.DEFAULT_RESAMPLES,
              show_default=True)  # fmt: skip
@click.option("--seed", type=int, default=stats.DEFAULT_SEED, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def plan_cmd(
    baseline: Path,
    difference: float,
    against: Path | None,
    papers: tuple[str, ...],
    metric: str,
    power: float,
    alpha: float,
    resamples: int,
    seed: int,
    as_json: bool,
) -> None:
    """How many samples per snippet a comparison with the baseline needs to detect a
    difference of the given size (80% power, 5% level by default)."""
    runs = [baseline] if against is None else [baseline, against]
    loaded = load_runs(runs, force=True, papers=papers)
    try:
        result = plan(
            scores(loaded[0].records),
            difference,
            against=scores(loaded[1].records) if against is not None else None,
            names=(shown(baseline), shown(against) if against is not None else None),
            metric="plain" if metric == "plain" else "scaled",
            alpha=alpha,
            power=power,
            boot=Bootstrap(resamples=resamples, seed=seed),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if as_json:
        out.print_json(result.model_dump_json())
    else:
        print_plan(out, result)


@cli.command(name="import-results")
@click.argument("stats_file", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the runs go (default: runs/published for a results file, runs for a Harbor job).",
)
@click.option(
    "--pset",
    default="researchcodebench",
    show_default=True,
    help="The benchmark the results are of (its weights are used; skipped if not fetched).",
)
@click.option(
    "--tasks",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A Harbor job: the exported tasks' folder it ran in (names trials that never reached "
    "the verifier).",
)
def import_results_cmd(
    stats_file: Path, runs_dir: Path | None, pset: str, tasks: Path | None
) -> None:
    """The paper's results file (ResearchCodeBench's overall_stats.json) as one run per model,
    marked imported; prints each model's rates by rcb-env's formulas beside the file's own.
    Given a Harbor job folder (``harbor run`` on ``rcb-env export harbor`` tasks): one run per
    agent, its trials as Harbor's metric saw them (``rcb-env summary`` then rates them)."""
    if stats_file.is_dir():
        _import_harbor(stats_file, runs_dir or Path("runs"), tasks)
        return
    runs_dir = runs_dir or Path("runs") / "published"
    try:
        loaded = load_selection(pset, ())
    except RcbError as exc:
        err.print(f"{exc}; using the file's own line counts", highlight=False)
        loaded = None
    models = import_results(stats_file, runs_dir, pset=loaded)
    table = Table(title=f"Imported {len(models)} models from {shown(stats_file)}")
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
            shown(m.run_dir),
        )
    out.print(table)
    mismatched = sum(m.weight_mismatches for m in models)
    out.print(
        f"largest difference from the file's own rates: {worst:.4f} points; snippets whose "
        f"published line count differs from rcb-env's weight: {mismatched}",
        highlight=False,
    )


def _import_harbor(job_dir: Path, runs_dir: Path, tasks: Path | None) -> None:
    from rcb_env.integrations.harbor import import_harbor_job

    table = Table(title=f"Imported the Harbor job {shown(job_dir)}")
    for col in ("agent", "trials", "infra errors", "scaled %", "plain %", "run"):
        table.add_column(col, justify="left" if col in ("agent", "run") else "right")
    for run in import_harbor_job(job_dir, runs_dir, tasks=tasks):
        o = summarize_run(run.run_dir).overall
        table.add_row(
            run.agent,
            str(run.trials),
            str(run.infra_errors),
            "-" if o is None else f"{o.scaled:.2f}",
            "-" if o is None else f"{o.plain:.2f}",
            shown(run.run_dir),
        )
    out.print(table)
