"""An evaluation's work as Ray jobs (:mod:`rcb_env.dispatch.ray`): a snippet's pending samples,
run on a node in the run's configuration; and a regrading's (:mod:`rcb_env.runner.regrade`): a
stored candidate graded again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rcb_env.dispatch.ray import Node, TaskRef, watchdog_s
from rcb_env.dispatch.runnable import split
from rcb_env.runner.episode import EvalConfig, make_agent_factory, run_episode
from rcb_env.sandbox import SandboxConfig
from rcb_env.validation.jobs import GradingJob


@dataclass(frozen=True)
class EvalGroup:
    """An evaluation's pending samples of one snippet, run one after another in the run's
    configuration; its result is their records (JSON), each naming its node and attempt."""

    task: TaskRef
    samples: tuple[int, ...]
    cfg: EvalConfig
    run_id: str

    @property
    def key(self) -> str:
        return f"{self.task.id}:{list(self.samples)}"

    @property
    def sandbox(self) -> SandboxConfig:
        return self.cfg.sandbox

    @property
    def home(self) -> str:
        return self.task.paper_id

    def deadline_s(self) -> float:
        """Each sample may take its wall budget and its grading."""
        per_sample = (self.cfg.budgets.max_wall_s or 1800.0) + self.cfg.grading.timeout_s
        return watchdog_s(per_sample * len(self.samples), len(self.samples), self.cfg.sandbox)

    def run(self, node: Node) -> list[dict[str, Any]]:
        pset, paper, snippet = node.snippet(self.task)
        only = pset.model_copy(
            update={"papers": (paper.model_copy(update={"snippets": (snippet,)}),)}
        )
        # The run's one rule (:func:`rcb_env.dispatch.runnable.split`), the backend's part
        # left to :meth:`Node.prepare` (it builds what the node lacks when it can).
        ready, left_out = split(only, self.cfg, check_backend=False)
        if not ready.papers:
            raise RuntimeError(
                f"node {node.id[:12]} is not prepared for {paper.id}: {left_out[0].reason} "
                "(run `rcb-env setup` there, or pull the images, before it joins)"
            )
        node.prepare(paper)
        new_agent = make_agent_factory(self.cfg, only)
        out = []
        for sample in self.samples:
            record = run_episode(
                paper, snippet, sample, new_agent(), self.cfg, node.factory, self.run_id
            )
            stamped = record.model_copy(update={"node": node.id, "attempt": node.attempt})
            out.append(stamped.model_dump(mode="json"))
        return out


@dataclass(frozen=True)
class RegradeJob(GradingJob):
    """A stored episode's candidate graded again against its snippet as the node has it
    (:mod:`rcb_env.runner.regrade`); ``index`` is the episode's sample. Its result is the
    verdict (JSON)."""

    @property
    def key(self) -> str:
        return f"{self.task.id}#{self.index}"
