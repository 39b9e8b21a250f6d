"""Command line: parses arguments, builds objects, calls library functions. No logic lives here."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Literal, get_args

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.tree import Tree

from rcb_env import logs
from rcb_env.agent import model_settings
from rcb_env.episode.env import EnvConfig
from rcb_env.errors import RcbError
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.results import Rates, Summary, read_records, summarize
from rcb_env.results.compare import compare
from rcb_env.runner import BudgetConfig, EvalConfig, new_run_dir, run_eval
from rcb_env.sandbox import BackendName, SandboxConfig, SandboxFactory, backend_names
from rcb_env.task import loader
from rcb_env.task.models import DateField, Paper, Pset
from rcb_env.task.selection import select_papers, select_snippets
from rcb_env.tools.toolbox import Feedback
from rcb_env.validation.validate import Status, ValidationReport, planned_runs, validate

# Piped output (CI logs, files) gets wide tables instead of Rich's 80-column default.
out = Console()
err = Console(stderr=True)
for _console in (out, err):
    if not _console.is_terminal and "COLUMNS" not in os.environ:
        _console.width = 140


def _load(pset: Path | None, papers: tuple[str, ...], snippets: tuple[str, ...] = ()) -> Pset:
    root = pset if pset is not None else loader.bundled_root()
    loaded = loader.load(root, papers=set(papers) if papers else None)
    try:
        return select_snippets(loaded, snippets)
    except KeyError as exc:
        raise click.UsageError(str(exc.args[0])) from None


def _shown(path: Path | str) -> str:
    """A path as the user would type it: relative to the working folder when inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _sandbox_config(backend: BackendName, base: str | None, pool: int = 0) -> SandboxConfig:
    """The --sandbox/--base/--pool options as a config (base: only given ones override)."""
    cfg = SandboxConfig(backend=backend, pool_size=pool)
    return cfg if base is None else cfg.model_copy(update={"docker_base": base})


def _progress(label: str) -> Progress:
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


def _print_failures(p: Pset) -> None:
    for f in p.failures:
        err.print(
            f"[red]load error[/red] paper {f.paper}: {f.message}", highlight=False, soft_wrap=True
        )


@click.group()
@click.option("--log-json", is_flag=True, help="Structured logs on stderr as JSON lines.")
@click.option("--log-level", default="warning", show_default=True)
def cli(log_json: bool, log_level: str) -> None:
    """rcb-env: ResearchCodeBench-style snippets as environment episodes."""
    logs.configure(json=log_json, level=log_level)


pset_option = click.option(
    "--pset",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A pset root (papers.yaml + paper folders) or one paper folder. Default: bundled tasks.",
)
paper_option = click.option(
    "--paper", "papers", multiple=True, help="Only this paper (repeatable)."
)
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
base_option = click.option("--base", help="docker: base image the paper images were built from.")


@cli.command()
@pset_option
@paper_option
@click.option(
    "--after", type=click.DateTime(["%Y-%m-%d"]), help="Keep papers dated after this day."
)
@click.option(
    "--before", type=click.DateTime(["%Y-%m-%d"]), help="Keep papers dated before this day."
)
@click.option(
    "--date-field",
    type=click.Choice(get_args(DateField)),
    default="first_commit_date",
    show_default=True,
    help="Which papers.yaml date --after/--before compare (the official harness uses "
    "first_commit_date for contamination).",
)
@click.option("--tree", is_flag=True, help="Show every snippet with its nesting and weight.")
@click.option("--json", "as_json", is_flag=True, help="Print the loaded specs as JSON.")
def tasks(
    pset: Path | None,
    papers: tuple[str, ...],
    after: dt.datetime | None,
    before: dt.datetime | None,
    date_field: DateField,
    tree: bool,
    as_json: bool,
) -> None:
    """List papers and snippets: counts, weights, nesting."""
    loaded = select_papers(
        _load(pset, papers),
        after=after.date() if after else None,
        before=before.date() if before else None,
        field=date_field,
    )
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "root": str(loaded.root),
                    "papers": [
                        p.model_dump(mode="json", exclude={"annotated_files"})
                        for p in loaded.papers
                    ],
                    "failures": [f.model_dump(mode="json") for f in loaded.failures],
                }
            )
        )
    else:
        _tasks_table(loaded)
        if tree:
            for p in loaded.papers:
                out.print(_snippet_tree(p))
    _print_failures(loaded)
    sys.exit(1 if loaded.failures else 0)


def _tasks_table(p: Pset) -> None:
    table = Table(title=f"Tasks in {_shown(p.root)}")
    for col in (
        "paper",
        "date",
        "files",
        "snippets",
        "top-level",
        "max depth",
        "weight",
        "distinct",
    ):
        table.add_column(
            col, justify="left" if col in ("paper", "date") else "right", no_wrap=col == "paper"
        )
    for paper in p.papers:
        s = paper.snippets
        date = paper.meta.first_commit_date or paper.meta.arxiv_v1_date
        table.add_row(
            paper.id,
            str(date or "-"),
            str(len(paper.annotated_files)),
            str(len(s)),
            str(sum(1 for x in s if x.depth == 0)),
            str(max((x.depth for x in s), default=-1) + 1),
            str(paper.total_weight),
            str(sum(x.distinct_lines for x in s)),
        )
    allsn = p.snippets
    table.add_section()
    table.add_row(
        f"{len(p.papers)} papers",
        "",
        str(sum(len(x.annotated_files) for x in p.papers)),
        str(len(allsn)),
        str(sum(1 for x in allsn if x.depth == 0)),
        str(max((x.depth for x in allsn), default=-1) + 1),
        str(sum(x.weight for x in allsn)),
        str(sum(x.distinct_lines for x in allsn)),
    )
    out.print(table)


def _snippet_tree(paper: Paper) -> Tree:
    root = Tree(f"[bold]{paper.id}[/bold] ({paper.total_weight} lines)")
    nodes: dict[str, Tree] = {}
    for s in paper.snippets:
        parent = nodes[s.parent] if s.parent is not None else root
        label = f"{s.name} [dim]{s.file}:{s.start_line}-{s.end_line}[/dim] weight {s.weight}"
        nodes[s.name] = parent.add(label, highlight=False)
    return root


@cli.command(name="validate")
@pset_option
@paper_option
@click.option("--jobs", default=1, show_default=True, help="Gradings in parallel.")
@click.option("--repeat", default=1, show_default=True, help="Runs of each reference (flakiness).")
@click.option(
    "--timeout", type=float, help="Seconds per test run (default 300; overlays may raise)."
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def validate_cmd(
    pset: Path | None,
    papers: tuple[str, ...],
    jobs: int,
    repeat: int,
    timeout: float | None,
    json_path: Path | None,
) -> None:
    """Check every snippet: reference passes; masked and `pass` versions fail."""
    loaded = _load(pset, papers)
    _print_failures(loaded)
    cfg = GradingConfig() if timeout is None else GradingConfig(timeout_s=timeout)
    grader = Grader(cfg)
    with _progress("validating") as progress:
        bar = progress.add_task("", total=planned_runs(loaded, repeat))
        report = validate(
            loaded,
            grader,
            jobs=jobs,
            repeat=repeat,
            on_done=lambda label: progress.update(bar, advance=1, description=label),
        )
    _validation_table(report)
    if json_path is not None:
        json_path.write_text(report.model_dump_json(indent=2))
        out.print(f"report written to {json_path}")
    sys.exit(0 if report.ok else 1)


def _validation_table(report: ValidationReport) -> None:
    table = Table(title=f"Validation of {_shown(report.root)} (reference x{report.repeat})")
    table.add_column("paper", no_wrap=True)
    for col in ("snippets", "weight", *[s.value for s in Status], "reference", "seconds"):
        table.add_column(col, justify="right")
    for p in report.papers:
        counts = {s: 0 for s in Status}
        for s in p.snippet_reports:
            counts[s.status] += 1
        ref_passes = sum(r.outcome == "passed" for r in p.reference)
        table.add_row(
            p.id,
            str(p.snippets),
            str(p.weight),
            *[str(counts[s]) for s in Status],
            f"{ref_passes}/{len(p.reference)}",
            f"{p.duration_s:.1f}",
        )
    for f in report.load_failures:
        table.add_row(f"[red]{f.paper}[/red]", "load error", *[""] * (len(Status) + 3))
    total = report.counts()
    table.add_section()
    table.add_row(
        "total",
        str(sum(p.snippets for p in report.papers)),
        str(sum(p.weight for p in report.papers)),
        *[str(total[s]) for s in Status],
        "",
        "",
    )
    out.print(table)
    for p in report.papers:
        if p.reference and not all(r.outcome == "passed" for r in p.reference):
            bad = next(r for r in p.reference if r.outcome != "passed")
            out.print(
                f"[red]{p.id}[/red] reference {bad.outcome}: {bad.detail}",
                highlight=False,
                soft_wrap=True,
            )
            if p.known_issue:
                out.print(f"  known issue: {p.known_issue}", highlight=False, soft_wrap=True)
        for s in p.snippet_reports:
            if s.status is Status.WEAK:
                which = "masked" if s.masked.outcome == "passed" else "pass-mutant"
                out.print(
                    f"[yellow]weak[/yellow] {s.id}: the {which} version passes", highlight=False
                )
    for f in report.load_failures:
        out.print(f"[red]load error[/red] {f.paper}: {f.message}", highlight=False, soft_wrap=True)


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
@click.option("--pool", default=0, show_default=True, help="docker: warm containers per image.")
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
@click.option("--max-steps", type=int, default=50, show_default=True)
@click.option("--max-wall", type=float, default=1800.0, show_default=True, help="Seconds.")
@click.option(
    "--test-feedback",
    type=click.Choice(["full", "summary", "none"]),
    default="summary",
    show_default=True,
)
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
    pset: Path | None,
    papers: tuple[str, ...],
    snippets: tuple[str, ...],
    jobs: int,
    samples: int,
    sandbox: BackendName,
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
        sandbox=_sandbox_config(sandbox, base, pool),
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
        )
    _summary_table(summary, _shown(run_dir))
    out.print(f"records: {_shown(run_dir / 'episodes.jsonl')}")
    if summary.infra_errors:
        out.print(
            f"{summary.infra_errors} episode(s) could not be scored (infrastructure, excluded "
            f"above); once the cause is fixed: rcb-env eval ... --resume {_shown(run_dir)}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(3)


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def summary(run_dir: Path, as_json: bool) -> None:
    """Scaled and plain pass rates of a run, overall and per paper."""
    s = summarize(read_records(run_dir / "episodes.jsonl"))
    if as_json:
        out.print_json(s.model_dump_json())
    else:
        _summary_table(s, _shown(run_dir))


@cli.command(name="compare")
@click.argument(
    "run_dirs",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--force", is_flag=True, help="Compare runs with different tasks or budgets anyway.")
def compare_cmd(run_dirs: tuple[Path, ...], force: bool) -> None:
    """Runs side by side: pass rates (± std), tokens, cost, steps, time, infra errors."""
    rows = compare(list(run_dirs), force=force)
    table = Table(title="Comparison")
    table.add_column("run", no_wrap=True)
    table.add_column("agent")
    for col in ("scaled %", "plain %", "episodes", "tokens", "cost $", "steps", "wall s", "infra"):
        table.add_column(col, justify="right")
    for r in rows:
        o = r.summary.overall
        std = r.summary.samples > 1
        table.add_row(
            r.run,
            r.agent,
            "-" if o is None else f"{o.scaled:.2f}" + (f" ± {o.scaled_std:.2f}" if std else ""),
            "-" if o is None else f"{o.plain:.2f}" + (f" ± {o.plain_std:.2f}" if std else ""),
            str(r.summary.episodes),
            str(r.tokens),
            f"{r.cost:.4f}",
            f"{r.mean_steps:.1f}",
            f"{r.mean_wall_s:.1f}",
            str(r.summary.infra_errors),
        )
    out.print(table)
    papers = sorted({p for r in rows for p in r.summary.per_paper})
    per_paper = Table(title="Scaled pass rate per paper")
    per_paper.add_column("paper", no_wrap=True)
    for r in rows:
        per_paper.add_column(r.run, justify="right")
    for p in papers:
        cells = []
        for r in rows:
            rates = r.summary.per_paper.get(p)
            cells.append("-" if rates is None else f"{rates.scaled:.2f}")
        per_paper.add_row(p, *cells)
    out.print(per_paper)


def _summary_table(s: Summary, title: str) -> None:
    table = Table(title=f"Run {title}: {s.episodes} episodes, {s.samples} sample(s)")
    table.add_column("paper", no_wrap=True)
    for col in ("snippets", "passed", "weight", "scaled %", "plain %"):
        table.add_column(col, justify="right")

    def row(name: str, r: Rates) -> None:
        std = s.samples > 1
        table.add_row(
            name,
            str(r.snippets),
            f"{r.passed:g}",
            f"{r.passed_weight:g}/{r.weight}",
            f"{r.scaled:.2f}" + (f" ± {r.scaled_std:.2f}" if std else ""),
            f"{r.plain:.2f}" + (f" ± {r.plain_std:.2f}" if std else ""),
        )

    for pid, rates in s.per_paper.items():
        row(pid, rates)
    if s.overall is not None:
        table.add_section()
        row("overall", s.overall)
    out.print(table)
    out.print(
        f"infrastructure errors (excluded from the rates): {s.infra_errors}"
        + (f" {s.infra_by_cause}" if s.infra_errors else "")
        + f"; truncated by a budget: {s.truncated}",
        highlight=False,
        soft_wrap=True,
    )


@cli.command(name="audit")
@pset_option
@paper_option
@sandbox_option
@base_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--control/--no-control",
    default=None,
    help="Also audit the bundled canary task, whose seeded leak must be found (default: on "
    "for the bundled tasks).",
)
def audit_cmd(
    pset: Path | None,
    papers: tuple[str, ...],
    sandbox: BackendName,
    base: str | None,
    json_path: Path | None,
    control: bool | None,
) -> None:
    """Search everything an agent can read for each snippet's answer.

    Exit 1 on any finding; exit 2 if the control's seeded leak was not found (then a clean
    result proves nothing on this backend).
    """
    from rcb_env.validation import audit as leak_audit

    loaded = _load(pset, papers)
    _print_failures(loaded)
    factory = SandboxFactory(_sandbox_config(sandbox, base))
    controlled: list[leak_audit.Finding] | None = None
    try:
        with _progress("auditing") as progress:
            bar = progress.add_task("", total=len(loaded.snippets))
            findings = leak_audit.audit(
                loaded,
                factory,
                on_done=lambda sid: progress.update(bar, advance=1, description=sid),
            )
        if control if control is not None else pset is None:
            controlled = leak_audit.control(factory)
    finally:
        factory.close()
    for f in findings:
        out.print(
            f"[red]leak[/red] {f.snippet_id}: {f.path}: {f.line}", highlight=False, soft_wrap=True
        )
    out.print(f"{len(findings)} findings over {len(loaded.snippets)} snippets", highlight=False)
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
            sys.exit(2)
        out.print(
            f"control: the seeded leak in {leak_audit.CANARY_PSET} was found "
            f"({len(caught)} answer lines in {leak_audit.CANARY_LEAK})",
            highlight=False,
        )
    sys.exit(1 if findings else 0)


@cli.command(name="hacks")
@sandbox_option
@base_option
@click.option("--timeout", type=float, default=20.0, show_default=True)
def hacks_cmd(sandbox: BackendName, base: str | None, timeout: float) -> None:
    """Grade the reward-hack suite on this backend: every attack must score 0, the host must be
    unchanged and the reference must still pass afterwards (exit 1 if not)."""
    from rcb_env.validation.hacks import TARGET, host_state, leftovers, run_hacks

    paper = loader.load(loader.bundled_root()).paper(TARGET[0])
    snippet = paper.snippet(TARGET[1])
    factory = SandboxFactory(_sandbox_config(sandbox, base))
    try:
        grader = Grader(GradingConfig(timeout_s=timeout), executor=factory.grading_executor(paper))
        before = host_state(factory)
        results = run_hacks(paper, snippet, grader)
        left = leftovers(before, factory)
        # the next episode is clean: the honest answer still passes, in a fresh sandbox
        after = grader.grade(paper, snippet, snippet.reference_body)
    finally:
        factory.close()
    table = Table(title=f"Reward hacks on {factory.backend}: {TARGET[0]}/{TARGET[1]}")
    for col in ("attack", "official rule", "rcb-env", "why"):
        table.add_column(col)
    for r in results:
        table.add_row(
            r.attack,
            "[red]pass[/red]" if r.official_pass else "fail",
            "[red]PASS[/red]" if r.passed else ("[red]excluded[/red]" if r.excluded else "0"),
            r.detail if r.detail.startswith(r.kind) else f"{r.kind}: {r.detail}",
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
    sys.exit(1 if beaten or left or not after.passed else 0)


@cli.group()
def images() -> None:
    """Per-paper Docker images (one per paper, tagged by a content hash)."""


@images.command(name="build")
@pset_option
@paper_option
@click.option(
    "--base", help="Base image with python3 (default python:3.11-slim or $RCB_DOCKER_BASE)."
)
@click.option(
    "--wheels",
    type=click.Path(file_okay=False, path_type=Path),
    help="Download wheels into this folder on the host and build offline (--network=none).",
)
def images_build(
    pset: Path | None, papers: tuple[str, ...], base: str | None, wheels: Path | None
) -> None:
    """Build the image of every paper (up-to-date images are kept)."""
    from rcb_env.sandbox import docker
    from rcb_env.sandbox import images as img

    loaded = _load(pset, papers)
    _print_failures(loaded)
    cfg = (
        img.ImageConfig(wheels=wheels)
        if base is None
        else img.ImageConfig(base=base, wheels=wheels)
    )
    engine = docker.client()
    for paper in loaded.papers:
        tag, built = img.build(
            engine,
            paper,
            cfg,
            progress=lambda line: err.print(line, highlight=False, soft_wrap=True),
        )
        out.print(f"{paper.id}: {tag} ({'built' if built else 'up to date'})", highlight=False)


@images.command(name="gc")
@pset_option
@click.option("--base", help="Keep images built from this base (default as for build).")
@click.option("--all", "everything", is_flag=True, help="Also remove containers of live runs.")
def images_gc(pset: Path | None, base: str | None, everything: bool) -> None:
    """Remove leftover rcb-env containers and stale rcb-env images."""
    from rcb_env.sandbox import docker
    from rcb_env.sandbox import images as img

    engine = docker.client()
    removed = docker.gc_containers(engine, everything=everything)
    loaded = _load(pset, ())
    cfg = img.ImageConfig() if base is None else img.ImageConfig(base=base)
    keep = {img.image_tag(p, cfg) for p in loaded.papers}
    stale = img.gc_images(engine, keep)
    out.print(f"removed {len(removed)} containers and {len(stale)} stale images", highlight=False)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except RcbError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
