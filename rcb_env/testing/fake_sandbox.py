"""A sandbox for tests that needs nothing installed: the workspace is a tmpfs copy on the host,
commands run in a plain ``bash`` (no isolation, like ``local``), every command is recorded, and a
test can make any command fail the way a broken sandbox would.

Register it under a name of your choosing to use it through a :class:`SandboxFactory`::

    register_backend(FakeBackend)                   # as "fake"
    SandboxFactory(SandboxConfig(backend="fake"))
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rcb_env.execution import ExecResult
from rcb_env.sandbox.backend import Backend
from rcb_env.sandbox.backends.local import HostShellSandbox, LocalExecutor
from rcb_env.sandbox.base import Executor, Sandbox, SandboxConfig
from rcb_env.task.models import Paper

Injected = Callable[[str], BaseException | None]
"""Given a command, the error the fake sandbox raises instead of running it (or None)."""


class FakeSandbox(HostShellSandbox):
    """A real shell on a tmpfs copy, recording commands, with injectable failures."""

    backend = "fake"

    def __init__(
        self,
        template: Path,
        config: SandboxConfig,
        scratch: Path,
        *,
        inject: Injected | None = None,
        log: list[str] | None = None,
    ) -> None:
        super().__init__(template, config, scratch)
        self.commands: list[str] = log if log is not None else []
        """Every command given to :meth:`exec`, in order."""
        self.inject = inject

    def exec(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        if not self.closed:
            self.commands.append(command)
            error = self.inject(command) if self.inject is not None else None
            if error is not None:
                raise error
        return super().exec(command, timeout_s=timeout_s)


class FakeBackend(Backend):
    """The fake sandbox as a backend. Class attributes :attr:`inject` and :attr:`log` reach
    every sandbox it opens (set them in a test, reset them after)."""

    name = "fake"
    isolating = False
    inject: ClassVar[Injected | None] = None
    log: ClassVar[list[str]] = []
    _lock = threading.Lock()

    @classmethod
    def probe(cls) -> str | None:
        return None

    def create(self, template: Path, paper: Paper) -> Sandbox:
        return FakeSandbox(
            template, self.config, self.scratch, inject=type(self).inject, log=type(self).log
        )

    def grading_executor(self, paper: Paper) -> Executor:
        return LocalExecutor(
            output_limit=self.config.output_limit, scratch=self.scratch, limits=self.config.limits
        )
