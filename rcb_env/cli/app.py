"""What every command shares: the group, the consoles, the common options and helpers, and the
exit codes."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from rcb_env import logs
from rcb_env.cli.options import ModelField, model_option
from rcb_env.episode.config import BudgetConfig, EnvConfig
from rcb_env.errors import ConfigError
from rcb_env.runner.spec import sandbox_settings
from rcb_env.sandbox import SandboxConfig, backend_names
from rcb_env.task import loader
from rcb_env.task.models import Pset
from rcb_env.task.selection import combine, select_snippets
from rcb_env.validation.dispatcher import Dispatcher, dispatcher_for
from rcb_env.validation.progress import Bar

#: Exit codes of every command (documented in docs/cli.md).
EXIT_OK = 0
EXIT_FINDINGS = 1
"""The command ran and found a problem in what it checked (a paper that does not load, a
reference that fails, a leak, an attack that passed)."""
EXIT_USAGE = 2
"""The command line is wrong (click's own code)."""
EXIT_UNSCORED = 3
"""eval: some episodes could not be scored (infrastructure); resume the run later."""
EXIT_ERROR = 4
"""rcb-env could not do the job at all (an :class:`~rcb_env.errors.RcbError`: bad settings,
malformed tasks, no sandbox)."""
EXIT_CONTROL_MISSED = 5
"""audit: the positive control's seeded leak was not found, so a clean audit proves nothing."""
EXIT_CEILING = 6
"""eval: the run stopped at its spending ceiling (--max-run-cost/--max-run-tokens) with episodes
not run; resume it with a higher ceiling."""


@click.group()
@click.option("--log-json", is_flag=True, help="Structured logs on stderr as JSON lines.")
@click.option("--log-level", default="warning", show_default=True)
def cli(log_json: bool, log_level: str) -> None:
    """rcb-env: ResearchCodeBench-style snippets as environment episodes."""
    logs.configure(json=log_json, level=log_level)


# Piped output (CI logs, files) gets wide tables instead of Rich's 80-column default.
out = Console()
err = Console(stderr=True)
for _console in (out, err):
    if not _console.is_terminal and "COLUMNS" not in os.environ:
        _console.width = 140


def load_selection(
    pset: str | tuple[str, ...] | None, papers: tuple[str, ...], snippets: tuple[str, ...] = ()
) -> Pset:
    """The ``--pset`` value(s) loaded (several: one combined selection, each benchmark kept as a
    part with its own denominators), narrowed to ``--paper``/``--snippet``."""
    names: tuple[str, ...] = (pset,) if isinstance(pset, str) else tuple(pset or ())
    roots: list[str | Path] = list(names) or [loader.bundled_root()]
    wanted = set(papers) if papers else None
    if len(roots) == 1:
        loaded = loader.load(roots[0], papers=wanted)
    else:
        parts = [loader.load(root) for root in roots]
        if wanted is not None:  # --paper picks from whichever benchmark has it
            known = {p.id for x in parts for p in x.papers} | {
                f.paper for x in parts for f in x.failures
            }
            if wanted - known:
                raise click.UsageError(f"no paper named {', '.join(sorted(wanted - known))}")
            parts = [
                x.model_copy(
                    update={
                        "papers": tuple(p for p in x.papers if p.id in wanted),
                        "failures": tuple(f for f in x.failures if f.paper in wanted),
                    }
                )
                for x in parts
            ]
        loaded = combine(parts)
    try:
        return select_snippets(loaded, snippets)
    except KeyError as exc:
        raise click.UsageError(str(exc.args[0])) from None


@dataclass(frozen=True)
class Selection:
    """The ``--pset``, ``--paper`` and ``--snippet`` values of a command
    (:func:`selection_options`), loaded when the command asks."""

    psets: tuple[str, ...] = ()
    papers: tuple[str, ...] = ()
    snippets: tuple[str, ...] = ()

    def load(self) -> Pset:
        """The selection loaded (:func:`load_selection`)."""
        return load_selection(self.psets, self.papers, self.snippets)


def shown(path: Path | str) -> str:
    """A path as the user would type it: relative to the working folder when inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def sandbox_or_usage(
    backend: str,
    options: tuple[str, ...] = (),
    grading: str = "warm",
    shorthands: dict[str, Any] | None = None,
) -> SandboxConfig:
    """The sandbox flags as a config (:func:`rcb_env.runner.spec.sandbox_settings`, the one
    mapping); what the backend refuses is a usage error (exit 2) naming the backend and the
    option."""
    try:
        return sandbox_settings(backend, options, grading=grading, shorthands=shorthands)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def progress_bar(label: str) -> Progress:
    """A transient progress bar on stderr: label, bar, n/total, elapsed, current item."""
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
    )


class _RichBar:
    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress = progress
        self.task = task

    def advance(self, description: str) -> None:
        self.progress.update(self.task, advance=1, description=description)

    def planned(self, total: int) -> None:
        self.progress.update(self.task, total=total)


@contextmanager
def meter(label: str, total: int | None = None) -> Iterator[Bar]:
    """A :data:`~rcb_env.validation.progress.Meter` drawn by :func:`progress_bar`."""
    with progress_bar(label) as progress:
        yield _RichBar(progress, progress.add_task("", total=total))


def print_failures(p: Pset) -> None:
    for f in p.failures:
        err.print(
            f"[red]load error[/red] paper {f.paper}: {f.message}", highlight=False, soft_wrap=True
        )


pset_option = click.option(
    "--pset",
    multiple=True,
    help="A benchmark's name (researchcodebench, lmr-bench: its copy from `rcb-env get`), a "
    "task folder of a known layout (a pset root, one paper folder, LMR-Bench task folders). "
    "Repeatable: several benchmarks as one selection, each with its own denominators. "
    "Default: the bundled tasks.",
)


def _dispatcher(ctx: click.Context, param: click.Parameter, value: str | None) -> Dispatcher:
    del ctx, param
    return dispatcher_for(value)


dispatcher_option = click.option(
    "--ray",
    "dispatcher",
    callback=_dispatcher,
    help="On Ray: 'local' (a Ray instance here) or a cluster's address whose nodes declare the "
    "rcb_sandbox resource. Needs rcb-env[ray].",
)
"""``--ray``, given to the command as the dispatcher it chooses (this machine without it)."""
paper_option = click.option(
    "--paper", "papers", multiple=True, help="Only this paper (repeatable)."
)
subset_option = click.option(
    "--subset",
    help="A named subset of the snippets (`verified`: reference solid and mutation score at or "
    "above the threshold, see docs/test-strength.md; `hard`: the hardest tenth by the published "
    "solve rates; `solve-rate:LO:HI`: published solve rate in [LO, HI], both from "
    "$RCB_PUBLISHED_RESULTS, see docs/tasks.md; for a synthesised set, `level:easy[,medium]`, "
    "`lines:LO:HI`, `mutation-score:LO:HI` from its synth.json, see docs/synth.md; or a subset "
    "file).",
)


def narrow(loaded: Pset, subset: str) -> Pset:
    """``loaded`` narrowed to the snippets of ``subset`` (a ``--subset`` value): a shipped or
    difficulty subset, a subset file, or a synthesised set's difficulty subset.

    Raises:
        ConfigError: no such subset (or its data is missing).
    """
    from rcb_env.synth import manifest as synth_manifest
    from rcb_env.task.selection import load_subset, select_subset

    if synth_manifest.is_synth_subset(subset):
        return synth_manifest.select(loaded, subset)
    return select_subset(loaded, load_subset(subset))


snippet_option = click.option(
    "--snippet", "snippets", multiple=True, help="Only this snippet: <paper>/<name> or <name>."
)
sandbox_option = click.option(
    "--sandbox",
    type=click.Choice(["auto", *backend_names()]),
    default="auto",
    show_default=True,
    help="auto = bwrap when it really runs here; docker needs `rcb-env images build`; "
    "local has NO isolation.",
)
backend_option = click.option(
    "--sandbox-option",
    "sandbox_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="One of the backend's own settings (repeatable; docs/sandboxes.md#backend-options): "
    'pool_size=2, cgroup_parent=my-group; a list or mapping as JSON (read_only=["/srv/x"]). '
    "--base, --pool and --cgroup-limits are shorthands for three of them.",
)
base_option = click.option(
    "--base",
    help="docker: base image the paper images were built from (--sandbox-option docker_base=).",
)
pool_option = click.option(
    "--pool",
    default=0,
    show_default=True,
    help="docker: warm containers per image (--sandbox-option pool_size=).",
)
cgroup_option = click.option(
    "--cgroup-limits",
    type=click.Choice(["required", "best-effort", "off"]),
    help="bwrap: refuse to run without memory and pids limits (required, the default), set "
    "what the host allows (best-effort), or rely on rlimits alone (off) "
    "(--sandbox-option cgroup_limits=).",
)


grading_option = click.option(
    "--grading",
    type=click.Choice(["warm", "cold"]),
    default="warm",
    show_default=True,
    help="warm: each grading forks from a per-paper process that has imported the tests' "
    "third-party modules, in namespaces of its own (papers whose imports start threads grade "
    "cold); cold: a fresh interpreter per grading.",
)


def sandbox_options(
    *, base: bool = False, pool: bool = False, grading: bool = False, config: bool = True
) -> Callable[[Any], Any]:
    """--sandbox, --sandbox-option, --cgroup-limits and the other shorthands this command
    takes (--base, --grading, --pool). With ``config`` the command gets them as one
    ``sandbox``, a :class:`SandboxConfig` (what the backend refuses: a usage error); without,
    each by its name (``eval`` maps them in its run spec)."""
    chosen = [sandbox_option, backend_option]
    chosen += [base_option] if base else []
    chosen += [cgroup_option]
    chosen += [grading_option] if grading else []
    chosen += [pool_option] if pool else []

    def decorate(f: Any) -> Any:
        command = f
        if config:

            @functools.wraps(f)
            def command(**flags: Any) -> Any:
                shorthands = {k: flags.pop(k, None) for k in ("base", "pool", "cgroup_limits")}
                flags["sandbox"] = sandbox_or_usage(
                    flags.pop("sandbox"),
                    flags.pop("sandbox_options"),
                    flags.pop("grading", "warm"),
                    shorthands,
                )
                return f(**flags)

        for option in reversed(chosen):
            command = option(command)
        return command

    return decorate


def selection_options(*, snippets: bool = False) -> Callable[[Any], Any]:
    """--pset and --paper (and --snippet): the command gets them as one ``selection``
    (:class:`Selection`)."""
    chosen = [pset_option, paper_option] + ([snippet_option] if snippets else [])

    def decorate(f: Any) -> Any:
        @functools.wraps(f)
        def command(**flags: Any) -> Any:
            flags["selection"] = Selection(
                flags.pop("pset"), flags.pop("papers"), flags.pop("snippets", ())
            )
            return f(**flags)

        for option in reversed(chosen):
            command = option(command)
        return command

    return decorate


def episode_options(f: Any) -> Any:
    """The per-episode settings every command that runs episodes takes: --max-steps,
    --max-wall, --test-feedback (generated from the fields they set: each default written once,
    in its model)."""

    def field(model: type[BaseModel], name: str) -> ModelField:
        return ModelField(model, name, model.model_fields[name])

    for flag, part, dest, fallback in reversed(
        (
            ("--max-steps", field(BudgetConfig, "max_steps"), "max_steps", None),
            ("--max-wall", field(BudgetConfig, "max_wall_s"), "max_wall", "Seconds."),
            ("--test-feedback", field(EnvConfig, "test_feedback"), "test_feedback", None),
        )
    ):
        f = model_option(flag, part, dest=dest, fallback_help=fallback)(f)
    return f
