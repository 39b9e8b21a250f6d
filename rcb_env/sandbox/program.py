"""An agent that is a program of its own (an agent CLI) runs in the episode's sandbox through
:class:`ProgramRunner`, which the episode driver hands it
(:class:`~rcb_env.agent.ProgramAgent`): one program, with the sandbox's isolation, killed when
the episode's wall-clock budget ends."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rcb_env.execution import ExecResult
from rcb_env.sandbox.base import Program, Sandbox

__all__ = ["Program", "ProgramRunner"]


class ProgramRunner:
    """What the driver hands a :class:`~rcb_env.agent.ProgramAgent`: one program run in the
    episode's sandbox (:meth:`Sandbox.run_program <rcb_env.sandbox.Sandbox.run_program>`),
    killed when the episode's wall-clock budget ends (:attr:`timed_out`)."""

    def __init__(self, sandbox: Sandbox, wall_s: float | None) -> None:
        self._sandbox = sandbox
        self.wall_s = wall_s
        """What is left of the wall-clock budget (None: unlimited)."""
        self.workspace = sandbox.workspace_inside
        """The workspace, as the program sees it (its working folder)."""
        self.home = sandbox.program_home_inside
        """The program's own writable home folder, as it sees it."""
        self.python = sandbox.program_python
        """An interpreter the program can run inside (the sandbox's own)."""
        self.result: ExecResult | None = None
        """How the program ended (None before it ran)."""
        self.timed_out = False
        """The wall-clock budget ended it."""

    @property
    def host_home(self) -> Path:
        """Its home folder on the host side (its result files, after it ended)."""
        return self._sandbox.program_home

    def run(self, program: Program) -> ExecResult:
        """Run it to its end, or to the end of the wall-clock budget (or its own timeout).

        Raises:
            SandboxError: it could not be started.
        """
        timeout = program.timeout_s if self.wall_s is None else min(program.timeout_s, self.wall_s)
        self.result = self._sandbox.run_program(replace(program, timeout_s=max(timeout, 0.0)))
        self.timed_out = self.result.timed_out
        return self.result
