"""One snippet as a Gymnasium environment.

reset -> the task statement (file, TODO block, paper, file tree); step(action) -> the tool's
observation; ``submit`` grades and ends the episode (``terminated``). Budgets live in wrappers
(:mod:`rcb_env.episode.wrappers`), which end the episode with ``truncated`` after grading what the
workspace holds. Reward: pass x line weight at the end (or 0/1 with ``reward="binary"``), 0 before.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import gymnasium as gym

from rcb_env._common import truncate
from rcb_env.episode.config import EnvConfig, EpisodeConfig
from rcb_env.episode.outcome import EpisodeOutcome, EpisodeStatus, StopReason
from rcb_env.episode.spaces import ActionSpace, TextSpace
from rcb_env.errors import GradingError, InfraError, infra_error
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.grading.models import GradeResult
from rcb_env.logs import get_logger
from rcb_env.sandbox import Sandbox, SandboxConfig, SandboxFactory
from rcb_env.sandbox.workspace import WorkspacePathError
from rcb_env.task.models import Paper, Snippet
from rcb_env.task.source import source_for
from rcb_env.tools import paper as paper_tools
from rcb_env.tools.actions import ActionError, Submit, parse_action
from rcb_env.tools.toolbox import ToolBox
from rcb_env.verdicts import FailureKind, Outcome


class RcbEnv(gym.Env[str, Any]):
    """An episode per reset: the agent fills one masked snippet of one paper."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention

    def __init__(
        self,
        paper: Paper,
        snippet: Snippet,
        config: EpisodeConfig | EnvConfig | None = None,
        *,
        sandbox_config: SandboxConfig | None = None,
        grading_config: GradingConfig | None = None,
        factory: SandboxFactory | None = None,
    ) -> None:
        """``config``: the episode's configuration; its settings, its grading, and its sandbox
        when no ``factory`` is given (the sandboxes' source; a factory given is the caller's to
        close). Its budgets are counted by the :class:`~rcb_env.episode.wrappers.Budgets`
        wrapper around this environment (:meth:`Budgets.of
        <rcb_env.episode.wrappers.Budgets.of>`). Deprecated, accepted for one release: an
        :class:`EnvConfig` as ``config``, ``sandbox_config`` and ``grading_config``."""
        self.paper = paper
        self.snippet = snippet
        self.config = EpisodeConfig.of(
            config if isinstance(config, EpisodeConfig) else None,
            env=config if isinstance(config, EnvConfig) else None,
            sandbox=sandbox_config,
            grading=grading_config,
        )
        """The episode's configuration."""
        self._own_factory = factory is None
        self.factory = factory or SandboxFactory(self.config.sandbox)
        self.grader = Grader(self.config.grading, executor=self.factory.grading_executor(paper))
        self.source = source_for(paper)
        self.statement = self.source.statement(paper, snippet)
        self.paper_text = self.source.paper_text(paper)
        self.observation_space = TextSpace()
        visible = tuple(sorted({snippet.file, *self.statement.context_files}))
        self.action_space = ActionSpace(visible)
        self.sandbox: Sandbox | None = None
        self.toolbox: ToolBox | None = None
        self.episode_id = ""
        self.steps = 0
        self.done = False
        self.started = 0.0
        self.outcome: EpisodeOutcome | None = None
        """How the episode ended (None while it runs); also ``info["outcome"]`` at the end."""
        self.log = get_logger(__name__, task_id=snippet.id)

    # gymnasium API ---------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.action_space.seed(seed)
        if self.sandbox is None:
            self.sandbox = self.factory.create(self.paper, self.snippet)
        else:
            self.sandbox.reset()
        self.toolbox = ToolBox(
            self.sandbox,
            paper=self.paper_text,
            paper_is_markdown=self.statement.paper_is_markdown,
            run_tests=self._grade_workspace,
            feedback=self.config.env.test_feedback,
            max_chars=self.config.env.max_observation_chars,
            max_command_s=self.config.env.max_command_s,
        )
        # Deterministic for a given seed (Gymnasium checks that reset(seed) is reproducible).
        self.episode_id = (options or {}).get("episode_id") or (
            f"{self.snippet.slug}-seed{seed}" if seed is not None else uuid.uuid4().hex[:12]
        )
        self.log = get_logger(__name__, task_id=self.snippet.id, episode_id=self.episode_id)
        self.steps = 0
        self.done = False
        self.outcome = None
        self.started = time.monotonic()
        self.log.debug("reset")
        task = {**self.statement.model_dump(mode="json"), "paper_text": self.paper_text}
        return self._task_statement(), self._info(task=task)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.toolbox is None or self.sandbox is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self.done:
            raise gym.error.ResetNeeded("the episode has ended; call reset() before step()")
        self.steps += 1
        try:
            parsed = parse_action(action)
        except ActionError as exc:
            return f"error: {exc}", 0.0, False, False, self._info(action_error=True)
        if isinstance(parsed, Submit):
            return self.finish(parsed.body, reason=StopReason.SUBMIT)
        try:
            result = self.toolbox.run(parsed)
        except Exception as exc:  # e.g. the sandbox died, the workspace's disk is full
            error = infra_error(exc, "sandbox")
            if error is None:
                raise
            self.log.warning("sandbox failed", error=str(exc))
            return self._end(
                EpisodeOutcome.failed(error),
                f"the sandbox failed; the episode cannot continue: {exc}",
            )
        return (
            result.text,
            0.0,
            False,
            False,
            self._info(tool_ok=result.ok, tool={"ok": result.ok, **result.data}),
        )

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
        if self._own_factory:
            self.factory.close()
        super().close()

    # ending ----------------------------------------------------------------------------------
    def finish(
        self, body: str | None = None, *, reason: StopReason | str = StopReason.SUBMIT
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Grade and end the episode: ``submit`` terminates it, a budget reason truncates it.
        ``body`` None grades what the workspace holds."""
        if self.sandbox is None:
            raise gym.error.ResetNeeded("call reset() before finish()")
        stop = StopReason(reason)
        if stop is StopReason.INFRA_ERROR:
            raise ValueError("an infrastructure failure is recorded by the environment itself")
        patch, outside = "", False
        changed: tuple[str, ...] = ()
        try:
            patch = self.sandbox.diff()
            changed = tuple(self.sandbox.changed_files())
            if body is None:
                body, outside = self._workspace_body()
            else:
                outside = any(f != self.snippet.file for f in changed)
            grade = self.grader.grade(self.paper, self.snippet, body)
        except Exception as exc:
            error = infra_error(exc, "grading")
            if error is None:
                raise
            return self._end(
                EpisodeOutcome.failed(error, patch=patch, body=body),
                f"grading failed (infrastructure): {exc}",
            )
        if grade.outcome is Outcome.INFRA_ERROR:
            error = infra_error_of(grade)
            outcome = EpisodeOutcome.failed(error, patch=patch, body=body).model_copy(
                update={"grade": grade, "changed_files": changed, "outside_edits": outside}
            )
            return self._end(
                outcome,
                f"submitted ({stop}); the tests could not be graded "
                f"(environment problem: {grade.detail}); not scored",
            )
        reward = self.reward_for(grade)
        outcome = EpisodeOutcome(
            status=EpisodeStatus.COMPLETED
            if stop is StopReason.SUBMIT
            else EpisodeStatus.TRUNCATED,
            reason=stop,
            reward=reward,
            passed=grade.passed,
            patch=patch,
            body=body,
            changed_files=changed,
            outside_edits=outside,
            grade=grade,
        )
        self.log.info("graded", outcome=grade.outcome.value, reward=reward, reason=stop.value)
        verdict = "passed" if grade.passed else f"did not pass ({grade.detail})"
        return self._end(outcome, f"submitted ({stop}); the tests {verdict}; reward {reward:g}")

    def _end(
        self, outcome: EpisodeOutcome, observation: str
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Record the outcome; Gymnasium's flags follow from it (only a submit terminates)."""
        self.done = True
        self.outcome = outcome
        terminated = outcome.reason is StopReason.SUBMIT
        return observation, outcome.reward, terminated, not terminated, self._info(outcome)

    def reward_for(self, grade: GradeResult) -> float:
        """This episode's reward for ``grade`` (:func:`reward_of`)."""
        return reward_of(grade, self.snippet, self.config.env.reward)

    # helpers ---------------------------------------------------------------------------------
    def _workspace_body(self) -> tuple[str, bool]:
        assert self.sandbox is not None
        try:
            edited = self.sandbox.read_file(self.snippet.file)
        except WorkspacePathError:
            return "", True  # the agent deleted the file: nothing to grade
        return self.source.extract_body(self.paper, self.snippet, edited)

    def _grade_workspace(self) -> GradeResult:
        try:
            body, _ = self._workspace_body()
            return self.grader.grade(self.paper, self.snippet, body)
        except (GradingError, OSError) as exc:
            return GradeResult(
                snippet_id=self.snippet.id,
                outcome=Outcome.INFRA_ERROR,
                kind=FailureKind.SANDBOX,
                detail=str(exc),
                official_pass=False,
            )

    def _info(self, outcome: EpisodeOutcome | None = None, **extra: Any) -> dict[str, Any]:
        """The step's info. The environment's own keys cannot be overwritten (a tool's data is
        under ``tool``). At the end: ``outcome`` (the typed :class:`EpisodeOutcome`), and its
        fields flattened (``status``, ``reason``, ``passed``, ``grade``, ``infra_error``...)."""
        info: dict[str, Any] = {
            "snippet_id": self.snippet.id,
            "paper_id": self.paper.id,
            "file": self.statement.file,
            "context_files": list(self.statement.context_files),
            "todo_block": self.statement.placeholder,
            "episode_id": self.episode_id,
            "weight": self.snippet.weight,
            "step": self.steps,
        }
        clash = set(extra) & set(info)
        if clash:  # pragma: no cover - a programming error in the environment itself
            raise KeyError(f"info keys {sorted(clash)} are the environment's own")
        info.update(extra)
        if outcome is not None:
            info["outcome"] = outcome
            info.update(outcome.model_dump(mode="json", exclude={"reward"}))
            for key in ("grade", "infra_error"):
                if info[key] is None:
                    del info[key]
        return info

    def _task_statement(self) -> str:
        st = self.statement
        todo = st.placeholder.rstrip("\n")
        assert self.sandbox is not None
        files = "\n".join(self.sandbox.list_files())
        if self.config.env.paper_in_prompt == "full":
            paper = self.paper_text
        else:
            outline = paper_tools.outline(self.paper_text, st.paper_is_markdown)
            paper = f"(outline only; use read_paper to read a section)\n{outline}"
        context = ""
        if st.context_files:
            context = "Files worth reading for context: " + ", ".join(st.context_files) + "\n"
        return (
            f'Task: {st.intro} "{st.title}".\n'
            f"\nIn {st.file}, {st.placeholder_intro}:\n\n"
            f"{todo}\n\n"
            f"{st.instructions}\n"
            f"{context}"
            f"\nRepository files:\n{files}\n"
            f"\nPaper ({st.paper_file}):\n{truncate(paper, 200_000)}"
        )


def reward_of(grade: GradeResult, snippet: Snippet, reward: str = "weighted") -> float:
    """The one place the reward is computed: 0 unless the grade passed, then 1 (``binary``)
    or the snippet's line weight (``weighted``, :attr:`EnvConfig.reward`)."""
    if not grade.passed:
        return 0.0
    return 1.0 if reward == "binary" else float(snippet.weight)


def infra_error_of(grade: GradeResult) -> InfraError:
    """The infrastructure failure a grading verdict reports (stage ``tests``)."""
    return InfraError(stage="tests", type=grade.kind.value, message=grade.detail)


def make_env(
    paper: Paper,
    snippet: Snippet,
    config: EpisodeConfig | EnvConfig | None = None,
    **kwargs: Any,
) -> RcbEnv:
    """Build an environment for any loaded snippet (bundled or from a pset), as
    :class:`RcbEnv` takes it."""
    return RcbEnv(paper, snippet, config, **kwargs)


__all__ = ["EnvConfig", "EpisodeConfig", "RcbEnv", "infra_error_of", "make_env", "reward_of"]
