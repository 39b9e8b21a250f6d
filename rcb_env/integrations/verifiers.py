"""rcb-env as a verifiers (v1) environment: a taskset of snippets and an ``Env`` whose episodes
are rcb-env episodes, worked by any verifiers harness through rcb-env's MCP server.

verifiers' v1 design gives an agent its tools as MCP servers and runs the model loop in a
harness (``bash``, ``null``, ``mini_swe_agent``, ...). Here each rollout starts an rcb-env
episode on the host (its own sandbox, from one template per snippet), serves that episode over
streamable HTTP on 127.0.0.1 (:mod:`rcb_env.integrations.mcp_server`), hands the endpoint to the
harness as an external tool server named ``rcb``, and records the environment's own reward on
the trace once the harness is done (submitted, out of budget, or gone: the workspace graded as
it stands). The episode is budgeted, graded and recorded exactly as a native one; an
infrastructure failure raises, which verifiers counts as a failed (retryable) episode with no
reward, never a 0.

Run it with verifiers' own eval path, naming the taskset package ``rcb_verifiers`` (verifiers
finds tasksets by a top-level module name; that package re-exports these classes)::

    vf-eval rcb_verifiers --env.taskset.pset researchcodebench -m MODEL ...

or from Python: ``verifiers.v1.cli.eval.runner.run_eval(EvalConfig(env={"taskset": {"id":
"rcb_verifiers"}}, ...))``. Needs ``rcb-env[verifiers]``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import verifiers.v1 as vf
from verifiers.v1.mcp import SharedToolServer

from rcb_env import catalog
from rcb_env import config as rcb_config
from rcb_env.episode.config import BudgetConfig, EnvConfig, EpisodeConfig
from rcb_env.grading.grader import DEFAULT_TIMEOUT_S, GradingConfig
from rcb_env.integrations.bridge import EpisodeBridge
from rcb_env.integrations.mcp_server import HttpEndpoint
from rcb_env.integrations.pull import load_tasks
from rcb_env.results.records import RECORDS, EpisodeRecord, RecordLog
from rcb_env.sandbox import SandboxConfig
from rcb_env.task.difficulty import difficulty_table, read_published
from rcb_env.tools.toolbox import Feedback

#: The name of the tool server the harness sees (its tools may be prefixed with it).
TOOL_SERVER = "rcb"


class RcbTasksetConfig(vf.TasksetConfig):
    """Which snippets, and how each episode runs (``--env.taskset.*``): ``episode``. The
    fields after it are deprecated, accepted for one release (each replaces its part of the
    default episode config; not with ``episode``)."""

    pset: str | None = None
    """A benchmark's name (``researchcodebench``, ``lmr-bench``) or a task folder; None: the
    bundled tasks."""
    snippets: list[str] = []  # noqa: RUF012 - a pydantic field (copied per instance)
    """Only these snippet ids (``<paper>/<snippet>``); empty: every runnable snippet."""
    records: str | None = None
    """A folder to append rcb-env's episode records to (``episodes.jsonl``), as ``eval`` does."""
    published: str | None = None
    """The paper's results file (``overall_stats.json``): each task's ``solve_rate`` for
    curricula (default: ``$RCB_PUBLISHED_RESULTS``; none: ``solve_rate`` is None)."""
    episode: EpisodeConfig | None = None
    """Each episode's settings, sandbox, grading and budgets (``--env.taskset.episode.*``);
    default: the paper's outline in the first observation, the task interpreter for the
    sandbox and the grading, and the default budgets (50 tool calls, 1800 s)."""
    sandbox: str = "auto"
    """The sandbox backend (``auto``, ``bwrap``, ``docker``, ``local``)."""
    task_python: str | None = None
    """The interpreter that runs the tasks' tests (default: rcb-env's task interpreter)."""
    max_steps: int | None = 50
    """Tool calls per episode (enforced by the environment)."""
    max_wall_s: float | None = 1800.0
    """Seconds per episode (enforced by the environment)."""
    grading_timeout_s: float = DEFAULT_TIMEOUT_S
    """Seconds per grading run."""
    paper_in_prompt: Literal["full", "outline"] = "outline"
    """The paper in the first observation: its outline (``read_paper`` reads a section; the
    training default) or the whole paper."""
    test_feedback: Feedback = "summary"
    """What the ``run_tests`` tool reveals (``full``, ``summary``, ``none``)."""

    def episode_config(self) -> EpisodeConfig:
        """The episodes' config: :attr:`episode`, or the default with the parts the deprecated
        fields given replace (:meth:`EpisodeConfig.of
        <rcb_env.episode.config.EpisodeConfig.of>`).

        Raises:
            TypeError: ``episode`` and a deprecated field both given.
        """
        python = Path(self.task_python) if self.task_python else rcb_config.task_python()
        default = EpisodeConfig(
            env=EnvConfig(paper_in_prompt="outline"),
            sandbox=SandboxConfig(python=python),
            grading=GradingConfig(python=python),
        )
        given = self.model_fields_set
        return EpisodeConfig.of(
            self.episode,
            default,
            env=EnvConfig(paper_in_prompt=self.paper_in_prompt, test_feedback=self.test_feedback)
            if given & {"paper_in_prompt", "test_feedback"}
            else None,
            sandbox=SandboxConfig.model_validate({"backend": self.sandbox, "python": python})
            if given & {"sandbox", "task_python"}
            else None,
            grading=GradingConfig(python=python, timeout_s=self.grading_timeout_s)
            if given & {"task_python", "grading_timeout_s"}
            else None,
            budgets=BudgetConfig(max_steps=self.max_steps, max_wall_s=self.max_wall_s)
            if given & {"max_steps", "max_wall_s"}
            else None,
        )


class RcbTaskData(vf.TaskData):
    """One snippet: verifiers' task data plus rcb-env's identity of it."""

    task_id: str
    """``<paper>/<snippet>``."""
    weight: int
    """The snippet's line weight (the reward on a pass)."""
    depth: int = 0
    """Its nesting depth (0: top level)."""
    solve_rate: float | None = None
    """Its solve rate among the paper's published models (0 to 1), when the results file is
    given (:mod:`rcb_env.task.difficulty`): what a curriculum sorts or filters by."""


class RcbTask(vf.Task[RcbTaskData, vf.State, vf.TaskConfig]):
    """A snippet; scored by the environment (the reward is recorded by :class:`RcbVerifiersEnv`
    from the episode's own grading)."""

    @property
    def key(self) -> str:
        return self.data.task_id


class RcbTaskset(vf.Taskset[RcbTask, RcbTasksetConfig]):
    """Every runnable snippet of the selection, as tasks."""

    def load(self) -> Iterator[RcbTask]:
        from rcb_env.runner.eval import runnable

        pset, _totals = runnable(load_tasks(self.config.pset))
        wanted = set(self.config.snippets)
        stats = self.config.published or catalog.published_results()
        table = difficulty_table(pset, published=read_published(Path(stats))[0] if stats else ())
        for snippet in pset.snippets:
            known = table.get(snippet.id)
            if wanted and snippet.id not in wanted:
                continue
            yield RcbTask(
                RcbTaskData(
                    id=snippet.id,
                    name=snippet.id,
                    task_id=snippet.id,
                    weight=snippet.weight,
                    depth=snippet.depth,
                    solve_rate=None if known is None else known.solve_rate(),
                    # replaced by the episode's own statement when the rollout starts
                    prompt=f"Implement the masked block {snippet.name!r} of {snippet.file}.",
                ),
                self.config.task,
            )


class RcbEnvConfig(vf.EnvConfig):
    """The environment: one ``agent`` seat (``--env.agent.*``: its harness and runtime)."""

    agent: vf.AgentConfig = vf.AgentConfig()


class RcbVerifiersEnv(vf.Env[RcbEnvConfig]):
    """Each rollout: an rcb-env episode served over MCP to the agent's harness, then the
    environment's reward on its trace."""

    async def start(self) -> None:
        from rcb_env.runner.eval import EvalConfig
        from rcb_env.sandbox import SandboxFactory

        ts = self.taskset.config
        assert isinstance(ts, RcbTasksetConfig)
        episode = ts.episode_config()
        self._cfg = EvalConfig(
            agent="verifiers",
            sandbox=episode.sandbox,
            grading=episode.grading,
            budgets=episode.budgets,
            env=episode.env,
        )
        self._factory = SandboxFactory(self._cfg.sandbox)
        self._pset = load_tasks(ts.pset)
        self._records = RecordLog(Path(ts.records) / RECORDS).open() if ts.records else None
        self._lock = threading.Lock()
        self._samples: dict[str, int] = {}

    async def stop(self) -> None:
        factory = getattr(self, "_factory", None)
        if factory is not None:
            await asyncio.to_thread(factory.close)
        if getattr(self, "_records", None) is not None:
            assert self._records is not None
            self._records.close()

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        from rcb_env.runner.eval import run_episode

        assert isinstance(task.data, RcbTaskData)
        paper_id, _, name = task.data.task_id.partition("/")
        paper = self._pset.paper(paper_id)
        snippet = paper.snippet(name)
        with self._lock:  # each rollout of a task is a sample of its own
            sample = self._samples.get(snippet.id, 0)
            self._samples[snippet.id] = sample + 1
        bridge = EpisodeBridge(label="verifiers")
        out: list[EpisodeRecord | BaseException] = []

        def episode() -> None:
            try:
                out.append(
                    run_episode(
                        paper, snippet, sample, bridge, self._cfg, self._factory, "verifiers"
                    )
                )
            except BaseException as exc:  # a programming error: surfaces in run() below
                out.append(exc)
                bridge.ended.set()
                bridge.ready.set()

        runner = threading.Thread(target=episode, name="rcb-vf-episode", daemon=True)
        runner.start()
        await asyncio.to_thread(bridge.ready.wait)
        trace: Any = None
        if not bridge.ended.is_set():
            with HttpEndpoint(bridge) as endpoint:
                server = SharedToolServer(url=endpoint.url, local=True, external=True)
                trace = await agents.agent.run(
                    task.with_data(prompt=bridge.statement), tools={TOOL_SERVER: server}
                )
                bridge.disconnect()  # the harness is done: grade what stands, if it did not
                await asyncio.to_thread(runner.join)
        await asyncio.to_thread(runner.join)
        (result,) = out
        if isinstance(result, BaseException):
            raise result
        if self._records is not None:
            self._records.append(result)
        if result.status == "infra_error" or result.infra_error is not None:
            error = result.infra_error
            raise RuntimeError(
                f"rcb-env episode of {snippet.id} could not be scored (infrastructure, stage "
                f"{error.stage if error else '?'}): {error.message if error else result.status}"
            )
        if trace is None:
            raise RuntimeError(f"rcb-env episode of {snippet.id} ended before the agent ran")
        trace.record_reward("rcb_reward", float(result.reward), 1.0)
        trace.record_metric("passed", float(bool(result.passed)))
        trace.record_metric("steps", float(len(result.steps)))
        trace.info["rcb"] = {
            "episode_id": result.episode_id,
            "status": result.status,
            "reason": result.reason,
            "weight": result.weight,
            "passed": result.passed,
        }


__all__ = ["RcbEnvConfig", "RcbTask", "RcbTaskData", "RcbTaskset", "RcbTasksetConfig",
           "RcbVerifiersEnv"]  # fmt: skip


def harness_requirements() -> list[str]:
    """The requirements of verifiers' in-house chat program (the ``bash`` and ``null``
    harnesses run it as a uv script, resolving these when a rollout starts)."""
    import re

    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

    found = re.search(r"^# dependencies = (\[.*\])$", CHAT_PROGRAM_SOURCE, re.MULTILINE)
    if found is None:  # pragma: no cover - a verifiers release that changed its header
        raise RuntimeError("verifiers' chat program declares no dependencies")
    import json

    reqs: list[str] = json.loads(found.group(1))
    return reqs


def offline_harness_env(wheels: Path) -> dict[str, str]:
    """Environment variables under which verifiers' in-house harnesses prepare their program
    from a folder of wheels (``scripts/install.sh`` downloads them) instead of an index: no
    network when a rollout starts."""
    empty = wheels / "no-index"  # an index with no projects: only the wheels are candidates
    empty.mkdir(parents=True, exist_ok=True)
    return {
        "UV_DEFAULT_INDEX": empty.as_uri(),
        "UV_FIND_LINKS": str(wheels),
        "UV_PYTHON_DOWNLOADS": "never",
    }
