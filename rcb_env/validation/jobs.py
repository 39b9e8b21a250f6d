"""Model-free validation's work as Ray jobs (:mod:`rcb_env.dispatch.ray`): a body graded against
a snippet (the reward-hack suite, mutants) and one paper's leak audit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rcb_env.dispatch.ray import Node, RayDispatcher, TaskRef, tasks_on_node, watchdog_s
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.grading.models import GradeResult
from rcb_env.sandbox import SandboxConfig
from rcb_env.task.models import Pset, task_hash
from rcb_env.validation.audit import Finding, audit
from rcb_env.validation.strength import Case, GradeAll
from rcb_env.verdicts import FailureKind, Outcome


@dataclass(frozen=True)
class GradingJob:
    """One body graded against a snippet on a node (the reward-hack suite's bodies; a stored
    run's candidates, :class:`rcb_env.runner.jobs.RegradeJob`); its result is the verdict
    (JSON)."""

    task: TaskRef
    index: int
    body: str
    sandbox: SandboxConfig
    grading: GradingConfig

    @property
    def key(self) -> str:
        return f"{self.task.id}:body{self.index}"

    @property
    def home(self) -> str:
        return self.task.paper_id

    def deadline_s(self) -> float:
        """The body's test runs and the pristine paper's, each with its retries."""
        return watchdog_s(
            2 * self.grading.timeout_s * (1 + self.grading.kill_retries), sandbox=self.sandbox
        )

    def run(self, node: Node) -> dict[str, Any]:
        _pset, paper, snippet = node.snippet(self.task)
        node.prepare(paper)
        grader = Grader(self.grading, executor=node.factory.grading_executor(paper))
        data: dict[str, Any] = grader.grade(paper, snippet, self.body).model_dump(mode="json")
        return data


@dataclass(frozen=True)
class _PaperAudit:
    """The leak audit of one paper; its result is the findings (JSON)."""

    where: str
    paper_id: str
    sandbox: SandboxConfig

    @property
    def key(self) -> str:
        return f"audit:{self.paper_id}"

    @property
    def home(self) -> str:
        return self.paper_id

    def deadline_s(self) -> None:
        return None

    def run(self, node: Node) -> list[dict[str, Any]]:
        pset = node.tasks(self.where)
        paper = pset.paper(self.paper_id)
        node.prepare(paper)
        one = pset.model_copy(update={"papers": (paper,), "failures": ()})
        return [f.model_dump(mode="json") for f in audit(one, node.factory)]


def audit_on_ray(pset: Pset, sandbox: SandboxConfig) -> list[Finding]:
    """The leak audit with one job per paper (connect first): the same findings as a local
    audit, found on the nodes that run the episodes."""
    where = pset.benchmark or str(pset.root)
    jobs = [_PaperAudit(where, p.id, sandbox) for p in pset.papers if p.snippets]
    with RayDispatcher(None) as dispatcher:
        found = dispatcher.results(jobs)
    return [Finding.model_validate(f) for each in found for f in each]


def grade_on_ray(
    where: str,
    paper_id: str,
    snippet_name: str,
    bodies: list[str],
    sandbox: SandboxConfig,
    grading: GradingConfig,
) -> list[GradeResult]:
    """Each body graded as a job (connect first): the reward-hack suite on the nodes."""
    snippet = tasks_on_node(where).paper(paper_id).snippet(snippet_name)
    task = TaskRef(where, None, paper_id, snippet_name, task_hash(snippet))
    jobs = [GradingJob(task, i, body, sandbox, grading) for i, body in enumerate(bodies)]
    with RayDispatcher(None) as dispatcher:
        graded = dispatcher.results(jobs)
    return [GradeResult.model_validate(r) for r in graded]


def mutants_on_ray(
    where: str, sandbox: SandboxConfig, grading: GradingConfig, *, warm: bool = False
) -> GradeAll:
    """A way to grade mutants (``validate --mutants --ray``; connect first): each mutant a
    grading job on a node, its verdict streamed back as it comes; a job that fails for good is
    an infrastructure verdict (excluded from the score, never counted as killed)."""

    def grade_all(cases: Sequence[Case], done: Callable[[Case, GradeResult], None]) -> None:
        jobs = [
            GradingJob(
                TaskRef(where, None, c.paper.id, c.snippet.name, task_hash(c.snippet)),
                i,
                c.mutant.body,
                sandbox,
                grading,
            )
            for i, c in enumerate(cases)
        ]
        case_of = {job.key: c for job, c in zip(jobs, cases, strict=True)}

        def failed(job: GradingJob, why: str) -> None:
            c = case_of[job.key]
            done(
                c,
                GradeResult(
                    snippet_id=c.snippet.id,
                    outcome=Outcome.INFRA_ERROR,
                    kind=FailureKind.SANDBOX,
                    detail=f"the Ray job failed: {why}",
                    official_pass=False,
                ),
            )

        with RayDispatcher(None, warm=warm) as dispatcher:
            dispatcher.run(
                jobs,
                lambda job, result: done(case_of[job.key], GradeResult.model_validate(result)),
                failed,
            )

    return grade_all
