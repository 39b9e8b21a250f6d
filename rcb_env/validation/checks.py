"""The model-free checks as ``rcb-env validate``, ``audit`` and ``hacks`` run them: each takes a
:class:`~rcb_env.validation.dispatcher.Dispatcher` (this machine or Ray, chosen once) and
returns a report for the command to render (:mod:`rcb_env.validation.render`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from rcb_env.dispatch.runnable import RunsOn
from rcb_env.frozen import Frozen
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.grading.models import GradeResult
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task import loader
from rcb_env.task.models import Pset
from rcb_env.task.selection import VERIFIED_THRESHOLD, Subset, select_snippets
from rcb_env.validation.audit import CANARY_LEAK, Finding
from rcb_env.validation.dispatcher import Dispatcher
from rcb_env.validation.hacks import TARGET, HackResult, host_state, leftovers, target_of
from rcb_env.validation.progress import Meter, quiet
from rcb_env.validation.strength import (
    Classify,
    StrengthReport,
    score_mutants,
    verified_subset,
)
from rcb_env.validation.survivors import classify_all
from rcb_env.validation.validate import Status, ValidationReport, planned_runs, validate


class ValidationPlan(Frozen):
    """What ``rcb-env validate`` runs (its options by their names)."""

    sandbox: SandboxConfig = SandboxConfig()
    jobs: int = Field(default=1, ge=1)
    """Gradings in parallel."""
    repeat: int = Field(default=1, ge=1)
    """Runs of each reference (flakiness)."""
    timeout: float | None = None
    """Seconds per test run (None: the grader's default)."""
    everything: bool = False
    """Also run papers that are unavailable here (the caller narrows the selection otherwise)."""
    mutants: bool = False
    """Also grade mutants of each sound snippet's reference (its test's strength)."""
    cap: int = 20
    seed: int = 0
    out_dir: Path | None = None
    """The mutants' record folder (a re-run resumes)."""
    threshold: float = Field(default=VERIFIED_THRESHOLD, ge=0, le=1)
    """The least mutation score of a verified snippet."""
    equivalence: bool = False
    """Sort each survivor into a test gap or a possibly equivalent mutant."""

    def grading(self) -> GradingConfig:
        return GradingConfig() if self.timeout is None else GradingConfig(timeout_s=self.timeout)

    def runs_in(self) -> RunsOn:
        """Its sandbox and grading, as what can run is decided for them
        (:func:`rcb_env.dispatch.runnable.split`)."""
        return RunsOn(self.sandbox, self.grading())


@dataclass(frozen=True)
class ValidationRun:
    """What ``validate`` found: the report, and with mutants their strength and the verified
    subset."""

    report: ValidationReport
    strength: StrengthReport | None = None
    subset: Subset | None = None

    @property
    def ok(self) -> bool:
        return self.report.ok

    def document(self) -> str:
        """The JSON document (with mutants: the mutation scores)."""
        shown = self.strength if self.strength is not None else self.report
        return shown.model_dump_json(indent=2)


def run_validation(
    pset: Pset,
    plan: ValidationPlan,
    dispatcher: Dispatcher,
    whole: Pset | None = None,
    meter: Meter = quiet,
) -> ValidationRun:
    """Validate ``pset`` (every reference passes, masked and ``pass`` bodies fail; reach checked
    statically over ``whole``, the selection before what cannot run here was left out) and,
    with ``plan.mutants``, grade the sound snippets' mutants through ``dispatcher``.

    Raises:
        UnsupportedError: the dispatcher cannot grade this selection's mutants (said before
            anything runs).
    """
    grading = plan.grading()
    factory = SandboxFactory(plan.sandbox)
    try:
        grade_all = (
            dispatcher.grade_mutants(pset, factory, grading, plan.jobs) if plan.mutants else None
        )
        with meter("validating", planned_runs(pset, plan.repeat)) as bar:
            report = validate(
                pset,
                grading,
                jobs=plan.jobs,
                repeat=plan.repeat,
                on_done=bar.advance,
                everything=whole or pset,
                executor_for=factory.grading_executor,
            )
        if grade_all is None:
            return ValidationRun(report)
        with dispatcher.session(slots=plan.jobs):
            # the probe runs one command in a copy of its own: the cold executors
            cold = SandboxFactory(factory.config.model_copy(update={"warm_grading": False}))
            sort: Classify | None = (
                (lambda items: classify_all(items, cold.grading_executor, scratch=factory.scratch))
                if plan.equivalence
                else None
            )
            chosen, statuses = _sound(pset, report)
            try:
                with meter("mutants", None) as bar:
                    strength = score_mutants(
                        chosen,
                        grade_all,
                        seed=plan.seed,
                        cap=plan.cap,
                        out=plan.out_dir,
                        validation=statuses,
                        on_done=bar.advance,
                        on_planned=bar.planned,
                        classify=sort,
                    )
            finally:
                cold.close()
    finally:
        factory.close()
    subset = verified_subset(strength, threshold=plan.threshold, repeat=plan.repeat)
    return ValidationRun(report, strength, subset)


def _sound(pset: Pset, report: ValidationReport) -> tuple[Pset, dict[str, str]]:
    """The snippets whose reference passed (ok or weak), and every snippet's status."""
    statuses = {s.id: s.status.value for p in report.papers for s in p.snippet_reports}
    sound = tuple(i for i, st in statuses.items() if st in (Status.OK, Status.WEAK))
    chosen = select_snippets(pset, sound) if sound else pset.model_copy(update={"papers": ()})
    return chosen, statuses


@dataclass(frozen=True)
class AuditReport:
    """What ``audit`` found: the findings over ``snippets`` snippets, and the positive
    control's (None when it was not run)."""

    findings: list[Finding]
    snippets: int
    control: list[Finding] | None = None

    @property
    def leaks(self) -> list[Finding]:
        """The findings that are not the benchmark's design."""
        return [f for f in self.findings if f.accepted is None]

    @property
    def caught(self) -> list[Finding]:
        """The control's findings of its seeded leak (empty: the control failed)."""
        return [f for f in self.control or () if f.path == CANARY_LEAK]

    @property
    def control_missed(self) -> bool:
        """The control ran and its seeded leak was not found: a clean result proves nothing."""
        return self.control is not None and not self.caught


def run_audit(
    pset: Pset,
    sandbox: SandboxConfig,
    dispatcher: Dispatcher,
    control: bool = True,
    meter: Meter = quiet,
) -> AuditReport:
    """Search everything an agent can read for each of ``pset``'s answers, in ``sandbox``'s
    sandboxes, through ``dispatcher``; with ``control``, the bundled canary too (its seeded
    leak must be found)."""
    factory = SandboxFactory(sandbox)
    try:
        with dispatcher.session():
            findings, controlled = dispatcher.audit(pset, factory, control, meter)
    finally:
        factory.close()
    return AuditReport(findings, len(pset.snippets), controlled)


@dataclass(frozen=True)
class HackReport:
    """What the reward-hack suite found on ``backend``: each attack's row, what the suite left
    on the host, and the reference's verdict in a fresh sandbox afterwards."""

    backend: str
    results: list[HackResult]
    left: list[str]
    after: GradeResult

    @property
    def beaten(self) -> list[str]:
        """The attacks that passed or got themselves excluded."""
        return [r.attack for r in self.results if r.passed or r.excluded]

    @property
    def ok(self) -> bool:
        return not self.beaten and not self.left and self.after.passed


def run_hack_suite(
    sandbox: SandboxConfig,
    dispatcher: Dispatcher,
    attacks: dict[str, str],
    timeout_s: float,
    jobs: int = 1,
) -> HackReport:
    """Grade ``attacks`` (name -> body, :func:`~rcb_env.validation.hacks.chosen`) on the
    bundled tasks through ``dispatcher`` (``jobs`` at once here): every attack must score 0,
    the host must be unchanged and the reference must still pass afterwards."""
    pset = loader.load(loader.bundled_root())
    paper = pset.paper(TARGET[0])
    snippet = paper.snippet(TARGET[1])
    factory = SandboxFactory(sandbox)
    try:
        # Ray, when asked for, is joined (or started) before the host is looked at: its own
        # session folder is rcb-env's, not something an attack left.
        with dispatcher.session():
            graders: dict[str, Grader] = {}

            def grader_for(target: Any) -> Grader:
                if target.id not in graders:
                    graders[target.id] = Grader(
                        GradingConfig(timeout_s=timeout_s),
                        executor=factory.grading_executor(target),
                    )
                return graders[target.id]

            grader = grader_for(paper)
            # The environment as it stands before any attack (with warm grading, the warm
            # process of each paper attacked): what the attacks leave is measured against that.
            for paper_id, snippet_name in sorted({target_of(name) for name in attacks}):
                target = pset.paper(paper_id)
                reference = target.snippet(snippet_name).reference_body
                grader_for(target).grade(target, target.snippet(snippet_name), reference)
            before = host_state(factory)
            results = dispatcher.grade_attacks(pset, attacks, grader_for, factory.config, jobs)
            left = leftovers(before, factory)
            # the next episode is clean: the honest answer still passes, in a fresh sandbox
            after = grader.grade(paper, snippet, snippet.reference_body)
    finally:
        factory.close()
    return HackReport(factory.backend, results, left, after)
