"""Where the model-free checks grade and audit, chosen once from ``--ray``: on this machine
(:class:`Local`) or as Ray jobs on a cluster's sandbox slots (:class:`OnRay`, over
:mod:`rcb_env.dispatch.ray` and the jobs of :mod:`rcb_env.validation.jobs`; needs
``rcb-env[ray]``, imported only when used). The checks (:mod:`rcb_env.validation.checks`) take
a :class:`Dispatcher` and never ask which one they have.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Protocol

from rcb_env.errors import ConfigError
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task.models import Paper, Pset
from rcb_env.validation.progress import Meter

if TYPE_CHECKING:
    from rcb_env.validation.audit import Finding
    from rcb_env.validation.hacks import HackResult
    from rcb_env.validation.strength import GradeAll


class UnsupportedError(ConfigError):
    """The dispatcher cannot do this with this selection (e.g. mutants on Ray across several
    benchmarks)."""


class Dispatcher(Protocol):
    """Runs the gradings and audits of the model-free checks somewhere."""

    @property
    def here(self) -> bool:
        """Does the work run on this machine (so its backend decides what can run)?"""
        ...

    def session(self, slots: int | None = None) -> AbstractContextManager[None]:
        """The connection the work inside needs (Ray: joined, or started with ``slots``
        sandbox slots, default one per core; left, or stopped if started, at the end)."""
        ...

    def grade_mutants(
        self, pset: Pset, factory: SandboxFactory, grading: GradingConfig, jobs: int
    ) -> GradeAll:
        """How ``pset``'s mutants are graded (``jobs`` at a time here; in ``factory``'s
        sandboxes, or sandboxes of its config on the nodes).

        Raises:
            UnsupportedError: not for this selection.
        """
        ...

    def grade_attacks(
        self,
        pset: Pset,
        attacks: dict[str, str],
        grader_for: Callable[[Paper], Grader],
        sandbox: SandboxConfig,
        jobs: int = 1,
    ) -> list[HackResult]:
        """Each attack of the reward-hack suite graded against its target snippet (by
        ``grader_for``'s graders here, ``jobs`` at once; with their config on the nodes), in
        the suite's order."""
        ...

    def audit(
        self, pset: Pset, factory: SandboxFactory, control: bool, meter: Meter
    ) -> tuple[list[Finding], list[Finding] | None]:
        """The leak audit's findings, and the positive control's (None without ``control``)."""
        ...


class Local:
    """Everything on this machine, in the caller's sandbox factory."""

    here = True

    def session(self, slots: int | None = None) -> AbstractContextManager[None]:
        del slots
        return nullcontext()

    def grade_mutants(
        self, pset: Pset, factory: SandboxFactory, grading: GradingConfig, jobs: int
    ) -> GradeAll:
        from rcb_env.validation.strength import local_grading

        del pset
        return local_grading(lambda p: Grader(grading, executor=factory.grading_executor(p)), jobs)

    def grade_attacks(
        self,
        pset: Pset,
        attacks: dict[str, str],
        grader_for: Callable[[Paper], Grader],
        sandbox: SandboxConfig,
        jobs: int = 1,
    ) -> list[HackResult]:
        from rcb_env.validation.hacks import run_hacks

        del sandbox
        return run_hacks(pset, grader_for, attacks, jobs)

    def audit(
        self, pset: Pset, factory: SandboxFactory, control: bool, meter: Meter
    ) -> tuple[list[Finding], list[Finding] | None]:
        from rcb_env.validation.audit import audit, audit_with_control

        with meter("auditing", len(pset.snippets)) as bar:
            if not control:
                return audit(pset, factory, on_done=bar.advance), None
            return audit_with_control(pset, factory, on_done=bar.advance)


class OnRay:
    """Each grading or paper's audit a Ray job on the cluster at ``address`` (``local``: a Ray
    instance here), the rest (the audit's control, the suite's own checks of the host) here."""

    here = False  # the nodes' engines hold the images, not the driver's: each checks its own

    def __init__(self, address: str) -> None:
        self.address = address

    @contextmanager
    def session(self, slots: int | None = None) -> Iterator[None]:
        from rcb_env.dispatch import ray as ray_runner

        own = ray_runner.connect(self.address, jobs=slots or os.cpu_count() or 1)
        try:
            yield
        finally:
            ray_runner.disconnect(own)

    def grade_mutants(
        self, pset: Pset, factory: SandboxFactory, grading: GradingConfig, jobs: int
    ) -> GradeAll:
        from rcb_env.validation import jobs as ray_jobs

        del jobs
        if pset.parts:
            raise UnsupportedError("mutants on Ray: one benchmark at a time")
        return ray_jobs.mutants_on_ray(pset.benchmark or str(pset.root), factory.config, grading)

    def grade_attacks(
        self,
        pset: Pset,
        attacks: dict[str, str],
        grader_for: Callable[[Paper], Grader],
        sandbox: SandboxConfig,
        jobs: int = 1,
    ) -> list[HackResult]:
        """The attacks of one target snippet graded together (the same verdicts as a local
        run; a refused attack is not graded again without the policy)."""
        from rcb_env.validation import jobs as ray_jobs
        from rcb_env.validation.hacks import HackResult, target_of

        del jobs  # the targets' gradings are Ray jobs, spread by Ray

        by_target: dict[tuple[str, str], list[str]] = {}
        for name in attacks:
            by_target.setdefault(target_of(name), []).append(name)
        rows = {}
        for (paper_id, snippet_name), names in by_target.items():
            grading = grader_for(pset.paper(paper_id)).config
            graded = ray_jobs.grade_on_ray(
                pset.benchmark or str(pset.root),
                paper_id,
                snippet_name,
                [attacks[n] for n in names],
                sandbox,
                grading,
            )
            rows.update({n: HackResult.of(n, r) for n, r in zip(names, graded, strict=True)})
        return [rows[n] for n in attacks]

    def audit(
        self, pset: Pset, factory: SandboxFactory, control: bool, meter: Meter
    ) -> tuple[list[Finding], list[Finding] | None]:
        from rcb_env.validation import audit as leak_audit
        from rcb_env.validation import jobs as ray_jobs

        del meter  # the jobs report nothing until they are done
        findings = ray_jobs.audit_on_ray(pset, factory.config)
        return findings, leak_audit.control(factory) if control else None


def dispatcher_for(ray_address: str | None) -> Dispatcher:
    """The dispatcher ``--ray`` asks for: none, this machine; an address (or ``local``), Ray."""
    return Local() if ray_address is None else OnRay(ray_address)
