"""Terminal renderings of run summaries and comparisons."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rcb_env.results.compare import RunRow
from rcb_env.results.summary import Rates, Summary


def print_summary(out: Console, s: Summary, title: str) -> None:
    """Per-paper and overall rates of a run, then its infrastructure errors and truncations."""
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
    if s.parts:
        # a combined run: each benchmark on its own denominators, then all of them together
        for part in s.parts:
            table.add_section()
            name = part.totals.name if part.totals and part.totals.name else "benchmark"
            if part.overall is not None:
                row(f"{name} (runnable set)", part.overall)
            if part.full is not None:
                row(f"{name} (full)", part.full)
    if s.overall is not None:
        table.add_section()
        label = "overall"
        if s.parts:
            label = "all benchmarks (runnable set)"
        elif s.totals and s.totals.unavailable:
            label = "overall (runnable set)"
        row(label, s.overall)
    if s.full is not None and s.totals is not None and s.totals.unavailable and not s.parts:
        row(f"full {s.totals.name or 'benchmark'}", s.full)
    out.print(table)
    out.print(
        f"infrastructure errors (excluded from the rates): {s.infra_errors}"
        + (f" {s.infra_by_cause}" if s.infra_errors else "")
        + f"; truncated by a budget: {s.truncated}",
        highlight=False,
        soft_wrap=True,
    )
    if s.parts:
        for part in s.parts:
            if part.totals is not None:
                out.print(print_totals(part), highlight=False, soft_wrap=True)
    elif s.totals is not None and s.totals.unavailable:
        out.print(print_totals(s), highlight=False, soft_wrap=True)


def print_totals(s: Summary) -> str:
    """Both denominators, labelled, and what was left out of the runnable set."""
    assert s.totals is not None
    t = s.totals
    lines = []
    if s.overall is not None:
        lines.append(
            f"runnable set: {s.overall.snippets} snippets, {s.overall.weight} lines: "
            f"scaled {s.overall.scaled:.2f} / plain {s.overall.plain:.2f}"
        )
    if s.full is not None:
        lines.append(
            f"full benchmark{f' ({t.name})' if t.name else ''}: {t.snippets} snippets, "
            f"{t.weight} lines, unavailable and unscored counted as not passed: "
            f"scaled {s.full.scaled:.2f} / plain {s.full.plain:.2f}"
        )
    for u in t.unavailable:
        what = f"{u.paper}/{u.snippet}" if u.snippet else u.paper
        lines.append(f"  left out: {what} ({u.snippets} snippets, {u.weight} lines): {u.reason}")
    return "\n".join(lines)


def print_comparison(out: Console, rows: list[RunRow]) -> None:
    """Runs side by side, then the scaled rate per paper per run."""
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
    named = [part.totals.name for r in rows for part in r.summary.parts if part.totals]
    if named:
        bench = Table(title="Per benchmark (each on its own denominators)")
        bench.add_column("benchmark", no_wrap=True)
        for r in rows:
            bench.add_column(f"{r.run} runnable %", justify="right")
            bench.add_column(f"{r.run} full %", justify="right")
        for name in dict.fromkeys(named):
            cells = []
            for r in rows:
                part = next(
                    (x for x in r.summary.parts if x.totals and x.totals.name == name), None
                )
                for rates in (part.overall if part else None, part.full if part else None):
                    cells.append("-" if rates is None else f"{rates.scaled:.2f}")
            bench.add_row(name or "", *cells)
        out.print(bench)
