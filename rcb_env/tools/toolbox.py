"""What each tool does. An agent's mistake (bad path, ambiguous edit, timeout) becomes an
observation; a sandbox failure raises :class:`~rcb_env.errors.SandboxError` for the episode to
record as infrastructure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rcb_env._common import truncate
from rcb_env.grading.models import GradeResult
from rcb_env.sandbox.base import Sandbox
from rcb_env.sandbox.workspace import WorkspacePathError
from rcb_env.tools import paper as paper_text
from rcb_env.tools.actions import (
    Action,
    ListFiles,
    ReadFile,
    ReadPaper,
    ReplaceInFile,
    RunCommand,
    RunTests,
    Search,
    Submit,
    WriteFile,
)
from rcb_env.verdicts import Outcome, TestStatus

Feedback = Literal["full", "summary", "none"]


@dataclass
class ToolResult:
    """An observation text, whether the tool did what was asked, and structured extras."""

    text: str
    ok: bool = True
    data: dict[str, Any] = field(default_factory=dict)


class ToolBox:
    def __init__(
        self,
        sandbox: Sandbox,
        *,
        paper: str,
        paper_is_markdown: bool,
        run_tests: Callable[[], GradeResult],
        feedback: Feedback = "summary",
        max_chars: int = 20_000,
        max_command_s: float = 300.0,
    ) -> None:
        self.sandbox = sandbox
        self.paper = paper
        self.markdown = paper_is_markdown
        self._run_tests = run_tests
        self.feedback = feedback
        self.max_chars = max_chars
        self.max_command_s = max_command_s

    def run(self, action: Action) -> ToolResult:
        """Execute one non-submit action."""
        try:
            return self._dispatch(action)
        except WorkspacePathError as exc:
            return ToolResult(f"error: {exc}", ok=False)
        except (UnicodeError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
            return ToolResult(f"error: {exc}", ok=False)

    def _dispatch(self, action: Action) -> ToolResult:
        if isinstance(action, ListFiles):
            files = self.sandbox.list_files(action.path)
            return ToolResult(truncate("\n".join(files) or "(empty)", self.max_chars))
        if isinstance(action, ReadFile):
            return self._read(action)
        if isinstance(action, Search):
            hits = self.sandbox.search(action.pattern, action.path, action.glob)
            lines = [f"{f}:{n}: {text}" for f, n, text in hits]
            return ToolResult(truncate("\n".join(lines) or "no matches", self.max_chars))
        if isinstance(action, ReplaceInFile):
            text = self.sandbox.read_file(action.path)
            count = text.count(action.old)
            if count != 1:
                what = "not found" if count == 0 else f"found {count} times; make it unique"
                return ToolResult(
                    f"error: the text to replace was {what} in {action.path}", ok=False
                )
            self.sandbox.write_file(action.path, text.replace(action.old, action.new, 1))
            return ToolResult(f"replaced 1 occurrence in {action.path}")
        if isinstance(action, WriteFile):
            self.sandbox.write_file(action.path, action.content)
            return ToolResult(f"wrote {len(action.content)} characters to {action.path}")
        if isinstance(action, RunCommand):
            timeout = min(
                action.timeout_s or self.sandbox.config.command_timeout_s, self.max_command_s
            )
            r = self.sandbox.exec(action.command, timeout_s=timeout)
            parts = []
            if r.stdout:
                parts.append(r.stdout.rstrip("\n"))
            if r.stderr:
                parts.append(f"[stderr]\n{r.stderr.rstrip()}")
            if r.timed_out:
                parts.append(f"[killed after {timeout:g} s; the shell was restarted]")
            elif r.oom_killed:
                parts.append("[a process was killed: memory limit exceeded]")
            elif r.host_oom:
                parts.append(
                    "[a process was killed: the machine ran out of memory (not your limit)]"
                )
            parts.append(f"[exit code {r.exit_code}]")
            return ToolResult(
                truncate("\n".join(parts), self.max_chars),
                ok=r.exit_code == 0,
                data={"exit_code": r.exit_code, "timed_out": r.timed_out},
            )
        if isinstance(action, RunTests):
            return self._tests()
        if isinstance(action, ReadPaper):
            return self._paper(action)
        if isinstance(action, Submit):  # pragma: no cover - the environment handles submit
            raise TypeError("submit is handled by the environment")
        raise TypeError(f"unhandled action {action!r}")  # pragma: no cover

    def _read(self, action: ReadFile) -> ToolResult:
        lines = self.sandbox.read_file(action.path).splitlines()
        start = action.start_line or 1
        end = min(action.end_line or len(lines), len(lines))
        if lines and start > len(lines):
            return ToolResult(f"error: {action.path} has only {len(lines)} lines", ok=False)
        width = len(str(end))
        body = "\n".join(f"{i:>{width}}\t{lines[i - 1]}" for i in range(start, end + 1))
        header = f"{action.path} (lines {start}-{end} of {len(lines)})\n" if lines else ""
        return ToolResult(truncate(header + (body or "(empty file)"), self.max_chars))

    def _paper(self, action: ReadPaper) -> ToolResult:
        if action.section is None or not action.section.strip():
            return ToolResult(truncate(self.paper, self.max_chars))
        if action.section.strip().lower() == "outline":
            return ToolResult(paper_text.outline(self.paper, self.markdown))
        found = paper_text.section(self.paper, self.markdown, action.section)
        if found is None:
            return ToolResult(
                f"error: no section matches {action.section!r}. Outline:\n"
                + paper_text.outline(self.paper, self.markdown),
                ok=False,
            )
        return ToolResult(truncate(found, self.max_chars))

    def _tests(self) -> ToolResult:
        result = self._run_tests()
        data = {"outcome": result.outcome.value, "kind": result.kind.value}
        if result.outcome is Outcome.INFRA_ERROR:
            return ToolResult(
                f"the tests could not run (environment problem): {result.detail}",
                ok=False,
                data=data,
            )
        if self.feedback == "none":
            return ToolResult("the tests ran; this environment gives no test feedback", data=data)
        verdict = "PASSED" if result.passed else "FAILED"
        lines = [f"tests {verdict}: {result.detail}"]
        for t in result.tests:
            lines.append(f"  {t.name}: {t.status.value}")
        if self.feedback == "full" and not result.passed:
            failing = [t for t in result.tests if t.status in (TestStatus.FAILED, TestStatus.ERROR)]
            for t in failing[:3]:
                lines.append(f"--- {t.name}\n{t.message.strip()}")
            if result.stderr.strip() and not failing:
                lines.append(f"--- stderr\n{result.stderr.strip()}")
        return ToolResult(truncate("\n".join(lines), self.max_chars), ok=result.passed, data=data)
