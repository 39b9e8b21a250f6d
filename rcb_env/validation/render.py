"""Terminal renderings of validation reports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from rcb_env.validation.audit import CANARY_LEAK, CANARY_PSET
from rcb_env.validation.hacks import TARGET
from rcb_env.validation.strength import StrengthReport
from rcb_env.validation.validate import Status, ValidationReport

if TYPE_CHECKING:
    from rcb_env.validation.checks import AuditReport, HackReport


def print_validation(out: Console, report: ValidationReport, root_label: str) -> None:
    """The validation table, then each failing reference and weak snippet."""
    table = Table(title=f"Validation of {root_label} (reference x{report.repeat})")
    table.add_column("paper", no_wrap=True)
    for col in ("snippets", "weight", *[s.value for s in Status], "reference", "seconds"):
        table.add_column(col, justify="right")
    table.add_column("grading")
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
            p.grading_path.split(":", 1)[0],
        )
    for f in report.load_failures:
        table.add_row(f"[red]{f.paper}[/red]", "load error", *[""] * (len(Status) + 4))
    total = report.counts()
    table.add_section()
    table.add_row(
        "total",
        str(sum(p.snippets for p in report.papers)),
        str(sum(p.weight for p in report.papers)),
        *[str(total[s]) for s in Status],
        "",
        "",
        "",
    )
    out.print(table)
    for p in report.papers:
        if p.grading_path.startswith("cold: "):
            out.print(f"{p.id} graded cold: {p.grading_path[6:]}", highlight=False, soft_wrap=True)
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
            if (
                s.status is Status.WEAK
                and s.masked.outcome != "passed"
                and (s.mutant.outcome != "passed")
            ):
                continue  # a static finding: printed below
            if s.status is Status.WEAK:
                which = "masked" if s.masked.outcome == "passed" else "pass-mutant"
                out.print(
                    f"[yellow]weak[/yellow] {s.id}: the {which} version passes", highlight=False
                )
    for finding in report.static:
        label = "unexercised" if finding.kind == "not_imported" else "weak"
        where = "" if finding.available else " (cannot run here; found statically)"
        out.print(
            f"[yellow]{label}[/yellow] {finding.id}: {finding.detail}{where}",
            highlight=False,
            soft_wrap=True,
        )
    for f in report.load_failures:
        out.print(f"[red]load error[/red] {f.paper}: {f.message}", highlight=False, soft_wrap=True)


def print_strength(out: Console, report: StrengthReport, root_label: str, worst: int = 10) -> None:
    """Per paper: mutants killed and survived and the line-weighted score; then the weakest
    snippets, each with one surviving mutant's diff."""
    table = Table(title=f"Mutation scores of {root_label} (seed {report.seed}, cap {report.cap})")
    table.add_column("paper", no_wrap=True)
    for col in ("snippets", "scored", "killed", "survived", "score"):
        table.add_column(col, justify="right")
    for p in (*report.papers, report.total):
        if p is report.total:
            table.add_section()
        table.add_row(
            p.id,
            str(p.snippets),
            str(p.scored),
            str(p.killed),
            str(p.survived),
            "-" if p.score is None else f"{p.score:.1%}",
        )
    out.print(table)
    excluded = sum(s.excluded for s in report.snippets)
    if excluded:
        out.print(f"{excluded} mutants excluded: their grading failed for infrastructure reasons")
    weakest = sorted(
        (s for s in report.snippets if s.score is not None and s.survivors),
        key=lambda s: (s.score or 0.0, -s.weight),
    )[:worst]
    for s in weakest:
        one = next((v for v in s.survivors if v.kind == "test gap"), s.survivors[0])
        kinds = (
            f" ({s.test_gaps} test gaps, {s.possibly_equivalent} possibly equivalent)"
            if s.test_gaps is not None
            else ""
        )
        out.print(
            f"[yellow]{s.id}[/yellow]: {s.killed}/{s.killed + s.survived} killed "
            f"({s.score:.0%}){kinds}; survived: {one.operator}, {one.description}"
            + (f" [{one.kind}]" if one.kind else ""),
            highlight=False,
            soft_wrap=True,
        )
        out.print(one.diff.rstrip(), highlight=False, markup=False, soft_wrap=True)
    out.print(f"wall time {report.wall_s:.0f} s")


def print_audit(out: Console, report: AuditReport) -> None:
    """Each leak, the findings that are the benchmark's design (per file), and the count."""
    for f in report.leaks:
        out.print(
            f"[red]leak[/red] ({f.kind}) {f.snippet_id}: {f.path}: {f.line}",
            highlight=False,
            soft_wrap=True,
        )
    by_design: dict[tuple[str, str], int] = {}
    for f in report.findings:
        if f.accepted is not None:
            by_design[(f.path, f.accepted)] = by_design.get((f.path, f.accepted), 0) + 1
    for (path, why), n in sorted(by_design.items()):
        out.print(f"by design: {path} ({n} answer lines): {why}", highlight=False, soft_wrap=True)
    designed = len(report.findings) - len(report.leaks)
    out.print(
        f"{len(report.leaks)} findings over {report.snippets} snippets"
        + (f" ({designed} more are the benchmark's design)" if by_design else ""),
        highlight=False,
    )


def print_control(out: Console, report: AuditReport) -> None:
    """Whether the positive control's seeded leak was found (nothing when it did not run)."""
    if report.control is None:
        return
    if report.control_missed:
        out.print(
            f"[red]control failed[/red]: the seeded leak in {CANARY_PSET} "
            f"({CANARY_LEAK}) was not found, so a clean result proves nothing here",
            highlight=False,
        )
        return
    out.print(
        f"control: the seeded leak in {CANARY_PSET} was found "
        f"({len(report.caught)} answer lines in {CANARY_LEAK})",
        highlight=False,
    )


def print_hacks(out: Console, report: HackReport) -> None:
    """The suite's table, how many attacks scored 0, what was left on the host, and whether
    the next episode is clean."""
    table = Table(title=f"Reward hacks on {report.backend}: {TARGET[0]}/{TARGET[1]}")
    for col in ("attack", "official rule", "rcb-env", "why", "run-time guards alone"):
        table.add_column(col)
    for r in report.results:
        table.add_row(
            r.attack,
            "[red]pass[/red]" if r.official_pass else "fail",
            "[red]PASS[/red]" if r.passed else ("[red]excluded[/red]" if r.excluded else "0"),
            r.detail if r.detail.startswith(r.kind) else f"{r.kind}: {r.detail}",
            "" if r.runtime is None else r.runtime,
        )
    out.print(table)
    n = len(report.results)
    out.print(
        f"{n - len(report.beaten)} of {n} attacks scored 0 "
        "(neither passed nor excluded as infrastructure)",
        highlight=False,
    )
    for problem in report.left:
        out.print(f"[red]host changed[/red]: {problem}", highlight=False, soft_wrap=True)
    if not report.left:
        out.print(
            "host unchanged: no process of the sandbox user, no container, no new file in the "
            "shared temporary folders or the scratch folder",
            highlight=False,
        )
    if report.after.passed:
        out.print("next episode clean: the reference still passes", highlight=False)
    else:
        out.print(f"[red]next episode broken[/red]: {report.after.detail}", highlight=False)
