"""One root error class, with one branch per audience.

- :class:`AgentFacingError`: the agent's own mistake (a malformed action, a path outside the
  workspace). It goes back to the agent as an observation; the episode goes on.
- :class:`InfrastructureError`: the environment broke (sandbox, grading, model server). It ends
  the episode with ``status="infra_error"`` and is never scored as reward 0.
  :func:`infra_error` is the one boundary that turns any failure into that record.
- :class:`TaskLoadError` and its subclasses: the task data is malformed. Each names the file, the
  1-based line (when there is one) and the snippet (when there is one).
- :class:`ConfigError`: the user asked for something impossible (a programmer/config error).

The CLI maps them to exit codes (:data:`EXIT_CODES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict


class RcbError(Exception):
    """Root of every error rcb-env raises on purpose."""


class AgentFacingError(RcbError, ValueError):
    """The agent's mistake: shown to it as an observation, the episode continues."""


class InfrastructureError(RcbError):
    """The environment, not the agent, failed. ``stage`` names where (see :data:`Stage`)."""

    stage: Stage = "sandbox"


class ConfigError(RcbError):
    """A setting or argument is invalid."""


class TaskLoadError(RcbError):
    """Task data is malformed or missing. Names file, line and snippet where they are known."""

    def __init__(
        self,
        message: str,
        *,
        file: Path | str | None = None,
        line: int | None = None,
        snippet: str | None = None,
        paper: str | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.snippet = snippet
        self.paper = paper
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [p for p in (where, self.message) if p]
        text = ": ".join(parts)
        if self.snippet is not None:
            text += f' (snippet "{self.snippet}")'
        if self.paper is not None and self.file is None:
            text = f"paper {self.paper}: {text}"
        return text


class AnnotationError(TaskLoadError):
    """A ``<paper2code>`` marker is unclosed, crossed, mis-indented or otherwise malformed."""


class DuplicateSnippetError(TaskLoadError):
    """Two snippets of one paper share a name (the official metrics would merge them)."""


class MissingTaskFileError(TaskLoadError):
    """A required file (test file, paper text, annotated or context file) is absent."""


class MetadataError(TaskLoadError):
    """``papers.yaml`` or an rcb-env overlay file is unreadable or has invalid fields."""


class GradingError(InfrastructureError):
    """The grader could not run at all (setup failed before any test could run)."""

    stage: Stage = "grading"


class SandboxError(InfrastructureError):
    """A sandbox could not be created or could not run a command (an infrastructure failure)."""

    stage: Stage = "sandbox"


class ModelError(InfrastructureError):
    """A model call failed for good (after retries, or not retryable)."""

    stage: Stage = "model"


#: Where in an episode a failure happened.
Stage = Literal["sandbox", "grading", "tests", "model", "agent"]


class InfraError(BaseModel):
    """An infrastructure failure as recorded on an episode."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str
    """Where it happened: sandbox, grading, tests, model, agent."""
    type: str
    """Error class or failure kind."""
    message: str
    """What went wrong."""


def infra_error(exc: BaseException, stage: Stage | None = None) -> InfraError | None:
    """The one boundary: the record of ``exc`` if it is an infrastructure failure, else None
    (the caller re-raises). An :class:`InfrastructureError` carries its own stage; a host-side
    ``OSError`` (disk full, a vanished folder) counts as one at ``stage``."""
    if isinstance(exc, InfrastructureError):
        where = "model" if isinstance(exc, ModelError) else (stage or exc.stage)
        return InfraError(stage=where, type=type(exc).__name__, message=str(exc)[:2000])
    if isinstance(exc, OSError) and not isinstance(exc, RcbError):
        return InfraError(
            stage=stage or "sandbox", type=type(exc).__name__, message=str(exc)[:2000]
        )
    return None
