"""One root error class, with one subclass per audience and boundary.

- ``TaskLoadError`` and its subclasses: the task data is malformed. Each names the file, the
  1-based line (when there is one) and the snippet (when there is one).
- ``GradingError``: the grader itself could not run (not "the tests failed", which is a result).
- ``ConfigError``: the user asked for something impossible (a programmer/config error).
"""

from __future__ import annotations

from pathlib import Path


class RcbError(Exception):
    """Root of every error rcb-env raises on purpose."""


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


class GradingError(RcbError):
    """The grader could not run at all (setup failed before any test could run)."""


class SandboxError(RcbError):
    """A sandbox could not be created or could not run a command (an infrastructure failure)."""
