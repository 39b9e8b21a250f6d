"""Model-free task validation: the reference passes, the masked and ``pass`` versions fail.

The reference body re-inserted between its markers reproduces the pristine file byte for byte, so
"the reference passes" is one property of the paper, run once per repeat, not once per snippet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum

from rcb_env._common import Frozen
from rcb_env.grading.grader import Grader
from rcb_env.grading.models import GradeResult, Outcome
from rcb_env.task.models import LoadFailure, Paper, Pset, Snippet

SCHEMA = "rcb-env/validate/1"


class Status(StrEnum):
    OK = "ok"
    """Reference passes every repeat; masked and pass-mutant fail."""
    WEAK = "weak"
    """The tests do not notice a missing snippet (masked or pass-mutant passes)."""
    FLAKY = "flaky"
    """The reference passed in some repeats only."""
    BROKEN = "broken"
    """The reference fails: the task (or its tests) is wrong."""
    ENVIRONMENT = "environment"
    """The reference cannot run here (missing dependency, runner crash)."""


class RunSummary(Frozen):
    """The part of a grading result a validation report keeps."""

    outcome: Outcome
    kind: str
    detail: str
    official_pass: bool
    duration_s: float

    @classmethod
    def of(cls, r: GradeResult) -> RunSummary:
        return cls(
            outcome=r.outcome,
            kind=r.kind.value,
            detail=r.detail,
            official_pass=r.official_pass,
            duration_s=r.duration_s,
        )


class SnippetReport(Frozen):
    id: str
    """``<paper>/<snippet>``."""
    weight: int
    """Line weight."""
    status: Status
    """Verdict on the snippet as a task."""
    masked: RunSummary
    """The masked placeholder as the candidate."""
    mutant: RunSummary
    """``pass`` as the candidate."""


class PaperReport(Frozen):
    id: str
    snippets: int
    weight: int
    reference: tuple[RunSummary, ...]
    """One run of the pristine paper per repeat."""
    known_issue: str | None = None
    """From the paper's overlay: why it may not run here."""
    snippet_reports: tuple[SnippetReport, ...]
    duration_s: float


class ValidationReport(Frozen):
    schema_version: str = SCHEMA
    root: str
    repeat: int
    papers: tuple[PaperReport, ...]
    load_failures: tuple[LoadFailure, ...]

    @property
    def ok(self) -> bool:
        """No load failure and every reference passed (weak snippets are warnings)."""
        return not self.load_failures and all(
            s.status not in (Status.BROKEN, Status.ENVIRONMENT, Status.FLAKY)
            for p in self.papers
            for s in p.snippet_reports
        )

    def counts(self) -> dict[Status, int]:
        out = dict.fromkeys(Status, 0)
        for p in self.papers:
            for s in p.snippet_reports:
                out[s.status] += 1
        return out


def _status(reference: list[GradeResult], masked: GradeResult, mutant: GradeResult) -> Status:
    passes = sum(r.passed for r in reference)
    if passes == 0:
        if any(r.is_infra_error for r in reference):
            return Status.ENVIRONMENT
        return Status.BROKEN
    if passes < len(reference):
        return Status.FLAKY
    if masked.passed or mutant.passed:
        return Status.WEAK
    return Status.OK


def validate(
    pset: Pset,
    grader: Grader,
    *,
    jobs: int = 1,
    repeat: int = 1,
    on_done: Callable[[str], None] | None = None,
) -> ValidationReport:
    """Grade every paper's reference ``repeat`` times and every snippet's masked and pass bodies,
    with ``jobs`` gradings in parallel."""
    started: dict[str, float] = {p.id: time.monotonic() for p in pset.papers}
    # Validation measures the references themselves: raw verdicts, no pristine gate.
    grader = Grader(
        grader.config.model_copy(update={"require_pristine": False}),
        executor=grader.executor,
        scratch=grader.scratch,
    )

    def run(paper: Paper, snippet: Snippet, body: str, label: str) -> GradeResult:
        result = grader.grade(paper, snippet, body)
        if on_done is not None:
            on_done(f"{snippet.id} [{label}]")
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        refs = {
            p.id: [
                pool.submit(run, p, p.snippets[0], p.snippets[0].reference_body, "reference")
                for _ in range(repeat)
            ]
            for p in pset.papers
            if p.snippets
        }
        per_snippet = {
            s.id: (
                pool.submit(run, p, s, s.todo_body(), "masked"),
                pool.submit(run, p, s, s.pass_body(), "pass"),
            )
            for p in pset.papers
            for s in p.snippets
        }
        papers = []
        for p in pset.papers:
            reference = [f.result() for f in refs.get(p.id, [])]
            reports = []
            for s in p.snippets:
                masked, mutant = (f.result() for f in per_snippet[s.id])
                reports.append(
                    SnippetReport(
                        id=s.id,
                        weight=s.weight,
                        status=_status(reference, masked, mutant),
                        masked=RunSummary.of(masked),
                        mutant=RunSummary.of(mutant),
                    )
                )
            papers.append(
                PaperReport(
                    id=p.id,
                    snippets=len(p.snippets),
                    weight=p.total_weight,
                    reference=tuple(RunSummary.of(r) for r in reference),
                    known_issue=p.overlay.known_issue,
                    snippet_reports=tuple(reports),
                    duration_s=round(time.monotonic() - started[p.id], 3),
                )
            )
    return ValidationReport(
        root=str(pset.root), repeat=repeat, papers=tuple(papers), load_failures=pset.failures
    )


def planned_runs(pset: Pset, repeat: int) -> int:
    """How many gradings :func:`validate` will do (for a progress bar)."""
    return sum(repeat + 2 * len(p.snippets) for p in pset.papers if p.snippets)
