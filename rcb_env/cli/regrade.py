"""rcb-env regrade: grade a stored run's final candidates again with the current grader and
tasks, into a new run folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rcb_env.catalog import BENCHMARKS
from rcb_env.cli.app import (
    EXIT_UNSCORED,
    cli,
    load_selection,
    out,
    print_failures,
    progress_bar,
    sandbox_options,
    shown,
)
from rcb_env.results.regrade import INFRA_NOW, verdict_changes
from rcb_env.results.render import print_summary, print_verdict_changes
from rcb_env.results.summary import summarize_run
from rcb_env.runner import new_run_dir
from rcb_env.runner.regrade import regrade_run, stored_run
from rcb_env.sandbox import SandboxConfig


def _against(manifest: dict[str, object]) -> str:
    """The task set a run was drawn from, by name when it is a known benchmark (its overlay
    comes with it), else its folder."""
    bench = manifest.get("benchmark")
    name = bench.get("name") if isinstance(bench, dict) else None
    if isinstance(name, str) and name in BENCHMARKS:
        return name
    return str(manifest["pset"])


@cli.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--against",
    metavar="PSET",
    help="The task set to grade against: a benchmark's name or a task folder (another version "
    "of the tasks). Default: the task set the run recorded, as it is now.",
)
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Gradings in parallel.")  # fmt: skip
@click.option("--ray", "ray_address", help="Grade as Ray jobs: 'local' (a Ray instance here with "
              "--jobs sandbox slots) or a cluster's address. Needs rcb-env[ray].")  # fmt: skip
@click.option("--ray-warm", is_flag=True, help="With --ray: one long-lived worker per node.")
@sandbox_options(base=True, pool=True, grading=True)
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default="runs",
              show_default=True, help="Where the regraded run's folder is made.")  # fmt: skip
@click.option("--resume", type=click.Path(file_okay=False, path_type=Path),
              help="Continue this regrading (a killed one): what finished is kept.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True,
              help="One JSON document: the summary and the changed verdicts.")  # fmt: skip
def regrade(
    run: Path,
    against: str | None,
    jobs: int,
    ray_address: str | None,
    ray_warm: bool,
    sandbox: SandboxConfig,
    runs_dir: Path,
    resume: Path | None,
    as_json: bool,
) -> None:
    """Grade every final candidate of a stored RUN again, with the current grader against the
    current tasks, into a new run folder; print its rates and the verdicts that changed, with
    why."""
    stored = stored_run(run)
    pset = load_selection((against or _against(stored.manifest),), ())
    print_failures(pset)
    run_dir = resume if resume is not None else new_run_dir(runs_dir)
    with progress_bar("regrading") as progress:
        bar = progress.add_task("", total=None)
        regrade_run(
            stored,
            pset,
            run_dir,
            sandbox=sandbox,
            jobs=jobs,
            ray=ray_address,
            warm=ray_warm,
            resume=resume is not None,
            on_plan=lambda n: progress.update(bar, total=n),
            on_graded=lambda r: progress.update(bar, advance=1, description=r.snippet_id),
        )
    summary = summarize_run(run_dir)
    changes = verdict_changes(run_dir)
    if as_json:
        doc = {"run": str(run_dir), "summary": summary.model_dump(mode="json"),
               "changes": changes.model_dump(mode="json")}  # fmt: skip
        out.print_json(json.dumps(doc))
    else:
        print_summary(out, summary, shown(run_dir))
        print_verdict_changes(out, changes)
    if any(c.reasons and c.reasons[0].startswith(INFRA_NOW) for c in changes.changed):
        out.print(
            "some candidates could not be graded again (infrastructure); once the cause is "
            f"fixed: rcb-env regrade {shown(run)} --resume {shown(run_dir)}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_UNSCORED)
