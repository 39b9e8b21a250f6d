"""rcb-env eval: run an agent on every snippet."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

import click

from rcb_env.agent import model_settings
from rcb_env.cli._app import (
    EXIT_UNSCORED,
    _load,
    _print_failures,
    _progress,
    _sandbox_config,
    _shown,
    base_option,
    cgroup_option,
    cli,
    episode_options,
    err,
    grading_option,
    out,
    paper_option,
    pset_option,
    sandbox_option,
    snippet_option,
)
from rcb_env.episode.env import EnvConfig
from rcb_env.grading.grader import GradingConfig
from rcb_env.results.render import print_summary
from rcb_env.runner import BudgetConfig, EvalConfig, new_run_dir, run_eval
from rcb_env.runner.eval import runnable
from rcb_env.sandbox import BackendName
from rcb_env.tools.toolbox import Feedback


@cli.command(name="eval")
@click.option(
    "--agent", required=True, help="oracle, null, single-shot, tools, or package.module:Class."
)
@pset_option
@paper_option
@snippet_option
@click.option("--jobs", default=1, show_default=True, help="Episodes in parallel.")
@click.option("--samples", default=1, show_default=True, help="Episodes per snippet.")
@sandbox_option
@base_option
@cgroup_option
@grading_option
@click.option("--pool", default=0, show_default=True, help="docker: warm containers per image.")
@click.option(
    "--ray",
    "ray_address",
    help="Run the episodes on Ray: 'local' (a Ray instance here with --jobs sandbox slots) or a "
    "cluster's address (its nodes declare the rcb_sandbox resource). Needs rcb-env[ray].",
)
@click.option(
    "--ray-warm",
    is_flag=True,
    help="With --ray: one long-lived worker per node (its sandbox templates and caches kept), "
    "the groups of a paper routed to the same worker.",
)
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"))
@click.option(
    "--resume",
    type=click.Path(file_okay=False, path_type=Path),
    help="Continue this run: only missing and infrastructure-failed episodes run.",
)
@click.option(
    "--infra-retries",
    default=1,
    show_default=True,
    help="Rounds in which episodes that failed for infrastructure reasons run again.",
)
@click.option(
    "--retry-delay", default=5.0, show_default=True, help="Seconds x round before a retry round."
)
@episode_options
@click.option(
    "--paper-in-prompt", type=click.Choice(["full", "outline"]), default="full", show_default=True
)
@click.option("--timeout", type=float, help="Seconds per grading run (default 300).")
@click.option("--model", help="For single-shot/tools: openai:<model> or anthropic:<model>.")
@click.option("--base-url", help="OpenAI-compatible or Anthropic endpoint (vLLM, a local server).")
@click.option("--temperature", type=float, help="Sampling temperature (default: provider's).")
@click.option("--max-tokens", type=int, help="Token budget per episode.")
@click.option("--max-cost", type=float, help="Cost budget per episode (USD, from --prices).")
@click.option("--prices", type=click.Path(dir_okay=False, path_type=Path), help="JSON price table.")
@click.option("--cache", type=click.Path(file_okay=False, path_type=Path), help="Response cache.")
@click.option("--concurrency", default=4, show_default=True, help="Model requests in flight.")
@click.option("--no-paper", is_flag=True, help="single-shot: leave the paper out (ablation).")
@click.option("--logprobs", is_flag=True, help="Ask the server for token log-probabilities.")
def eval_cmd(
    agent: str,
    pset: tuple[str, ...],
    papers: tuple[str, ...],
    snippets: tuple[str, ...],
    jobs: int,
    samples: int,
    sandbox: BackendName,
    cgroup_limits: str | None,
    grading: str,
    runs_dir: Path,
    resume: Path | None,
    infra_retries: int,
    retry_delay: float,
    max_steps: int,
    max_wall: float,
    test_feedback: Feedback,
    paper_in_prompt: Literal["full", "outline"],
    timeout: float | None,
    base: str | None,
    pool: int,
    ray_address: str | None,
    ray_warm: bool,
    model: str | None,
    base_url: str | None,
    temperature: float | None,
    max_tokens: int | None,
    max_cost: float | None,
    prices: Path | None,
    cache: Path | None,
    concurrency: int,
    no_paper: bool,
    logprobs: bool,
) -> None:
    """Run an agent on every snippet; records go to runs/<id>/episodes.jsonl."""
    loaded = _load(pset, papers, snippets)
    _print_failures(loaded)
    # (run_eval leaves them out and records why; said here before the run starts)
    for u in runnable(loaded, interpreter_given=sandbox == "docker")[1].unavailable:
        what = f"{u.paper}/{u.snippet}" if u.snippet else u.paper
        err.print(f"left out {what}: {u.reason}", highlight=False, soft_wrap=True)
    model_cfg = None
    if model is not None:
        model_cfg = model_settings(
            {
                "spec": model,
                "base_url": base_url,
                "temperature": temperature,
                "concurrency": concurrency,
                "cache_dir": cache,
                "prices": prices,
                "logprobs": logprobs,
            }
        )
    cfg = EvalConfig(
        agent=agent,
        model=model_cfg,
        with_paper=not no_paper,
        samples=samples,
        env=EnvConfig(test_feedback=test_feedback, paper_in_prompt=paper_in_prompt),
        sandbox=_sandbox_config(sandbox, base, pool, cgroup_limits, grading),
        grading=GradingConfig() if timeout is None else GradingConfig(timeout_s=timeout),
        budgets=BudgetConfig(
            max_steps=max_steps, max_wall_s=max_wall, max_tokens=max_tokens, max_cost=max_cost
        ),
    )
    run_dir = resume if resume is not None else new_run_dir(runs_dir)
    with _progress("episodes") as progress:
        bar = progress.add_task("", total=None)
        summary = run_eval(
            loaded,
            cfg,
            run_dir,
            jobs=jobs,
            resume=resume is not None,
            on_plan=lambda n: progress.update(bar, total=n),
            on_episode=lambda r: progress.update(
                bar, advance=1, description=f"{r.snippet_id}: {'pass' if r.passed else r.status}"
            ),
            infra_retries=infra_retries,
            retry_delay_s=retry_delay,
            ray_address=ray_address,
            ray_warm=ray_warm,
        )
    print_summary(out, summary, _shown(run_dir))
    out.print(f"records: {_shown(run_dir / 'episodes.jsonl')}")
    if summary.infra_errors:
        out.print(
            f"{summary.infra_errors} episode(s) could not be scored (infrastructure, excluded "
            f"above); once the cause is fixed: rcb-env eval ... --resume {_shown(run_dir)}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_UNSCORED)
