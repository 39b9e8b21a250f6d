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
    err,
    grading_option,
    out,
    paper_option,
    pset_option,
    ray_option,
    sandbox_option,
    snippet_option,
)
from rcb_env.grading.grader import DEFAULT_TIMEOUT_S, Grader, GradingConfig
from rcb_env.runner.eval import runnable
from rcb_env.sandbox import BackendName, SandboxFactory
from rcb_env.task.models import Pset
from rcb_env.task.selection import VERIFIED_THRESHOLD, select_snippets
from rcb_env.validation.render import print_strength, print_validation
from rcb_env.validation.strength import (
    Classify,
    GradeAll,
    StrengthReport,
    local_grading,
    score_mutants,
    verified_subset,
)
from rcb_env.validation.survivors import classify_all
from rcb_env.validation.validate import Status, ValidationReport, planned_runs, validate


@cli.command(name="validate")
@pset_option
@paper_option
@click.option("--jobs", default=1, show_default=True, help="Gradings in parallel.")
@click.option("--repeat", default=1, show_default=True, help="Runs of each reference (flakiness).")
@click.option(
    "--timeout",
    type=float,
    help=f"Seconds per test run (default {DEFAULT_TIMEOUT_S:g}; overlays may raise).",
)
@sandbox_option
@cgroup_option
@grading_option
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    is_flag=False,
    flag_value="-",
    help="Write the report as JSON to this file (with --mutants: the mutation scores); `--json` "
    "alone: print it, and nothing else, on standard output.",
)
@click.option(
    "--all", "everything", is_flag=True, help="Also run papers that are unavailable here."
)
@click.option(
    "--mutants",
    is_flag=True,
    help="Also grade mutants of each valid snippet's reference (its test's strength).",
)
@click.option("--cap", default=20, show_default=True, help="--mutants: at most this many each.")
@click.option("--seed", default=0, show_default=True, help="--mutants: which mutants are drawn.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="--mutants: record folder (graded mutants are appended; a re-run resumes).",
)
@click.option(
    "--subset-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="--mutants: write the verified subset (snippets at or above --threshold) here.",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1),
    default=VERIFIED_THRESHOLD,
    show_default=True,
    help="--subset-out: the least mutation score of a verified snippet.",
)
@click.option(
    "--equivalence",
    is_flag=True,
    help="--mutants: run each survivor beside the reference on perturbed inputs of the snippet's "
    "function (where the test calls it) and mark it a test gap or possibly equivalent.",
)
@snippet_option
@ray_option
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
    mutants: bool,
    cap: int,
    seed: int,
    out_dir: Path | None,
    subset_out: Path | None,
    threshold: float,
    snippets: tuple[str, ...],
    ray_address: str | None,
    equivalence: bool,
) -> None:
    """Check every snippet: reference passes; masked and `pass` versions fail. Papers that
    cannot run in this installation are listed with the reason and not run (--all runs them).
    Runs are graded in the chosen sandbox; the table says per paper whether warm or cold."""
    loaded = _load(pset, papers, snippets)
    whole = loaded
    _print_failures(loaded)
    # `--json` alone: the document is the only thing on standard output
    notes = err if json_path is not None and str(json_path) == "-" else out
    if not everything:
        loaded, totals = runnable(loaded)
        for u in totals.unavailable:
            what = f"{u.paper}/{u.snippet}" if u.snippet else u.paper
            notes.print(f"unavailable {what}: {u.reason}", highlight=False, soft_wrap=True)
    cfg = GradingConfig() if timeout is None else GradingConfig(timeout_s=timeout)
    factory = SandboxFactory(
        _sandbox_config(sandbox, None, cgroup_limits=cgroup_limits, grading=grading)
    )
    try:
        with _progress("validating") as progress:
            bar = progress.add_task("", total=planned_runs(loaded, repeat))
            report = validate(
                loaded,
                cfg,
                jobs=jobs,
                repeat=repeat,
                on_done=lambda label: progress.update(bar, advance=1, description=label),
                everything=whole,
                executor_for=factory.grading_executor,
            )
        if mutants:
            grade_all = local_grading(
                lambda p: Grader(cfg, executor=factory.grading_executor(p)), jobs
            )
            own_ray = None
            if ray_address is not None:
                from rcb_env.dispatch import ray as ray_runner
                from rcb_env.validation import jobs as ray_jobs

                if loaded.parts:
                    raise click.UsageError("--mutants --ray: one benchmark at a time")
                own_ray = ray_runner.connect(ray_address, jobs=jobs)
                grade_all = ray_jobs.mutants_on_ray(
                    loaded.benchmark or str(loaded.root), factory.config, cfg
                )
            # the probe runs one command in a copy of its own: the cold executors
            cold = SandboxFactory(factory.config.model_copy(update={"warm_grading": False}))
            sort = (
                (lambda items: classify_all(items, cold.grading_executor, scratch=factory.scratch))
                if equivalence
                else None
            )
            try:
                strength = _mutants(loaded, report, grade_all, cap, seed, out_dir, sort)
            finally:
                cold.close()
                if own_ray is not None:
                    ray_runner.disconnect(own_ray)
    finally:
        factory.close()
    document: str = report.model_dump_json(indent=2)
    if mutants:
        document = strength.model_dump_json(indent=2)
        if subset_out is not None:
            chosen = verified_subset(strength, threshold=threshold, repeat=repeat)
            subset_out.write_text(chosen.model_dump_json(indent=2) + "\n")
            err.print(
                f"verified subset: {len(chosen.snippets)} of {len(strength.snippets)} snippets "
                f"written to {subset_out}",
                highlight=False,
            )
    if json_path is not None and str(json_path) == "-":
        click.echo(document)
    else:
        print_validation(out, report, _shown(report.root))
        if mutants:
            print_strength(out, strength, _shown(report.root))
        if json_path is not None:
            json_path.write_text(document)
            out.print(f"report written to {json_path}")
    sys.exit(EXIT_OK if report.ok else EXIT_FINDINGS)


def _mutants(
    loaded: Pset,
    report: ValidationReport,
    grade_all: GradeAll,
    cap: int,
    seed: int,
    out_dir: Path | None,
    classify: Classify | None,
) -> StrengthReport:
    """The strength of the tests of the snippets whose reference passed (ok or weak)."""
    statuses = {s.id: s.status.value for p in report.papers for s in p.snippet_reports}
    sound = tuple(i for i, st in statuses.items() if st in (Status.OK, Status.WEAK))
    chosen = select_snippets(loaded, sound) if sound else loaded.model_copy(update={"papers": ()})
    with _progress("mutants") as progress:
        bar = progress.add_task("", total=None)
        return score_mutants(
            chosen,
            grade_all,
            seed=seed,
            cap=cap,
            out=out_dir,
            validation=statuses,
            on_done=lambda label: progress.update(bar, advance=1, description=label),
            on_planned=lambda todo: progress.update(bar, total=todo),
            classify=classify,
        )
