"""The contract every way of running a command satisfies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict


class ExecResult(BaseModel):
    """What an executor reports about one command."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    exit_code: int | None
    """Exit status, or None if the process was killed by a signal."""
    signal: int | None = None
    """Signal that ended the process, if any."""
    timed_out: bool = False
    """True if rcb-env killed it at the wall-clock limit."""
    stdout: str = ""
    """Captured standard output (head and tail kept when truncated)."""
    stderr: str = ""
    """Captured standard error (head and tail kept when truncated)."""
    duration_s: float = 0.0
    """Wall-clock time."""
    found: tuple[str, ...] = ()
    """Which of the requested ``needles`` occur anywhere in the FULL stdout or stderr."""


class Executor(Protocol):
    """Runs one command to completion in a prepared folder."""

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float,
        needles: tuple[str, ...] = (),
    ) -> ExecResult:
        """Run ``argv`` in ``cwd``; kill the whole process tree at ``timeout_s``.

        Raises:
            SandboxError: the command could not be started at all.
        """
        ...
