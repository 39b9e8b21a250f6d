"""Terminal renderings of run summaries and comparisons."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rcb_env.results.compare import ComparisonReport, RunRow
from rcb_env.results.inference import Estimate, Plan, RunStatistics
from rcb_env.results.regrade import VerdictChanges
from rcb_env.results.summary import Rates, Summary


def interval(e: Estimate | None, beside: float | None = None) -> str:
    """``[low, high]`` of an estimate, or ``-``; led by the estimate itself when it differs from
    the rate shown ``beside`` it (pass@1 per snippet against the mean over sample indexes, which
    differ when samples were lost to infrastructure failures)."""
    if e is None or e.low is None or e.high is None:
        return "-"
    own = f"{e.estimate:.2f} " if beside is not None and abs(e.estimate - beside) >= 0.005 else ""
    return f"{own}[{e.low:.2f}, {e.high:.2f}]"


def print_summary(
    out: Console, s: Summary, title: str, statistics: RunStatistics | None = None
) -> None:
    """Per-paper and overall rates of a run (with their intervals when ``statistics`` is
    given), then its infrastructure errors and truncations."""
    st = statistics
    table = Table(title=f"Run {title}: {s.episodes} episodes, {s.samples} sample(s)")
    table.add_column("paper", no_wrap=True)
    for col in ("snippets", "passed", "weight", "scaled %", "plain %"):
        table.add_column(col, justify="right")
        if st is not None and col.endswith("%"):
            table.add_column(f"{st.level:.0%} CI", justify="right")
    if st is not None:
        table.add_column("infra", justify="right")
    extra = [f"{m}@{k}" for k in range(2, st.k + 1) for m in ("scaled", "plain")] if st else []
    more = Table(title=f"pass@k with {st.level:.0%} intervals") if st and extra else None
    if more is not None:
        more.add_column("paper", no_wrap=True)
        for key in extra:
            more.add_column(f"{key} %", justify="right")

    def row(name: str, r: Rates, est: dict[str, Estimate] | None = None) -> None:
        std = s.samples > 1
        cells = [
            name,
            str(r.snippets),
            f"{r.passed:g}",
            f"{r.passed_weight:g}/{r.weight}",
            f"{r.scaled:.2f}" + (f" ± {r.scaled_std:.2f}" if std else ""),
        ]
        if st is not None:
            cells.append(interval((est or {}).get("scaled@1"), r.scaled))
        cells.append(f"{r.plain:.2f}" + (f" ± {r.plain_std:.2f}" if std else ""))
        if st is not None:
            cells.append(interval((est or {}).get("plain@1"), r.plain))
            first = next(iter((est or {}).values()), None)
            cells.append("-" if first is None else str(first.infra_episodes))
        table.add_row(*cells)
        if more is not None:
            more.add_row(name, *[
                "-" if (e := (est or {}).get(key)) is None else f"{e.estimate:.2f} {interval(e)}"
                for key in extra
            ])  # fmt: skip

    for pid, rates in s.per_paper.items():
        row(pid, rates, st.per_paper.get(pid) if st else None)
    if s.parts:
        # a combined run: each benchmark on its own denominators, then all of them together
        for part in s.parts:
            table.add_section()
            name = part.totals.name if part.totals and part.totals.name else "benchmark"
            if part.overall is not None:
                row(f"{name} (runnable set)", part.overall, st.parts.get(name) if st else None)
            if part.full is not None:
                row(f"{name} (full)", part.full)
    if s.overall is not None:
        table.add_section()
        label = "overall"
        if s.parts:
            label = "all benchmarks (runnable set)"
        elif s.totals and s.totals.unavailable:
            label = "overall (runnable set)"
        row(label, s.overall, st.overall if st else None)
    if s.full is not None and s.totals is not None and s.totals.unavailable and not s.parts:
        row(f"full {s.totals.name or 'benchmark'}", s.full, st.full if st else None)
    if s.subset is not None and s.subset.rates is not None:
        row(f"{s.subset.name} subset ({s.subset.snippets} of {s.subset.of})", s.subset.rates)
    out.print(table)
    if more is not None:
        out.print(more)
    if st is not None:
        out.print(_method_note(st.resamples, st.seed, st.level), highlight=False, soft_wrap=True)
    out.print(
        f"infrastructure errors (excluded from the rates): {s.infra_errors}"
        + (f" {s.infra_by_cause}" if s.infra_errors else "")
        + f"; truncated (graded as they stood): {s.truncated}",
        highlight=False,
        soft_wrap=True,
    )
    if s.stopped is not None:
        out.print(
            f"stopped at the run's ceiling ({s.stopped.detail}): {s.stopped.pending} "
            "episode(s) not run; the episodes in flight then finished",
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


def _method_note(resamples: int, seed: int, level: float) -> str:
    return (
        f"{level:.0%} intervals: paper-clustered bootstrap (papers resampled with their "
        f"snippets and samples; within one paper, its snippets), percentile, {resamples} "
        f"resamples, seed {seed}, around pass@1 (each snippet's mean over its scored samples; "
        "shown before an interval where it differs from the mean over sample indexes); "
        "infrastructure failures are out of every rate (infra column)"
    )


def print_comparison(
    out: Console, rows: list[RunRow], report: ComparisonReport | None = None
) -> None:
    """Runs side by side, then the scaled rate per paper per run; with ``report``, each rate's
    interval and every run against the baseline, paired by snippet."""
    by_row = list(report.runs) if report else [None] * len(rows)
    table = Table(title="Comparison")
    table.add_column("run", no_wrap=True)
    table.add_column("agent")
    level = f"{report.level:.0%} CI" if report else ""
    subset = next((r.summary.subset.name for r in rows if r.summary.subset), None)
    subset_cols = (f"{subset} scaled %", f"{subset} plain %") if subset else ()
    for col in ("scaled %", "plain %", *subset_cols, "episodes", "tokens", "cost $", "steps",
                "wall s", "infra"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        o = r.summary.overall
        std = r.summary.samples > 1
        v = r.summary.subset.rates if r.summary.subset else None
        verified = ("-" if v is None else f"{v.scaled:.2f}", "-" if v is None else f"{v.plain:.2f}")
        table.add_row(
            r.run,
            r.agent,
            "-" if o is None else f"{o.scaled:.2f}" + (f" ± {o.scaled_std:.2f}" if std else ""),
            "-" if o is None else f"{o.plain:.2f}" + (f" ± {o.plain_std:.2f}" if std else ""),
            *(verified if subset else ()),
            str(r.summary.episodes),
            str(r.tokens),
            f"{r.cost:.4f}",
            f"{r.mean_steps:.1f}",
            f"{r.mean_wall_s:.1f}",
            str(r.summary.infra_errors),
        )
    out.print(table)
    papers = sorted({p for r in rows for p in r.summary.per_paper})
    per_paper = Table(title="Scaled pass rate per paper" + (f" [{level}]" if report else ""))
    per_paper.add_column("paper", no_wrap=True)
    for r in rows:
        per_paper.add_column(r.run, justify="right")
    for p in papers:
        cells = []
        for r, st in zip(rows, by_row, strict=True):
            rates = r.summary.per_paper.get(p)
            text = "-" if rates is None else f"{rates.scaled:.2f}"
            e = st.per_paper.get(p, {}).get("scaled@1") if st else None
            beside = rates.scaled if rates is not None else None
            cells.append(text + (f" {interval(e, beside)}" if e is not None else ""))
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
            for r, st in zip(rows, by_row, strict=True):
                part = next(
                    (x for x in r.summary.parts if x.totals and x.totals.name == name), None
                )
                for i, rates in enumerate((part.overall, part.full) if part else (None, None)):
                    text = "-" if rates is None else f"{rates.scaled:.2f}"
                    e = st.parts.get(name or "", {}).get("scaled@1") if st and i == 0 else None
                    beside = rates.scaled if rates is not None else None
                    cells.append(text + (f" {interval(e, beside)}" if e is not None else ""))
            bench.add_row(name or "", *cells)
        out.print(bench)
    if report is not None:
        print_intervals(out, report)
        print_paired(out, report)


def print_intervals(out: Console, report: ComparisonReport) -> None:
    """Every run's rates (pass@1..k) with their intervals, the snippets they are over, those
    left out and the infrastructure failures left out."""
    table = Table(title=f"Rates with {report.level:.0%} intervals")
    table.add_column("run", no_wrap=True)
    table.add_column("metric", no_wrap=True)
    for col in ("%", f"{report.level:.0%} CI", "snippets", "left out", "infra"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in report.runs:
        for key, e in r.metrics.items():
            table.add_row(r.run, key, f"{e.estimate:.2f}", interval(e), str(e.snippets),
                          str(e.excluded_snippets), str(e.infra_episodes))  # fmt: skip
    out.print(table)


def print_paired(out: Console, report: ComparisonReport) -> None:
    """Every run against the baseline: paired differences, intervals, p-values, MDE, in words."""
    if not report.comparisons:
        out.print(_method_note(report.resamples, report.seed, report.level), highlight=False)
        return
    held = len(report.comparisons) > 1
    table = Table(title=f"Paired differences against {report.baseline} (B - A, points)")
    for col in ("run B", "metric", "A %", "B %", "B - A", f"{report.level:.0%} CI", "p"):
        table.add_column(col, justify="left" if col in ("run B", "metric") else "right")
    if held:
        table.add_column("p (Holm)", justify="right")
    for col in ("MDE", "snippets", "papers", f"differ at {report.alpha:.0%}"):
        table.add_column(col, justify="right")
    for c in report.comparisons:
        for key, m in c.metrics.items():
            p = "-" if m.p_value is None else f"{m.p_value:.4f}"
            if m.p_value == 0:
                p = f"<{2 / m.resamples:g}"
            ci = "-" if m.low is None or m.high is None else f"[{m.low:+.2f}, {m.high:+.2f}]"
            cells = [c.b, key, f"{m.a:.2f}", f"{m.b:.2f}", f"{m.difference:+.2f}", ci, p]
            if held:
                cells.append("-" if m.p_holm is None else f"{m.p_holm:.4f}")
            cells += ["-" if m.mde is None else f"{m.mde:.2f}", str(m.snippets), str(m.papers),
                      "yes" if m.significant else "no"]  # fmt: skip
            table.add_row(*cells)
    out.print(table)
    for c in report.comparisons:
        out.print(c.verdict(), highlight=False, soft_wrap=True)
        for side, ids in ((c.a, c.only_in_a), (c.b, c.only_in_b)):
            if ids:
                shown = ", ".join(ids[:8]) + (
                    f", ... ({len(ids) - 8} more)" if len(ids) > 8 else ""
                )
                out.print(
                    f"  not paired: {len(ids)} snippet(s) scored only in {side}: {shown}",
                    highlight=False,
                    soft_wrap=True,
                )
    notes = [_method_note(report.resamples, report.seed, report.level)]
    notes.append(
        "p: two-sided, twice the share of resampled differences on the other side of 0"
        + ("; Holm-corrected over the runs compared with the baseline" if held else "")
        + f"; MDE: the smallest difference detectable with {report.power:.0%} power at the "
        f"{report.alpha:.0%} level, (z_{{1-a/2}} + z_power) x the bootstrap SE of the difference"
    )
    out.print("\n".join(notes), highlight=False, soft_wrap=True)


def print_plan(out: Console, plan: Plan) -> None:
    """The samples per snippet a comparison needs, and the MDE by samples."""
    pilot = f" and the pilot {plan.against}" if plan.against else ""
    out.print(
        f"Plan from {plan.baseline}{pilot}: {plan.snippets} snippets in {plan.papers} papers, "
        f"{plan.baseline_samples} sample(s) per snippet in the baseline; {plan.metric} rate, "
        f"{plan.power:.0%} power at the {plan.alpha:.0%} level (two-sided).",
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        f"variance of the paired difference: between snippets {plan.between:.3f} points^2 "
        f"(samples do not reduce it) + within snippets {plan.within:.3f} points^2 / k "
        f"(k samples per snippet){'' if plan.within_estimated else ' (assumed)'}; observed "
        f"bootstrap SE {plan.observed_se:.2f} points",
        highlight=False,
        soft_wrap=True,
    )
    for a in plan.assumptions:
        out.print(f"  assumption: {a}", highlight=False, soft_wrap=True)
    table = Table(title="Minimum detectable difference by samples per snippet")
    table.add_column("samples", justify="right")
    table.add_column("MDE (points)", justify="right")
    for k, v in plan.mde_by_samples.items():
        table.add_row(str(k) + (" <" if k == plan.samples else ""), f"{v:.2f}")
    out.print(table)
    if plan.samples is None:
        out.print(
            f"{plan.difference:g} points cannot be detected by sampling more: the between-"
            f"snippet part alone allows no less than {plan.floor:.2f} points (more snippets or "
            "papers are needed)",
            highlight=False,
            soft_wrap=True,
        )
    else:
        out.print(
            f"to detect {plan.difference:g} points: {plan.samples} sample(s) per snippet "
            f"(MDE {plan.mde(plan.samples):.2f} points)",
            highlight=False,
            soft_wrap=True,
        )


def print_verdict_changes(out: Console, c: VerdictChanges) -> None:
    """A regrading beside its stored run: how many verdicts held, each one that changed with
    why, and what was not graded again with why."""
    out.print(
        f"regraded {c.regraded} episode(s) of {c.old_run}: {c.unchanged} verdict(s) unchanged, "
        f"{len(c.changed)} changed, {len(c.not_regraded)} not graded again",
        highlight=False,
        soft_wrap=True,
    )
    for title, rows in (("Verdicts that changed", c.changed), ("Not graded again", c.not_regraded)):
        if not rows:
            continue
        table = Table(title=title)
        for col in ("snippet", "sample", "stored", "now", "why"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r.snippet_id, str(r.sample), r.old, r.new or "-", "; ".join(r.reasons))
        out.print(table)
