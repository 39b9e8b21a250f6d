"""Command line: one module per command; they parse arguments, build objects and call library
functions (no logic lives here). Renderers live beside the results they render."""

from __future__ import annotations

import sys

from rcb_env.cli import (
    agents,
    audit,
    benchmark,
    conformance,
    eval,
    export,
    hacks,
    images,
    mcp,
    regrade,
    report,
    results,
    serve,
    synth,
    tasks,
    validate,
)
from rcb_env.cli.app import EXIT_ERROR, cli, err
from rcb_env.errors import RcbError

__all__ = ["cli", "main"]
_COMMANDS = (
    agents,
    audit,
    benchmark,
    conformance,
    eval,
    export,
    hacks,
    images,
    mcp,
    regrade,
    report,
    results,
    serve,
    synth,
    tasks,
    validate,
)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except RcbError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_ERROR)
