"""rcb-env tasks: list papers and snippets."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import get_args

import click

from rcb_env import catalog
from rcb_env.catalog import complete
from rcb_env.cli.app import (
    EXIT_FINDINGS,
    EXIT_OK,
    cli,
    load_selection,
    out,
    paper_option,
    print_failures,
    pset_option,
    shown,
    subset_option,
)
from rcb_env.cli.benchmark import print_setup_plan
from rcb_env.dispatch.runnable import split
from rcb_env.results.records import scored_outcomes
from rcb_env.task import environments as envs
from rcb_env.task.difficulty import RateSource, difficulty_table, parse_range, read_published
from rcb_env.task.models import DateField
from rcb_env.task.render import snippet_tree, tasks_table
from rcb_env.task.selection import (
    SOLVE_RATE,
    load_subset,
    make_subset,
    select_ids,
    select_papers,
    select_subset,
)


@cli.command()
@pset_option
@paper_option
@click.option(
    "--after", type=click.DateTime(["%Y-%m-%d"]), help="Keep papers dated after this day."
)
@click.option(
    "--before", type=click.DateTime(["%Y-%m-%d"]), help="Keep papers dated before this day."
)
@click.option(
    "--date-field",
    type=click.Choice(get_args(DateField)),
    default="first_commit_date",
    show_default=True,
    help="Which papers.yaml date --after/--before compare (the official harness uses "
    "first_commit_date for contamination).",
)
@click.option("--tree", is_flag=True, help="Show every snippet with its nesting and weight.")
@click.option("--json", "as_json", is_flag=True, help="Print the loaded specs as JSON.")
@click.option(
    "--needs",
    is_flag=True,
    help="Per paper: what runs now, what a networked `get` and `setup --assets` would fetch, "
    "and what would still keep it from running.",
)
@click.option(
    "--published",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The paper's results file (overall_stats.json): each snippet's solve rate among the "
    "published models (default: $RCB_PUBLISHED_RESULTS).",
)
@click.option(
    "--runs",
    "run_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A run folder (repeatable): each snippet's solve rate among these runs.",
)
@subset_option
@click.option(
    "--solve-rate",
    metavar="LO:HI",
    help="Only snippets whose published solve rate is in [LO, HI] (fractions, e.g. 0:0.2).",
)
@click.option(
    "--rate-from",
    type=click.Choice(["published", "runs"]),
    default="published",
    show_default=True,
    help="Which solve rate --solve-rate reads.",
)
@click.option(
    "--subset-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the selected snippets as a subset file (`eval --subset FILE` runs them).",
)
def tasks(
    pset: tuple[str, ...],
    papers: tuple[str, ...],
    after: dt.datetime | None,
    before: dt.datetime | None,
    date_field: DateField,
    tree: bool,
    as_json: bool,
    needs: bool,
    published: Path | None,
    run_dirs: tuple[Path, ...],
    subset: str | None,
    solve_rate: str | None,
    rate_from: RateSource,
    subset_out: Path | None,
) -> None:
    """List papers and snippets: counts, weights, nesting, difficulty."""
    loaded = select_papers(
        load_selection(pset, papers),
        after=after.date() if after else None,
        before=before.date() if before else None,
        field=date_field,
    )
    stats = published or catalog.published_results()
    outcomes, weights = read_published(stats) if stats else ([], {})
    ran = [o for run in run_dirs for o in scored_outcomes(run)]
    if subset is not None:
        loaded = select_subset(loaded, load_subset(subset, stats))
    if solve_rate is not None:
        if rate_from == "published":
            loaded = select_subset(loaded, load_subset(SOLVE_RATE + solve_rate, stats))
        else:
            low, high = parse_range(solve_rate)
            runs_table = difficulty_table(loaded, runs=ran)
            loaded = select_ids(loaded, runs_table.within(low, high, "runs"))
    table = difficulty_table(loaded, published=outcomes, runs=ran, weights=weights)
    if subset_out is not None:
        chosen = " and ".join(
            x
            for x in (subset and f"subset {subset}", solve_rate and f"solve rate {solve_rate}")
            if x
        )
        made = make_subset(
            subset_out.stem,
            f"rcb-env tasks: {chosen or 'every listed snippet'}",
            {d.snippet_id: d.solve_rate(rate_from) or 0.0 for d in table.snippets},
            0.0,
        )
        subset_out.write_text(made.model_dump_json(indent=2) + "\n")
    if as_json:
        difficulty = {d.snippet_id: d.model_dump(mode="json") for d in table.snippets}
        papers_json = []
        for p in loaded.papers:
            data = p.model_dump(mode="json", exclude={"annotated_files"})
            for s in data["snippets"]:
                s["id"] = f"{s['paper_id']}/{s['name']}"
                s["difficulty"] = difficulty[s["id"]]
            papers_json.append(data)
        out.print_json(
            json.dumps(
                {
                    "root": str(loaded.root),
                    "papers": papers_json,
                    "failures": [f.model_dump(mode="json") for f in loaded.failures],
                }
            )
        )
    else:
        out.print(tasks_table(loaded, shown(loaded.root)))
        if tree:
            for p in loaded.papers:
                out.print(snippet_tree(p))
        ready, _left_out = split(loaded)
        out.print(
            f"runnable here: {len(ready.papers)} of {len(loaded.papers)} papers, "
            f"{sum(len(p.snippets) for p in ready.papers)} of "
            f"{sum(len(p.snippets) for p in loaded.papers)} snippets "
            "(`rcb-env setup` says why each other one is not)",
            highlight=False,
        )
        if needs:
            gets = {}
            for name in pset:
                root, bench = catalog.resolve(name)
                if bench is not None:
                    gets.update(complete.describe(complete.needs(bench, root)))
            print_setup_plan(envs.plan(loaded.papers, gets))
    print_failures(loaded)
    sys.exit(EXIT_FINDINGS if loaded.failures else EXIT_OK)
