"""Stage: sandboxes. Where agent commands and grading runs execute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rcb_env import config as settings
from rcb_env.errors import ConfigError, SandboxError
from rcb_env.sandbox import bwrap
from rcb_env.sandbox import scratch as scratch_dirs
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
    if name == "docker":
        from rcb_env.sandbox import docker

        why = docker.probe()
        if why is not None:
            raise SandboxError(why)
        return "docker"
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
            bwrap.sweep_cgroups(parent_name=self.config.cgroup_parent)
        self.scratch = scratch or settings.scratch_dir()
        scratch_dirs.sweep(self.scratch)  # what killed runs left behind
        self._templates = scratch_dirs.make("rcb-templates-", self.scratch)
        self._docker: Any = None
        self._pool: Any = None
        self._images: dict[str, str] = {}
        if self.backend == "docker":
            from rcb_env.sandbox import docker

            self._docker = docker.client()
            self._pool = docker.ContainerPool(
                self._docker, self.config, self.scratch, self.config.pool_size
            )

    @property
    def engine(self) -> Any:
        """docker: this factory's engine client (None for the other backends)."""
        return self._docker

    def image(self, paper: Paper) -> str:
        """docker: the paper's image tag, which must have been built.

        Raises:
            SandboxError: it has not been built (with the command that builds it).
        """
        from rcb_env.sandbox import images

        if paper.id in self._images:
            return self._images[paper.id]
        tag = images.image_tag(paper, images.ImageConfig(base=self.config.docker_base))
        if not images.image_exists(self._docker, tag):
            raise SandboxError(
                f"no image {tag} for paper {paper.id}: run `rcb-env images build"
                f" --base {self.config.docker_base}` (with the same --pset) first"
            )
        self._images[paper.id] = tag  # checked once per factory, not once per episode
        return tag

    def warm(self, papers: list[Paper]) -> None:
        """docker: start pooled containers for these papers' images ahead of time."""
        if self._pool is not None and self.config.pool_size > 0:
            for paper in papers:
                self._pool.warm(self.image(paper))

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
        elif self.backend == "docker":
            from rcb_env.sandbox.docker import DockerSandbox

            slot = self._pool.acquire(self.image(paper))
            sandbox = DockerSandbox(template, self.config, self.scratch, slot)
        else:  # pragma: no cover - resolve_backend only returns the two above
            raise ConfigError(f"unknown sandbox backend {self.backend!r}")
        sandbox.start()
        return sandbox

    def grading_executor(self, paper: Paper) -> Executor:
        """Where a paper's grading runs: a fresh sandbox of this factory's kind."""
        if self.backend == "bwrap":
            return BwrapExecutor(self.config, self.scratch)
        if self.backend == "docker":
            from rcb_env.sandbox.docker import DockerExecutor

            return DockerExecutor(self.image(paper), self.config, self._docker)
        return LocalExecutor(output_limit=self.config.output_limit, scratch=self.scratch)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        scratch_dirs.discard(self._templates)
