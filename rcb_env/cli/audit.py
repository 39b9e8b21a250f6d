"""rcb-env audit: search everything an agent can read for the answers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from rcb_env.cli._app import (
    EXIT_CONTROL_MISSED,
    EXIT_FINDINGS,
    EXIT_OK,
    _load,
    _print_failures,
    _progress,
    _sandbox_config,
    base_option,
    cgroup_option,
    cli,
    out,
    paper_option,
    pset_option,
    ray_option,
    sandbox_option,
)
from rcb_env.sandbox import BackendName, SandboxFactory


@cli.command(name="audit")
@pset_option
@paper_option
@sandbox_option
@base_option
@cgroup_option
@ray_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--control/--no-control",
    default=None,
    help="Also audit the bundled canary task, whose seeded leak must be found (default: on).",
)
def audit_cmd(
    pset: tuple[str, ...],
    papers: tuple[str, ...],
    sandbox: BackendName,
    cgroup_limits: str | None,
    base: str | None,
    json_path: Path | None,
    control: bool | None,
    ray_address: str | None,
) -> None:
    """Search everything an agent can read for each snippet's answer.

    Exit 1 on any finding; exit 5 if the control's seeded leak was not found (then a clean
    result proves nothing on this backend).
    """
    from rcb_env.validation import audit as leak_audit

    loaded = _load(pset, papers)
    _print_failures(loaded)
    sandbox_cfg = _sandbox_config(sandbox, base, cgroup_limits=cgroup_limits)
    factory = SandboxFactory(sandbox_cfg)
    controlled: list[leak_audit.Finding] | None = None
    try:
        if ray_address is not None:
            from rcb_env.dispatch import ray as ray_runner
            from rcb_env.validation import jobs as ray_jobs

            own = ray_runner.connect(ray_address, jobs=os.cpu_count() or 1)
            try:
                findings = ray_jobs.audit_on_ray(loaded, sandbox_cfg)
            finally:
                ray_runner.disconnect(own)
            if control is not False:
                controlled = leak_audit.control(factory)
        else:
            with _progress("auditing") as progress:
                bar = progress.add_task("", total=len(loaded.snippets))

                def done(sid: str) -> None:
                    progress.update(bar, advance=1, description=sid)

                if control is False:
                    findings = leak_audit.audit(loaded, factory, on_done=done)
                else:
                    findings, controlled = leak_audit.audit_with_control(
                        loaded, factory, on_done=done
                    )
    finally:
        factory.close()
    leaks = [f for f in findings if f.accepted is None]
    for f in leaks:
        out.print(
            f"[red]leak[/red] ({f.kind}) {f.snippet_id}: {f.path}: {f.line}",
            highlight=False,
            soft_wrap=True,
        )
    by_design: dict[tuple[str, str], int] = {}
    for f in findings:
        if f.accepted is not None:
            by_design[(f.path, f.accepted)] = by_design.get((f.path, f.accepted), 0) + 1
    for (path, why), n in sorted(by_design.items()):
        out.print(f"by design: {path} ({n} answer lines): {why}", highlight=False, soft_wrap=True)
    out.print(
        f"{len(leaks)} findings over {len(loaded.snippets)} snippets"
        + (f" ({len(findings) - len(leaks)} more are the benchmark's design)" if by_design else ""),
        highlight=False,
    )
    if json_path is not None:
        json_path.write_text(leak_audit.findings_json(findings))
    if controlled is not None:
        caught = [f for f in controlled if f.path == leak_audit.CANARY_LEAK]
        if not caught:
            out.print(
                f"[red]control failed[/red]: the seeded leak in {leak_audit.CANARY_PSET} "
                f"({leak_audit.CANARY_LEAK}) was not found, so a clean result proves nothing here",
                highlight=False,
            )
            sys.exit(EXIT_CONTROL_MISSED)
        out.print(
            f"control: the seeded leak in {leak_audit.CANARY_PSET} was found "
            f"({len(caught)} answer lines in {leak_audit.CANARY_LEAK})",
            highlight=False,
        )
    sys.exit(EXIT_FINDINGS if leaks else EXIT_OK)
