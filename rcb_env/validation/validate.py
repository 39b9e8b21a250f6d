"""Model-free task validation: the reference passes, the masked and ``pass`` versions fail.

The reference body re-inserted between its markers reproduces the pristine file byte for byte, so
"the reference passes" is one property of the paper, run once per repeat, not once per snippet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from enum import StrEnum
from pathlib import Path

from rcb_env.frozen import Frozen
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.grading.models import GradeResult
from rcb_env.grading.prewarm import Prewarmer
from rcb_env.sandbox.base import Executor
from rcb_env.task.models import LoadFailure, Paper, Pset, Snippet
from rcb_env.task.reach import Reach, ReachKind
from rcb_env.task.source import source_for
from rcb_env.verdicts import Outcome

SCHEMA = "rcb-env/validate/1"


class Status(StrEnum):
    OK = "ok"
    """Reference passes every repeat; masked and pass-mutant fail."""
    WEAK = "weak"
    """The tests do not notice a missing snippet (masked or pass-mutant passes), or nothing the
    test uses refers to the snippet's function (static)."""
    UNEXERCISED = "unexercised"
    """The test never imports the candidate's file (static): it checks some other code."""
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
    reach: Reach | None = None
    """Static: does the test reach the snippet's code (sources that can tell)."""


class StaticFinding(Frozen):
    """A task problem found without running anything, for every snippet of the selection
    (including those that cannot run here)."""

    id: str
    kind: ReachKind
    detail: str
    available: bool
    """Whether the snippet could run here (unavailable ones are not graded)."""


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
    grading_path: str = "cold"
    """How this paper's runs were graded: ``warm`` (every run forked from its warm process),
    ``cold``, or ``cold: <why>`` (the warm path was meant but not usable, e.g. imports that
    start threads)."""


class ValidationReport(Frozen):
    schema_version: str = SCHEMA
    root: str
    repeat: int
    papers: tuple[PaperReport, ...]
    load_failures: tuple[LoadFailure, ...]
    static: tuple[StaticFinding, ...] = ()
    """Snippets whose test does not reach them (``not_imported``/``not_called``)."""

    @property
    def findings(self) -> bool:
        """Anything to look at: a load failure, a snippet not ok, a static finding."""
        return (
            bool(self.load_failures)
            or bool(self.static)
            or any(s.status is not Status.OK for p in self.papers for s in p.snippet_reports)
        )

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


def _status(
    reference: list[GradeResult],
    masked: GradeResult,
    mutant: GradeResult,
    reached: Reach | None = None,
) -> Status:
    if reached is not None and reached.kind == "not_imported":
        return Status.UNEXERCISED
    passes = sum(r.passed for r in reference)
    if passes == 0:
        if any(r.is_infra_error for r in reference):
            return Status.ENVIRONMENT
        return Status.BROKEN
    if passes < len(reference):
        return Status.FLAKY
    if masked.passed or mutant.passed or (reached is not None and reached.kind == "not_called"):
        return Status.WEAK
    return Status.OK


def validate(
    pset: Pset,
    config: GradingConfig,
    *,
    executor_for: Callable[[Paper], Executor],
    jobs: int = 1,
    repeat: int = 1,
    on_done: Callable[[str], None] | None = None,
    everything: Pset | None = None,
    scratch: Path | None = None,
) -> ValidationReport:
    """Grade every test file's reference ``repeat`` times and every snippet's masked and pass
    bodies, with ``jobs`` gradings in parallel; check statically that each snippet's test
    reaches it (over ``everything`` when given: the whole selection, including what cannot run
    here). ``executor_for`` gives each paper its sandbox's grading executor."""
    started: dict[str, float] = {p.id: time.monotonic() for p in pset.papers}
    # Validation measures the references themselves: raw verdicts, no pristine gate.
    cfg = config.model_copy(update={"require_pristine": False})
    graders = {p.id: Grader(cfg, executor=executor_for(p), scratch=scratch) for p in pset.papers}

    prewarmer = Prewarmer(lambda p: graders[p.id].executor, cfg, pset.papers)

    def run(paper: Paper, snippet: Snippet, body: str, label: str) -> GradeResult:
        prewarmer.starting(paper)
        result = graders[paper.id].grade(paper, snippet, body)
        if on_done is not None:
            on_done(f"{snippet.id} [{label}]")
        return result

    refs: dict[tuple[str, str], list[Future[GradeResult]]] = {}
    per_snippet: dict[str, tuple[Future[GradeResult], Future[GradeResult]]] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        # Paper by paper (a paper's warm process serves its runs together, the next paper's
        # starting meanwhile): one reference per test file (paper2code: one per paper; LMR:
        # one per implementation), then every snippet's masked and pass bodies.
        for p in pset.papers:
            for group in _test_groups(p):
                refs[(p.id, group.name)] = [
                    pool.submit(run, p, group, group.reference_body, "reference")
                    for _ in range(repeat)
                ]
            for s in p.snippets:
                per_snippet[s.id] = (
                    pool.submit(run, p, s, s.todo_body(), "masked"),
                    pool.submit(run, p, s, s.pass_body(), "pass"),
                )
        papers = []
        for p in pset.papers:
            groups = _test_groups(p)
            results = {g.name: [f.result() for f in refs[(p.id, g.name)]] for g in groups}
            reports = []
            paths = [r.grading_path for rs in results.values() for r in rs]
            for s in p.snippets:
                masked, mutant = (f.result() for f in per_snippet[s.id])
                paths += [masked.grading_path, mutant.grading_path]
                reached = source_for(p).reach(p, s)
                reference = results[Grader.health_snippet(p, s).name]
                reports.append(
                    SnippetReport(
                        id=s.id,
                        weight=s.weight,
                        status=_status(reference, masked, mutant, reached),
                        masked=RunSummary.of(masked),
                        mutant=RunSummary.of(mutant),
                        reach=reached,
                    )
                )
            papers.append(
                PaperReport(
                    id=p.id,
                    snippets=len(p.snippets),
                    weight=p.total_weight,
                    reference=tuple(RunSummary.of(r) for g in groups for r in results[g.name]),
                    known_issue=p.overlay.known_issue,
                    snippet_reports=tuple(reports),
                    duration_s=round(time.monotonic() - started[p.id], 3),
                    grading_path=_path_of(paths),
                )
            )
    prewarmer.close()
    runnable_ids = {s.id for s in pset.snippets}
    return ValidationReport(
        root=str(pset.root),
        repeat=repeat,
        papers=tuple(papers),
        load_failures=pset.failures,
        static=static_findings(everything or pset, runnable_ids),
    )


def _path_of(paths: list[str]) -> str:
    """One paper's grading path: ``warm`` if every run was, else the first other one."""
    return next((p for p in paths if p != "warm"), "warm" if paths else "cold")


def _test_groups(paper: Paper) -> list[Snippet]:
    """The first snippet of each test file of ``paper`` (whose reference speaks for the file)."""
    firsts: dict[str, Snippet] = {}
    for s in paper.snippets:
        firsts.setdefault(Grader.health_snippet(paper, s).name, Grader.health_snippet(paper, s))
    return list(firsts.values())


def static_findings(pset: Pset, runnable: set[str] | None = None) -> tuple[StaticFinding, ...]:
    """Every snippet whose test does not reach it, found without running anything."""
    found = []
    for p in pset.papers:
        source = source_for(p)
        for s in p.snippets:
            r = source.reach(p, s)
            if r is not None and r.kind in ("not_imported", "not_called"):
                found.append(
                    StaticFinding(
                        id=s.id,
                        kind=r.kind,
                        detail=r.detail,
                        available=runnable is None or s.id in runnable,
                    )
                )
    return tuple(found)


def planned_runs(pset: Pset, repeat: int) -> int:
    """How many gradings :func:`validate` will do (for a progress bar)."""
    return sum(repeat * len(_test_groups(p)) + 2 * len(p.snippets) for p in pset.papers)
