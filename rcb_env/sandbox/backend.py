"""The sandbox-backend contract and its registry.

A backend is one class: how to tell whether it runs here (:meth:`Backend.probe`), its own
settings (:attr:`Backend.options_model`, validated from ``SandboxConfig.options``), how it opens
an episode's :class:`~rcb_env.sandbox.base.Sandbox` and a grading
:class:`~rcb_env.sandbox.base.Executor`, and what it owns on the host (for leftover checks).
Registering it (:func:`register_backend`) is the only step: the scratch-folder prefix of its
sandboxes, the CLI's ``--sandbox`` choices and ``SandboxConfig.backend`` all follow from the
registry. :mod:`rcb_env.sandbox.conformance` is the suite every backend must pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

from rcb_env.errors import ConfigError, SandboxError
from rcb_env.sandbox import registry
from rcb_env.sandbox import scratch as scratch_dirs
from rcb_env.sandbox.base import Executor, Sandbox, SandboxConfig
from rcb_env.task.models import Paper


class NoOptions(BaseModel):
    """A backend without settings of its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Backend(ABC):
    """One way of sandboxing episodes. An instance serves one factory (one run)."""

    name: ClassVar[str]
    """Registry name (``--sandbox NAME``); also the scratch prefix ``rcb-<name>-``."""
    isolating: ClassVar[bool] = True
    """False only for a backend that runs commands on the host as is (``local``)."""
    auto: ClassVar[bool] = False
    """May ``--sandbox auto`` pick it when it probes fine (bwrap does)."""
    options_model: ClassVar[type[BaseModel]] = NoOptions
    """The backend's own settings (frozen, unknown keys refused), validated from
    ``SandboxConfig.options``; what differs between its sandboxes is read from
    :attr:`options`."""
    preparation_s: ClassVar[float] = 0.0
    """Seconds :meth:`ensure_available` may take on a machine that lacks what a paper needs
    (docker: building its image); the Ray driver's watchdog allows them on top of a job's
    budgets."""
    brings_interpreter: ClassVar[bool] = False
    """Its sandboxes run their own interpreter (a container image's): no task environment of
    the host is needed (docker)."""

    def __init__(self, config: SandboxConfig, scratch: Path) -> None:
        self.config = config
        self.scratch = scratch
        self.options = registry.check_options(self.name, self.options_model, config.options)
        """The backend's settings, an instance of :attr:`options_model`."""

    @classmethod
    @abstractmethod
    def probe(cls) -> str | None:
        """Why this backend cannot run on this machine, or None if it can."""

    @classmethod
    def unavailable(cls, paper: Paper, config: SandboxConfig) -> str | None:  # noqa: ARG003
        """Why ``paper`` cannot run on this backend here although the installation has what
        it needs (docker: its image is not built), or None. Such a paper is left out of a
        run's runnable set and listed, never a failure mid-run."""
        return None

    def ensure_available(self, paper: Paper) -> None:  # noqa: B027 - optional hook
        """Make ``paper`` runnable on this machine when it is not yet and the backend can do
        that on its own, with this machine's settings (docker: build the paper's image on this
        engine); by default nothing. A Ray node calls it before a job's sandboxes open, since
        the driver cannot see the nodes' engines.

        Raises:
            SandboxError: it cannot be made runnable here (the reason is in it).
        """

    @abstractmethod
    def create(self, template: Path, paper: Paper) -> Sandbox:
        """A sandbox (not yet started) on a copy of ``template`` for one of ``paper``'s
        snippets.

        Raises:
            SandboxError: it could not be created.
        """

    @abstractmethod
    def grading_executor(self, paper: Paper) -> Executor:
        """Where ``paper``'s grading runs go: fresh, isolated like the episodes.

        Raises:
            SandboxError: the paper's environment is missing (e.g. an image not built).
        """

    def warm(self, papers: Sequence[Paper]) -> None:  # noqa: B027 - optional hook
        """Prepare ahead of time (e.g. start pooled containers); by default nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what this instance holds (pools, clients); by default nothing."""

    @property
    def engine(self) -> Any:
        """A client of the engine behind the backend, if it has one (docker); else None."""
        return None

    def environment_key(self, paper: Paper) -> str | None:
        """What ``paper``'s sandboxes share read-only with other papers' when it is not the
        host's task interpreter (docker: the paper's image); None: that interpreter."""
        return None

    def sandbox_uids(self) -> set[int]:
        """Host uids that the backend's sandboxed processes run as (leftover checks)."""
        return set()

    def owned_on_host(self) -> set[str]:
        """What this process's sandboxes hold on the host right now besides processes and
        scratch folders (e.g. containers); empty once everything is closed."""
        return set()


B = TypeVar("B", bound=type[Backend])


def register_backend(cls: B) -> B:
    """Class decorator: make a backend available by its ``name``."""
    if not cls.name or cls.name == "auto" or not cls.name.replace("-", "").isalnum():
        raise ConfigError(f"invalid backend name {cls.name!r}")
    registry.backends.register(cls.name, cls)
    scratch_dirs.register_prefix(f"rcb-{cls.name}-")
    return cls


def unregister_backend(name: str) -> None:
    """Remove a backend made available by :func:`register_backend` (a test's, say); built-in
    backends stay."""
    registry.backends.unregister(name)


def unavailable_on(config: SandboxConfig, paper: Paper) -> str | None:
    """Why ``paper`` cannot run on the backend ``config`` names (:meth:`Backend.unavailable`),
    or None; ``auto`` picks a backend that runs on the host's environments (nothing more to
    check)."""
    name = config.backend
    return None if name == "auto" else backend_class(name).unavailable(paper, config)


def brings_interpreter(name: str) -> bool:
    """Does the backend ``name`` run its own interpreter, so that no task environment of the
    host is needed? (``auto`` picks only backends that may run implicitly, which use the
    host's task interpreter.)"""
    return name != "auto" and backend_class(name).brings_interpreter


def preparation_time(name: str) -> float:
    """The seconds the backend ``name`` may take to make a paper runnable on a machine that
    lacks its environment (:attr:`Backend.preparation_s`); ``auto`` picks a backend that runs
    on the host's own environments, with nothing to prepare."""
    return 0.0 if name == "auto" else backend_class(name).preparation_s


def backend_names() -> list[str]:
    """Every built-in and registered backend."""
    return registry.backends.names()


def backend_class(name: str) -> type[Backend]:
    """The class registered as ``name``.

    Raises:
        ConfigError: no backend has that name.
    """
    cls: type[Backend] = registry.backends.get(name)
    return cls


def resolve_backend(name: str) -> str:
    """The backend ``name`` stands for, checked to run here. ``auto`` is the first backend that
    may be picked implicitly and probes fine (bwrap); the unisolated ``local`` never is.

    Raises:
        SandboxError: the backend does not run here.
        ConfigError: no backend has that name.
    """
    if name != "auto":
        why = backend_class(name).probe()
        if why is not None:
            raise SandboxError(why)
        return name
    reasons = []
    for candidate in backend_names():
        cls = backend_class(candidate)
        if not cls.auto:
            continue
        why = cls.probe()
        if why is None:
            return candidate
        reasons.append(why)
    raise SandboxError(
        f"{'; '.join(reasons) or 'no backend may be chosen automatically'}"
        " (pass --sandbox local to run WITHOUT isolation)"
    )
