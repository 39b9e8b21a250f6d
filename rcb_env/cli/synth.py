"""rcb-env synth: training snippets from the papers' own code, apart from the test set."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from rcb_env.cli.app import (
    EXIT_OK,
    EXIT_UNSCORED,
    Selection,
    cli,
    dispatcher_option,
    err,
    meter,
    out,
    print_failures,
    sandbox_options,
    selection_options,
    shown,
)
from rcb_env.runner.eval import runnable
from rcb_env.sandbox import SandboxConfig
from rcb_env.synth.run import SynthPlan, synthesize
from rcb_env.task.selection import VERIFIED_THRESHOLD
from rcb_env.validation.checks import ValidationPlan
from rcb_env.validation.dispatcher import Dispatcher


@cli.command(name="synth")
@selection_options()
@click.option(
    "-o",
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The training pset to write (a re-run with the same settings resumes it).",
)
@click.option("--jobs", default=1, show_default=True, help="Gradings in parallel.")
@click.option("--seed", default=0, show_default=True, help="Proposal, sample and mutants.")
@click.option("--repeat", default=3, show_default=True, help="Runs of each reference.")
@click.option("--cap", default=20, show_default=True, help="Mutants per candidate.")
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1),
    default=VERIFIED_THRESHOLD,
    show_default=True,
    help="The least mutation score of a kept snippet (the Verified subset's).",
)
@click.option("--max-lines", default=80, show_default=True, help="Largest candidate (code lines).")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many candidates per paper.")
@click.option("--timeout", type=float, help="Seconds per test run.")
@click.option(
    "--min-mutants",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="The fewest mutants a kept snippet has (a score of one or two measures nothing).",
)
@click.option(
    "--mutant-timeout",
    type=click.FloatRange(min=1),
    default=10.0,
    show_default=True,
    help="A mutant's test run is stopped (killed) after this many times the paper's slowest "
    "reference run (at least 30 s, at most the paper's own timeout).",
)
@click.option(
    "--holdout",
    multiple=True,
    help="A paper left out of synthesis altogether (the by-paper split; repeatable).",
)
@sandbox_options(base=True, grading=True)
@dispatcher_option
def synth_cmd(
    selection: Selection,
    sandbox: SandboxConfig,
    dispatcher: Dispatcher,
    out_dir: Path,
    **options: Any,
) -> None:
    """Propose snippets the papers' tests execute (none touching a published snippet), keep
    those verified as strictly as the test set (reference passes every repeat, masked and
    `pass` fail, leak audit clean, mutation score at or above the threshold), and write them as
    a pset (--pset OUT loads it anywhere) with synth.json: provenance, difficulty, and why every
    other candidate was dropped."""
    plan = SynthPlan(sandbox=sandbox, **options)
    loaded = selection.load()
    print_failures(loaded)
    loaded, totals = runnable(
        loaded,
        ValidationPlan(sandbox=sandbox, timeout=plan.timeout).runs_in(),
        here=dispatcher.here,
    )
    for u in totals.unavailable:
        if u.snippet is None:
            err.print(f"unavailable {u.paper}: {u.reason}", highlight=False, soft_wrap=True)
    result = synthesize(loaded, plan, out_dir, dispatcher, meter)
    for note in result.notes:
        err.print(note, highlight=False, soft_wrap=True)
    m = result.manifest
    out.print(
        f"{len(m.snippets)} snippets kept of {result.candidates} candidates "
        f"({len(m.dropped)} dropped; {len(result.undecided)} undecided) from {len(m.papers)} "
        f"papers in {result.wall_s:.0f} s: {shown(result.out)}",
        highlight=False,
    )
    for reason, n in m.drop_counts().items():
        out.print(f"  dropped {n:5d}  {reason}", highlight=False)
    for left in result.undecided:
        err.print(f"undecided {left} (infrastructure): run again to finish", highlight=False)
    sys.exit(EXIT_UNSCORED if result.undecided else EXIT_OK)
