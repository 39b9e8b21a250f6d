"""rcb-env validate: every reference passes, masked and `pass` versions fail."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rcb_env.cli._app import (
    EXIT_FINDINGS,
    EXIT_OK,
    _load,
    _print_failures,
    _progress,
    _sandbox_config,
    _shown,
    cgroup_option,
    cli,
    grading_option,
    out,
    paper_option,
    pset_option,
    sandbox_option,
)
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.runner.eval import runnable
from rcb_env.sandbox import BackendName, SandboxFactory
from rcb_env.validation.render import print_validation
from rcb_env.validation.validate import planned_runs, validate


@cli.command(name="validate")
@pset_option
@paper_option
@click.option("--jobs", default=1, show_default=True, help="Gradings in parallel.")
@click.option("--repeat", default=1, show_default=True, help="Runs of each reference (flakiness).")
@click.option(
    "--timeout", type=float, help="Seconds per test run (default 300; overlays may raise)."
)
@sandbox_option
@cgroup_option
@grading_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--all", "everything", is_flag=True, help="Also run papers that are unavailable here."
)
def validate_cmd(
    pset: tuple[str, ...],
    papers: tuple[str, ...],
    jobs: int,
    repeat: int,
    timeout: float | None,
    json_path: Path | None,
    everything: bool,
    sandbox: BackendName,
    cgroup_limits: str | None,
    grading: str,
) -> None:
    """Check every snippet: reference passes; masked and `pass` versions fail. Papers that
    cannot run in this installation are listed with the reason and not run (--all runs them).
    Runs are graded in the chosen sandbox; the table says per paper whether warm or cold."""
    loaded = _load(pset, papers)
    whole = loaded
    _print_failures(loaded)
    if not everything:
        loaded, totals = runnable(loaded)
        for u in totals.unavailable:
            what = f"{u.paper}/{u.snippet}" if u.snippet else u.paper
            out.print(f"unavailable {what}: {u.reason}", highlight=False, soft_wrap=True)
    cfg = GradingConfig() if timeout is None else GradingConfig(timeout_s=timeout)
    grader = Grader(cfg)
    factory = SandboxFactory(
        _sandbox_config(sandbox, None, cgroup_limits=cgroup_limits, grading=grading)
    )
    try:
        with _progress("validating") as progress:
            bar = progress.add_task("", total=planned_runs(loaded, repeat))
            report = validate(
                loaded,
                grader,
                jobs=jobs,
                repeat=repeat,
                on_done=lambda label: progress.update(bar, advance=1, description=label),
                everything=whole,
                executor_for=factory.grading_executor,
            )
    finally:
        factory.close()
    print_validation(out, report, _shown(report.root))
    if json_path is not None:
        json_path.write_text(report.model_dump_json(indent=2))
        out.print(f"report written to {json_path}")
    sys.exit(EXIT_OK if report.ok else EXIT_FINDINGS)
