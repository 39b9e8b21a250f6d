"""rcb-env hacks: the reward-hack suite on a backend."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
from rich.table import Table

from rcb_env.cli._app import (
    EXIT_FINDINGS,
    EXIT_OK,
    _sandbox_config,
    base_option,
    cgroup_option,
    cli,
    grading_option,
    out,
    ray_option,
    sandbox_option,
)
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.sandbox import BackendName, SandboxFactory
from rcb_env.task import loader


@cli.command(name="hacks")
@sandbox_option
@base_option
@cgroup_option
@grading_option
@click.option("--timeout", type=float, default=20.0, show_default=True)
@click.option(
    "--attack",
    "attack_names",
    multiple=True,
    help="Only this attack, by its name in the table (repeatable; default: every attack).",
)
@ray_option
def hacks_cmd(
    sandbox: BackendName,
    base: str | None,
    cgroup_limits: str | None,
    grading: str,
    timeout: float,
    attack_names: tuple[str, ...],
    ray_address: str | None,
) -> None:
    """Grade the reward-hack suite on this backend: every attack must score 0, the host must be
    unchanged and the reference must still pass afterwards (exit 1 if not)."""
    from rcb_env.validation.hacks import (
        TARGET,
        chosen,
        host_state,
        leftovers,
        run_hacks,
        target_of,
    )

    try:
        attacks = chosen(attack_names)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--attack") from None
    pset = loader.load(loader.bundled_root())
    paper = pset.paper(TARGET[0])
    snippet = paper.snippet(TARGET[1])
    sandbox_cfg = _sandbox_config(sandbox, base, cgroup_limits=cgroup_limits, grading=grading)
    factory = SandboxFactory(sandbox_cfg)
    # Ray, when asked for, is joined (or started) before the host is looked at: its own session
    # folder is rcb-env's, not something an attack left.
    own_ray: bool | None = None
    try:
        own_ray = _join_ray(ray_address)
        graders: dict[str, Grader] = {}

        def grader_for(target: Any) -> Grader:
            if target.id not in graders:
                graders[target.id] = Grader(
                    GradingConfig(timeout_s=timeout), executor=factory.grading_executor(target)
                )
            return graders[target.id]

        grader = grader_for(paper)
        # The environment as it stands before any attack (with warm grading, the warm process
        # of each paper attacked): what the attacks leave is measured against that.
        for paper_id, snippet_name in sorted({target_of(name) for name in attacks}):
            target = pset.paper(paper_id)
            reference = target.snippet(snippet_name).reference_body
            grader_for(target).grade(target, target.snippet(snippet_name), reference)
        before = host_state(factory)
        if ray_address is not None:
            results = _hacks_on_ray(sandbox_cfg, timeout, attacks)
        else:
            results = run_hacks(pset, grader_for, attacks)
        left = leftovers(before, factory)
        # the next episode is clean: the honest answer still passes, in a fresh sandbox
        after = grader.grade(paper, snippet, snippet.reference_body)
    finally:
        factory.close()
        if own_ray is not None:
            from rcb_env.dispatch import ray as ray_runner

            ray_runner.disconnect(own_ray)
    table = Table(title=f"Reward hacks on {factory.backend}: {TARGET[0]}/{TARGET[1]}")
    for col in ("attack", "official rule", "rcb-env", "why", "run-time guards alone"):
        table.add_column(col)
    for r in results:
        table.add_row(
            r.attack,
            "[red]pass[/red]" if r.official_pass else "fail",
            "[red]PASS[/red]" if r.passed else ("[red]excluded[/red]" if r.excluded else "0"),
            r.detail if r.detail.startswith(r.kind) else f"{r.kind}: {r.detail}",
            "" if r.runtime is None else r.runtime,
        )
    out.print(table)
    beaten = [r.attack for r in results if r.passed or r.excluded]
    out.print(
        f"{len(results) - len(beaten)} of {len(results)} attacks scored 0 "
        "(neither passed nor excluded as infrastructure)",
        highlight=False,
    )
    for problem in left:
        out.print(f"[red]host changed[/red]: {problem}", highlight=False, soft_wrap=True)
    if not left:
        out.print(
            "host unchanged: no process of the sandbox user, no container, no new file in the "
            "shared temporary folders or the scratch folder",
            highlight=False,
        )
    if after.passed:
        out.print("next episode clean: the reference still passes", highlight=False)
    else:
        out.print(f"[red]next episode broken[/red]: {after.detail}", highlight=False)
    sys.exit(EXIT_FINDINGS if beaten or left or not after.passed else EXIT_OK)


def _join_ray(address: str | None) -> bool | None:
    """Connect to Ray for ``--ray ADDRESS`` (local: start it, a slot per core); whether this
    call started the connection, or None without ``--ray``."""
    if address is None:
        return None
    from rcb_env.dispatch import ray as ray_runner

    return ray_runner.connect(address, jobs=os.cpu_count() or 1)


def _hacks_on_ray(sandbox_cfg: Any, timeout: float, attacks: dict[str, str]) -> list[Any]:
    """Each attack graded as a Ray job (connected first; the same verdicts as a local run),
    those of one target snippet together."""
    from rcb_env.task import loader as task_loader
    from rcb_env.validation import jobs as ray_jobs
    from rcb_env.validation.hacks import HackResult, target_of

    by_target: dict[tuple[str, str], list[str]] = {}
    for name in attacks:
        by_target.setdefault(target_of(name), []).append(name)
    rows = {}
    for (paper_id, snippet_name), names in by_target.items():
        graded = ray_jobs.grade_on_ray(
            str(task_loader.bundled_root()),
            paper_id,
            snippet_name,
            [attacks[n] for n in names],
            sandbox_cfg,
            GradingConfig(timeout_s=timeout),
        )
        rows.update({n: HackResult.of(n, r) for n, r in zip(names, graded, strict=True)})
    return [rows[n] for n in attacks]
