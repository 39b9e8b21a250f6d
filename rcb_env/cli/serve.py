"""rcb-env serve: episodes for trainers on other machines, in OpenEnv's session protocol."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import click

from rcb_env.cli.app import (
    Selection,
    cli,
    episode_options,
    err,
    narrow,
    sandbox_options,
    selection_options,
    shown,
    subset_option,
)
from rcb_env.cli.options import ModelField, model_option
from rcb_env.episode.env import EnvConfig
from rcb_env.grading.grader import DEFAULT_TIMEOUT_S, GradingConfig
from rcb_env.runner import BudgetConfig, EvalConfig, new_run_dir
from rcb_env.sandbox import SandboxConfig
from rcb_env.tools.toolbox import Feedback


def _limit_options(f: Any) -> Any:
    """--max-episodes, --max-connections, --idle-s, --episode-wall-s, --drain-s: generated from
    the fields of :class:`~rcb_env.integrations.serve.sessions.ServeLimits`."""
    from rcb_env.integrations.serve.sessions import ServeLimits

    for name in reversed(list(ServeLimits.model_fields)):
        field = ModelField(ServeLimits, name, ServeLimits.model_fields[name])
        f = model_option("--" + name.replace("_", "-"), field, dest=name)(f)
    return f


@cli.command(name="serve")
@selection_options(snippets=True)
@subset_option
@sandbox_options(grading=True)
@episode_options
@click.option(
    "--timeout", type=float, help=f"Seconds per grading run (default {DEFAULT_TIMEOUT_S:g})."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8000, show_default=True, help="The port (0: any free one).")
@click.option(
    "--token",
    envvar="RCB_SERVE_TOKEN",
    help="The secret a client must carry (required off 127.0.0.1: generated and printed unless "
    "given). Base URL http://host:port/<token>, or http://rcb:<token>@host:port.",
)
@click.option("--ping-s", default=20.0, show_default=True, help="Websocket ping interval (0: off).")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"))
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Record into this run folder (a server restarted on it continues the run).",
)
@_limit_options
def serve_cmd(
    selection: Selection,
    subset: str | None,
    sandbox: SandboxConfig,
    max_steps: int,
    max_wall: float,
    test_feedback: Feedback,
    timeout: float | None,
    host: str,
    port: int,
    token: str | None,
    ping_s: float,
    runs_dir: Path,
    run_dir: Path | None,
    **limits: Any,
) -> None:
    """Serve episodes of the selection over OpenEnv's websocket protocol (/ws), so that a
    trainer's OpenEnv client runs them here: reset(task_id="<paper>/<snippet>") or a seeded
    draw, one tool action per step ({"tool": "submit", "body": ...}), the reward on the
    observation at the end (null when the infrastructure failed). Every episode is recorded
    as `rcb-env eval` records one. SIGTERM drains."""
    from rcb_env.integrations.serve.app import TOKEN_PATTERN, needs_token, serve
    from rcb_env.integrations.serve.sessions import EpisodeServer, ServeLimits

    if token is None and needs_token(host):
        token = secrets.token_urlsafe(24)
    if token is not None and not TOKEN_PATTERN.fullmatch(token):
        raise click.BadParameter(
            "at least 16 characters of A-Z a-z 0-9 _ ~ . - (it stands in URLs as it is)",
            param_hint="--token",
        )
    loaded = selection.load()
    if subset is not None:
        loaded = narrow(loaded, subset)
    cfg = EvalConfig(
        agent="openenv",
        env=EnvConfig(test_feedback=test_feedback),
        sandbox=sandbox,
        grading=GradingConfig() if timeout is None else GradingConfig(timeout_s=timeout),
        budgets=BudgetConfig(max_steps=max_steps, max_wall_s=max_wall),
    )
    folder = run_dir if run_dir is not None else new_run_dir(runs_dir)
    server = EpisodeServer(loaded, cfg, folder, ServeLimits.model_validate(limits))
    err.print(
        f"rcb-env serve: {len(server.task_ids)} tasks; records in {shown(folder)}",
        highlight=False,
        soft_wrap=True,
    )
    serve(
        server,
        host=host,
        port=port,
        token=token,
        ping_s=ping_s,
        on_ready=lambda url: err.print(
            f"rcb-env serve: listening; base URL {url}", highlight=False, soft_wrap=True
        ),
    )
    err.print(f"rcb-env serve: stopped; served {dict(server.served)}", highlight=False)
