"""Stage: sandboxes. Where agent commands and grading runs execute."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from rcb_env import config as settings
from rcb_env.errors import ConfigError, SandboxError
from rcb_env.sandbox import bwrap
from rcb_env.sandbox.base import (
    BackendName,
    ExecResult,
    Executor,
    Limits,
    Sandbox,
    SandboxConfig,
)
from rcb_env.sandbox.bwrap import BwrapExecutor, BwrapSandbox
from rcb_env.sandbox.local import LocalExecutor, LocalSandbox
from rcb_env.sandbox.workspace import WorkspacePathError, build_template
from rcb_env.task.models import Paper, Snippet

__all__ = [
    "BackendName",
    "ExecResult",
    "Executor",
    "Limits",
    "Sandbox",
    "SandboxConfig",
    "SandboxFactory",
    "WorkspacePathError",
    "resolve_backend",
]


def resolve_backend(name: BackendName) -> str:
    """``auto`` means bwrap if it really runs here; the unisolated ``local`` is never chosen
    implicitly.

    Raises:
        SandboxError: bwrap was asked for (or ``auto``) and does not run here.
    """
    if name == "local":
        return "local"
    reason = bwrap.probe()
    if reason is None:
        return "bwrap"
    hint = " (pass --sandbox local to run WITHOUT isolation)" if name == "auto" else ""
    raise SandboxError(f"{reason}{hint}")


class SandboxFactory:
    """Builds each snippet's masked template once and opens sandboxes from it."""

    def __init__(self, config: SandboxConfig | None = None, scratch: Path | None = None) -> None:
        self.config = config or SandboxConfig()
        self.backend = resolve_backend(self.config.backend)
        if self.backend == "bwrap":
            bwrap.sweep_cgroups()
        self.scratch = scratch or settings.scratch_dir()
        self._templates = Path(tempfile.mkdtemp(prefix="rcb-templates-", dir=self.scratch))

    def template(self, paper: Paper, snippet: Snippet) -> Path:
        return build_template(paper, snippet, self._templates / paper.slug / snippet.slug)

    def create(self, paper: Paper, snippet: Snippet) -> Sandbox:
        """A started sandbox on a fresh copy of the snippet's masked workspace."""
        template = self.template(paper, snippet)
        sandbox: Sandbox
        if self.backend == "bwrap":
            sandbox = BwrapSandbox(template, self.config, self.scratch)
        elif self.backend == "local":
            sandbox = LocalSandbox(template, self.config, self.scratch)
        else:  # pragma: no cover - resolve_backend only returns the two above
            raise ConfigError(f"unknown sandbox backend {self.backend!r}")
        sandbox.start()
        return sandbox

    def grading_executor(self) -> Executor:
        if self.backend == "bwrap":
            return BwrapExecutor(self.config, self.scratch)
        return LocalExecutor(output_limit=self.config.output_limit, scratch=self.scratch)

    def close(self) -> None:
        shutil.rmtree(self._templates, ignore_errors=True)
