"""rcb-env agents: the agent CLIs that run inside an episode's sandbox (list, install)."""

from __future__ import annotations

import click
from rich.table import Table

from rcb_env.cli.app import cli, out


@cli.group(name="agents")
def agents_group() -> None:
    """Agent CLIs run inside the episode's sandbox (claude-code, codex, mini-swe-agent-cli)."""


@agents_group.command(name="list")
def agents_list() -> None:
    """Each agent CLI: its pinned version, installed or not, the wire format it speaks."""
    from rcb_env.agent import agent_programs

    table = Table("agent", "version", "package", "installed", "wire", "--model")
    for a in agent_programs():
        installed = "yes" if a["installed"] else "no"
        package = f"{a['package']} ({a['installer']})"
        model = f"{a['provider']}:NAME"
        table.add_row(a["name"], a["version"], package, installed, a["wire"], model)
    out.print(table)


@agents_group.command(name="install")
@click.argument("names", nargs=-1, required=True)
def agents_install(names: tuple[str, ...]) -> None:
    """Install agent CLIs by name (pinned, into $RCB_ENV_HOME/agents/; offline afterwards)."""
    from rcb_env.agent import install_agent_program

    for name in names:
        folder = install_agent_program(name, log=lambda m: out.print(m, highlight=False))
        out.print(f"{name}: installed in {folder}", highlight=False)
