"""rcb-env eval: run an agent on every snippet."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rcb_env.cli.app import (
    EXIT_CEILING,
    EXIT_UNSCORED,
    cli,
    err,
    load_selection,
    narrow,
    out,
    paper_option,
    print_failures,
    progress_bar,
    pset_option,
    sandbox_options,
    shown,
    snippet_option,
    subset_option,
)
from rcb_env.cli.options import ModelField, field_at, model_option
from rcb_env.results.records import RECORDS
from rcb_env.results.render import print_summary
from rcb_env.results.summary import Summary
from rcb_env.runner import new_run_dir, run_eval
from rcb_env.runner.dispatchers import Dispatcher, dispatcher_for
from rcb_env.runner.episode import EvalConfig
from rcb_env.runner.eval import runnable
from rcb_env.runner.spec import FLAT, NEGATED, ModelChoice, RunSpec, SandboxRefusedError
from rcb_env.synth.manifest import test_set_mixed
from rcb_env.task.models import Pset

#: The flags of ``eval`` that set a field of the run (:class:`RunSpec`), in their order on the
#: command line, as click's extras beside what the field gives (type, default, help): flat
#: name (:data:`rcb_env.runner.spec.FLAT`) -> extras.
_FIELD_FLAGS: dict[str, dict[str, Any]] = {
    "agent": {},
    "jobs": {},
    "samples": {},
    "ray": {},
    "ray_warm": {},
    "runs_dir": {"file_okay": False},
    "resume": {"file_okay": False},
    "infra_retries": {},
    "retry_delay": {},
    "max_run_cost": {},
    "max_run_tokens": {},
    "max_steps": {},
    "max_wall": {"fallback_help": "Seconds."},
    "test_feedback": {},
    "paper_in_prompt": {},
    "timeout": {},
    "model": {},
    "base_url": {},
    "temperature": {},
    "max_tokens": {"fallback_help": "Token budget per episode."},
    "max_cost": {"fallback_help": "Cost budget per episode (USD, from --prices)."},
    "prices": {"dir_okay": False},
    "cache": {"file_okay": False},
    "concurrency": {},
    "no_paper": {"fallback_help": "single-shot: leave the paper out (ablation)."},
    "logprobs": {},
    "with_test_set": {},
}
#: Parts of the run whose fields are no model's (a mapping the agents check).
_KINDS = {"eval.model": ModelChoice}


def run_field(name: str) -> ModelField:
    """The field of the run a flat name sets."""
    return field_at(RunSpec, FLAT[name], _KINDS)


def _field_flags(names: list[str]) -> Callable[[Any], Any]:
    def decorate(f: Any) -> Any:
        for name in reversed(names):
            extra = dict(_FIELD_FLAGS[name])
            f = model_option(
                f"--{name.replace('_', '-')}",
                run_field(name),
                dest=name,
                negate=name in NEGATED,
                fallback_help=extra.pop("fallback_help", None),
                **extra,
            )(f)
        return f

    return decorate


@cli.command(name="eval")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A run file (YAML): the run's model nested (eval: {agent: ..., budgets: {max_wall_s: "
    "600}}, selection: {pset: [...]}), or these options by name (max_wall: 600); a flag given "
    "on the command line overrides it.",
)
@_field_flags(["agent"])
@pset_option
@paper_option
@snippet_option
@subset_option
@_field_flags(["jobs", "samples"])
@sandbox_options(base=True, grading=True, pool=True, config=False)
@_field_flags([n for n in _FIELD_FLAGS if n not in ("agent", "jobs", "samples")])
def eval_cmd(config_file: Path | None, **flags: Any) -> None:
    """Run an agent on every snippet; records go to runs/<id>/episodes.jsonl. The options can
    also come from a run file (--config run.yaml: the run's model nested, or the flags' names;
    a flag given here wins)."""
    spec = _spec(config_file, flags)
    cfg = spec.eval
    where = spec.dispatch
    dispatcher = dispatcher_for(where.ray, jobs=where.jobs, warm=where.warm)
    loaded = _selection(spec, cfg, dispatcher)
    mixed = test_set_mixed(loaded)
    if mixed and not spec.selection.with_test_set:
        raise click.UsageError(
            f"the selection mixes a synthesised training set with {len(mixed)} snippet(s) of its "
            f"test set (e.g. {mixed[0]}): evaluate them in separate runs, or pass --with-test-set"
        )
    run_dir = spec.resume if spec.resume is not None else new_run_dir(spec.runs_dir)
    summary = _run(spec, cfg, dispatcher, loaded, run_dir)
    _report(summary, run_dir)


def _spec(config_file: Path | None, flags: dict[str, Any]) -> RunSpec:
    """The run as one model: the run file's values, then the flags given on the command line
    (without a file: every flag, defaults included). A sandbox setting the backend refuses is
    a usage error, as in every command that takes --sandbox."""
    try:
        if config_file is None:
            return RunSpec.build(flags)
        ctx = click.get_current_context()
        given = {
            name: value
            for name, value in flags.items()
            if ctx.get_parameter_source(name)
            in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
        }
        return RunSpec.load(config_file, given)
    except SandboxRefusedError as exc:
        raise click.UsageError(str(exc)) from None


def _selection(spec: RunSpec, cfg: EvalConfig, dispatcher: Dispatcher) -> Pset:
    """The snippets to run, with what loading and this installation left out said first (the
    run records why too: the same rule, :func:`rcb_env.runner.eval.runnable`, for the same
    configuration and dispatcher)."""
    chosen = spec.selection
    loaded = load_selection(chosen.pset, chosen.papers, chosen.snippets)
    if chosen.subset is not None:
        loaded = narrow(loaded, chosen.subset)
    print_failures(loaded)
    for u in runnable(loaded, cfg, here=dispatcher.here)[1].unavailable:
        what = f"{u.paper}/{u.snippet}" if u.snippet else u.paper
        err.print(f"left out {what}: {u.reason}", highlight=False, soft_wrap=True)
    return loaded


def _run(
    spec: RunSpec, cfg: EvalConfig, dispatcher: Dispatcher, loaded: Pset, run_dir: Path
) -> Summary:
    """The episodes, with a progress bar."""
    with progress_bar("episodes") as progress:
        bar = progress.add_task("", total=None)
        return run_eval(
            loaded,
            cfg,
            run_dir,
            dispatcher=dispatcher,
            resume=spec.resume is not None,
            on_plan=lambda n: progress.update(bar, total=n),
            on_episode=lambda r: progress.update(
                bar, advance=1, description=f"{r.snippet_id}: {'pass' if r.passed else r.status}"
            ),
            infra_retries=spec.dispatch.infra_retries,
            retry_delay_s=spec.dispatch.retry_delay_s,
            ceiling=spec.ceiling,
        )


def _report(summary: Summary, run_dir: Path) -> None:
    """The rates, where the records are, and how to finish what could not be scored or run."""
    print_summary(out, summary, shown(run_dir))
    out.print(f"records: {shown(run_dir / RECORDS)}")
    if summary.stopped is not None:
        out.print(
            f"the run stopped at its ceiling with {summary.stopped.pending} episode(s) not run "
            f"(spent {summary.stopped.cost:.6g} USD, {summary.stopped.tokens} tokens); to "
            f"continue: rcb-env eval ... --resume {shown(run_dir)} with a higher "
            "--max-run-cost/--max-run-tokens (or none)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_CEILING)
    if summary.infra_errors:
        out.print(
            f"{summary.infra_errors} episode(s) could not be scored (infrastructure, excluded "
            f"above); once the cause is fixed: rcb-env eval ... --resume {shown(run_dir)}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_UNSCORED)
