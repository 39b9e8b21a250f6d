"""One snippet as a Gymnasium environment.

reset -> the task statement (file, TODO block, paper, file tree); step(action) -> the tool's
observation; ``submit`` grades and ends the episode (``terminated``). Budgets live in wrappers
(:mod:`rcb_env.episode.wrappers`), which end the episode with ``truncated`` after grading what the
workspace holds. Reward: pass x line weight at the end (or 0/1 with ``reward="binary"``), 0 before.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

import gymnasium as gym
from pydantic import BaseModel, ConfigDict

from rcb_env.episode.spaces import ActionSpace, TextSpace
from rcb_env.errors import GradingError, SandboxError
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.grading.models import FailureKind, GradeResult, Outcome
from rcb_env.logs import get_logger
from rcb_env.sandbox import Sandbox, SandboxConfig, SandboxFactory
from rcb_env.sandbox.workspace import WorkspacePathError, extract_body
from rcb_env.task.models import Paper, Snippet
from rcb_env.tools import paper as paper_tools
from rcb_env.tools.actions import ActionError, Submit, parse_action
from rcb_env.tools.toolbox import Feedback, ToolBox, truncate


class EnvConfig(BaseModel):
    """Episode settings (sandbox and grading have their own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test_feedback: Feedback = "summary"
    """What ``run_tests`` reveals: full output, per-test pass/fail, or nothing (the paper's
    setting)."""
    paper_in_prompt: Literal["full", "outline"] = "full"
    """Put the whole paper in the first observation, or only its outline (use ``read_paper``)."""
    reward: Literal["weighted", "binary"] = "weighted"
    """Final reward: pass x line weight, or pass as 0/1."""
    max_observation_chars: int = 20_000
    """Longer tool outputs keep their head and tail."""
    max_command_s: float = 300.0
    """Cap on any single shell command's timeout."""


def _infra(stage: str, exc: BaseException) -> dict[str, str]:
    return {"stage": stage, "type": type(exc).__name__, "message": str(exc)[:2000]}


class RcbEnv(gym.Env[str, Any]):
    """An episode per reset: the agent fills one masked snippet of one paper."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention

    def __init__(
        self,
        paper: Paper,
        snippet: Snippet,
        config: EnvConfig | None = None,
        *,
        sandbox_config: SandboxConfig | None = None,
        grading_config: GradingConfig | None = None,
        factory: SandboxFactory | None = None,
    ) -> None:
        self.paper = paper
        self.snippet = snippet
        self.config = config or EnvConfig()
        self._own_factory = factory is None
        self.factory = factory or SandboxFactory(sandbox_config)
        self.grader = Grader(grading_config, executor=self.factory.grading_executor(paper))
        self.paper_text = (paper.root / paper.paper_file).read_text(
            encoding="utf-8", errors="replace"
        )
        self.observation_space = TextSpace()
        visible = tuple(sorted({snippet.file, *paper.context_files}))
        self.action_space = ActionSpace(visible)
        self.sandbox: Sandbox | None = None
        self.toolbox: ToolBox | None = None
        self.episode_id = ""
        self.steps = 0
        self.done = False
        self.started = 0.0
        self.final: dict[str, Any] | None = None
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
            paper_is_markdown=self.paper.paper_file.endswith(".md"),
            run_tests=self._grade_workspace,
            feedback=self.config.test_feedback,
            max_chars=self.config.max_observation_chars,
            max_command_s=self.config.max_command_s,
        )
        # Deterministic for a given seed (Gymnasium checks that reset(seed) is reproducible).
        self.episode_id = (options or {}).get("episode_id") or (
            f"{self.snippet.slug}-seed{seed}" if seed is not None else uuid.uuid4().hex[:12]
        )
        self.log = get_logger(__name__, task_id=self.snippet.id, episode_id=self.episode_id)
        self.steps = 0
        self.done = False
        self.final = None
        self.started = time.monotonic()
        self.log.debug("reset")
        return self._task_statement(), self._info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.toolbox is None or self.sandbox is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("the episode has ended; call reset()")
        self.steps += 1
        try:
            parsed = parse_action(action)
        except ActionError as exc:
            return f"error: {exc}", 0.0, False, False, self._info(action_error=True)
        if isinstance(parsed, Submit):
            return self.finish(parsed.body, reason="submit")
        try:
            result = self.toolbox.run(parsed)
        except (SandboxError, OSError) as exc:  # e.g. the workspace's disk is full
            self.log.warning("sandbox failed", error=str(exc))
            self.done = True
            self.final = {"infra_error": _infra("sandbox", exc), "reason": "infra_error"}
            obs = f"the sandbox failed; the episode cannot continue: {exc}"
            return obs, 0.0, False, True, self._info(**self.final)
        return result.text, 0.0, False, False, self._info(tool_ok=result.ok, **result.data)

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
        if self._own_factory:
            self.factory.close()
        super().close()

    # ending ----------------------------------------------------------------------------------
    def finish(
        self, body: str | None = None, *, reason: str = "submit"
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Grade and end the episode. ``reason`` other than ``submit`` marks a truncation."""
        assert self.sandbox is not None
        self.done = True
        truncated = reason != "submit"
        extra: dict[str, Any] = {"reason": reason}
        try:
            patch = self.sandbox.diff()
            changed = self.sandbox.changed_files()
            if body is None:
                body, outside = self._workspace_body()
            else:
                outside = any(f != self.snippet.file for f in changed)
            extra.update(patch=patch, changed_files=changed, outside_edits=outside, body=body)
            grade = self.grader.grade(self.paper, self.snippet, body)
        except (SandboxError, GradingError, OSError) as exc:
            extra["infra_error"] = _infra("grading", exc)
            self.final = extra
            return (
                f"grading failed (infrastructure): {exc}",
                0.0,
                not truncated,
                truncated,
                self._info(**extra),
            )
        extra["grade"] = grade.model_dump(mode="json")
        if grade.outcome is Outcome.INFRA_ERROR:
            extra["infra_error"] = {
                "stage": "tests",
                "type": grade.kind.value,
                "message": grade.detail,
            }
        reward = self.reward_for(grade)
        extra["passed"] = grade.passed
        self.final = extra
        self.log.info("graded", outcome=grade.outcome.value, reward=reward, reason=reason)
        verdict = "passed" if grade.passed else f"did not pass ({grade.detail})"
        if grade.outcome is Outcome.INFRA_ERROR:
            verdict = f"could not be graded (environment problem: {grade.detail})"
        obs = f"submitted ({reason}); the tests {verdict}; reward {reward:g}"
        return obs, reward, not truncated, truncated, self._info(**extra)

    def reward_for(self, grade: GradeResult) -> float:
        if not grade.passed:
            return 0.0
        return 1.0 if self.config.reward == "binary" else float(self.snippet.weight)

    # helpers ---------------------------------------------------------------------------------
    def _workspace_body(self) -> tuple[str, bool]:
        assert self.sandbox is not None
        try:
            edited = self.sandbox.read_file(self.snippet.file)
        except WorkspacePathError:
            return "", True  # the agent deleted the file: nothing to grade
        return extract_body(self.snippet.masked_text, self.snippet, edited)

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

    def _info(self, **extra: Any) -> dict[str, Any]:
        info: dict[str, Any] = {
            "snippet_id": self.snippet.id,
            "paper_id": self.paper.id,
            "file": self.snippet.file,
            "context_files": list(self.paper.context_files),
            "todo_block": self.snippet.todo_body(),
            "episode_id": self.episode_id,
            "weight": self.snippet.weight,
            "step": self.steps,
        }
        info.update(extra)
        return info

    def _task_statement(self) -> str:
        s = self.snippet
        todo = s.todo_body().rstrip("\n")
        title = self.paper.meta.title or self.paper.id
        assert self.sandbox is not None
        files = "\n".join(self.sandbox.list_files())
        if self.config.paper_in_prompt == "full":
            paper = self.paper_text
        else:
            outline = paper_tools.outline(self.paper_text, self.paper.paper_file.endswith(".md"))
            paper = f"(outline only; use read_paper to read a section)\n{outline}"
        context = ""
        if self.paper.context_files:
            context = (
                "Files worth reading for context: " + ", ".join(self.paper.context_files) + "\n"
            )
        return (
            f'Task: implement one missing block of the code that accompanies the paper "{title}".\n'
            f"\nIn {s.file}, these two comment lines stand where the code was removed:\n\n"
            f"{todo}\n\n"
            "Replace them with a working implementation at the same indentation, using the paper "
            "and the rest of the repository. Only that block is graded, by the paper's tests "
            "(hidden from you); changes elsewhere are ignored. When done, call submit.\n"
            f"{context}"
            f"\nRepository files:\n{files}\n"
            f"\nPaper ({self.paper.paper_file}):\n{truncate(paper, 200_000)}"
        )


def make_env(
    paper: Paper,
    snippet: Snippet,
    config: EnvConfig | None = None,
    **kwargs: Any,
) -> RcbEnv:
    """Build an environment for any loaded snippet (bundled or from a pset)."""
    return RcbEnv(paper, snippet, config, **kwargs)
