"""rcb-env hacks: the reward-hack suite on a backend."""

from __future__ import annotations

import sys

import click

from rcb_env.cli.app import (
    EXIT_FINDINGS,
    EXIT_OK,
    cli,
    dispatcher_option,
    out,
    sandbox_options,
)
from rcb_env.sandbox import SandboxConfig
from rcb_env.validation.dispatcher import Dispatcher


@cli.command(name="hacks")
@sandbox_options(base=True, grading=True)
@click.option("--timeout", type=float, default=20.0, show_default=True)
@click.option(
    "--attack",
    "attack_names",
    multiple=True,
    help="Only this attack, by its name in the table (repeatable; default: every attack).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Attacks graded at once on this machine (most wait on their sandbox, one on its time "
    "limit; concurrent attacks also test that one run cannot reach another).",
)
@dispatcher_option
def hacks_cmd(
    sandbox: SandboxConfig,
    timeout: float,
    attack_names: tuple[str, ...],
    jobs: int,
    dispatcher: Dispatcher,
) -> None:
    """Grade the reward-hack suite on this backend: every attack must score 0, the host must be
    unchanged and the reference must still pass afterwards (exit 1 if not)."""
    from rcb_env.validation.checks import run_hack_suite
    from rcb_env.validation.hacks import chosen
    from rcb_env.validation.render import print_hacks

    try:
        attacks = chosen(attack_names)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--attack") from None
    report = run_hack_suite(sandbox, dispatcher, attacks, timeout, jobs)
    print_hacks(out, report)
    sys.exit(EXIT_OK if report.ok else EXIT_FINDINGS)
