"""rcb-env export: a run's trajectories for trainers (JSONL, a Hugging Face dataset, SFT chat)."""

from __future__ import annotations

from pathlib import Path

import click

from rcb_env.cli._app import cli, out


@cli.command(name="export")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "hf", "sft"]),
    default="jsonl",
    show_default=True,
    help="jsonl: trajectories; hf: a datasets dataset on disk; sft: chat JSONL of passing ones.",
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
    from rcb_env.rl.export import export

    report = export(run_dir, dest, fmt, keep_incomplete=keep_incomplete)  # type: ignore[arg-type]
    out.print(
        f"{report.rows} rows from {report.source} -> {dest} ({fmt}); {report.groups} groups; "
        f"dropped {report.dropped_groups} incomplete groups ({report.dropped_rows} rows); "
        f"tokens: {report.tokens}",
        highlight=False,
        soft_wrap=True,
    )
