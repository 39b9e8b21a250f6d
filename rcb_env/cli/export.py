"""rcb-env export: a run's trajectories for trainers (JSONL, a Hugging Face dataset, SFT chat) or
as ATIF trajectories; a benchmark as a Harbor dataset (``export harbor``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rcb_env.cli.app import cli, load_selection, out, print_failures, pset_option


class _ExportGroup(click.Group):
    """``export RUN_DIR ...`` (a run's trajectories) or ``export harbor ...``: any first word
    that is not a subcommand is the run folder of the default one (``export run``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@cli.group(name="export", cls=_ExportGroup)
def export_group() -> None:
    """Export a run's trajectories (``export RUN_DIR -o OUT``) or a benchmark as a Harbor
    dataset (``export harbor --pset NAME -o DIR``)."""


@export_group.command(name="run")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "hf", "sft", "atif"]),
    default="jsonl",
    show_default=True,
    help="jsonl: trajectories; hf: a datasets dataset on disk; sft: chat JSONL of passing ones; "
    "atif: one ATIF (v1.7) trajectory file per episode, into the folder OUT.",
)
@click.option("-o", "--out", "dest", type=click.Path(path_type=Path), required=True)
@click.option(
    "--keep-incomplete",
    is_flag=True,
    help="Keep groups with an unscored sample (dropped by default: their baseline is wrong).",
)
def export_cmd(run_dir: Path, fmt: str, dest: Path, keep_incomplete: bool) -> None:
    """Export RUN_DIR's trajectories (an RL run's trajectories.jsonl, or an evaluation run's
    records, messages rebuilt and marked tokens: none)."""
    if fmt == "atif":
        from rcb_env.rl.atif import export_atif

        written = export_atif(run_dir, dest)
        out.print(f"{len(written)} ATIF trajectories from {run_dir} -> {dest}", highlight=False)
        return
    from rcb_env.rl.export import export

    report = export(run_dir, dest, fmt, keep_incomplete=keep_incomplete)  # type: ignore[arg-type]
    out.print(
        f"{report.rows} rows from {report.source} -> {dest} ({fmt}); {report.groups} groups; "
        f"dropped {report.dropped_groups} incomplete groups ({report.dropped_rows} rows); "
        f"tokens: {report.tokens}",
        highlight=False,
        soft_wrap=True,
    )


@export_group.command(name="harbor")
@pset_option
@click.option("-o", "--out", "dest", type=click.Path(path_type=Path), required=True)
@click.option("--name", help="The dataset's name in registry.json (default: the --pset name).")
@click.option(
    "--base",
    help="Base image of the per-paper images the tasks start from (as for `images build`).",
)
@click.option(
    "--agent-network",
    type=click.Choice(["no-network", "public"]),
    default="no-network",
    show_default=True,
    help="Harbor's network mode for the agent phase (task.toml [agent] network_mode); `public` "
    "for Harbor environments that cannot switch the network between phases.",
)
def export_harbor_cmd(
    pset: tuple[str, ...], dest: Path, name: str | None, base: str | None, agent_network: str
) -> None:
    """One Harbor task per snippet (task.toml, instruction.md, environment/Dockerfile FROM the
    paper's image, tests/test.sh with rcb-env's grading, solution/solve.sh), the dataset's
    metric.py (the paper's rates) and registry.json. Build the images first:
    `rcb-env images build --pset NAME`; run Harbor in DIR with `--registry-path registry.json`."""
    from rcb_env.integrations.harbor import export_harbor
    from rcb_env.sandbox.backends.docker import images as img

    loaded = load_selection(pset, ())
    print_failures(loaded)
    cfg: Any = img.ImageConfig() if base is None else img.ImageConfig(base=base)
    label = name or (Path(pset[0]).name if pset else "rcb-env-bundled")
    report = export_harbor(
        loaded,
        dest,
        image_for=lambda paper: img.image_tag(paper, cfg),
        name=label,
        agent_network=agent_network,  # type: ignore[arg-type]
    )
    out.print(
        f"{len(report.tasks)} Harbor tasks from {len(report.images)} papers -> {dest} "
        f"(registry.json: {label}); left out: {len(report.skipped)}",
        highlight=False,
        soft_wrap=True,
    )
    for line in report.skipped:
        out.print(f"  left out {line}", highlight=False, soft_wrap=True)
