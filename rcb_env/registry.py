"""A registry of classes by name, with built-in entries named as ``module:Class`` and imported
on first use (so a registry never imports its implementations, and an implementation whose
dependencies are missing only matters to whoever asks for it).

A registry with an entry-point ``group`` also has what installed distributions declare there
(``[project.entry-points."<group>"] name = "package.module:Class"``), read once when a name is
first looked up and imported on first use like the built-in ones: so another package's class is
selectable by name from the stock ``rcb-env`` command, with nothing registered by hand.

:func:`import_target` is the one ``module:Class`` resolver: the registries here, an outside
agent class (``--agent package.module:Class``) and the built-in agents' own tables
(``rcb_agents``) all import through it."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from rcb_env.errors import ConfigError

T = TypeVar("T")

__all__ = ["Registry", "import_target"]


def import_target(spec: str) -> Any:
    """``package.module:name`` -> that object of that module.

    Raises:
        ValueError: ``spec`` is not ``module:name``.
        ImportError: the module does not import (its dependency missing, say).
        AttributeError: the module has no such name.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected 'package.module:Name', not {spec!r}")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AttributeError(f"{module_name} has no {attr}") from None


class Registry(Generic[T]):
    def __init__(
        self,
        what: str,
        builtin: dict[str, str],
        *,
        group: str | None = None,
        on_load: Callable[[str], None] | None = None,
    ) -> None:
        self.what = what
        self.builtin = dict(builtin)
        self.group = group
        """The entry-point group other distributions declare entries in (None: none read)."""
        self.on_load = on_load
        """Called with the name of an installed entry when it is first imported."""
        self._classes: dict[str, type[T]] = {}
        self._installed: dict[str, str] | None = None
        self._lock = threading.Lock()

    def register(self, name: str, cls: type[T]) -> None:
        with self._lock:
            self._classes[name] = cls

    def unregister(self, name: str) -> None:
        """Forget a registered class (a built-in name cannot be removed)."""
        if name in self.builtin:
            raise ConfigError(f"the built-in {self.what} {name!r} cannot be unregistered")
        with self._lock:
            self._classes.pop(name, None)

    def installed(self) -> dict[str, str]:
        """What installed distributions declare in :attr:`group` (name -> ``module:Class``;
        a built-in name is never shadowed). Read once."""
        if self.group is None:
            return {}
        with self._lock:
            if self._installed is None:
                found: dict[str, str] = {}
                for entry in entry_points(group=self.group):
                    if entry.name not in self.builtin:
                        found.setdefault(entry.name, entry.value)
                self._installed = found
            return dict(self._installed)

    def names(self) -> list[str]:
        """Built-in names first, then installed ones, then registered ones, in registration
        order."""
        installed = self.installed()
        with self._lock:
            known = [*self.builtin, *(n for n in installed if n not in self._classes)]
            return [*known, *(n for n in self._classes if n not in self.builtin)]

    def custom(self) -> list[str]:
        """Names that are not built in: registered ones newest first, then installed ones."""
        installed = self.installed()
        with self._lock:
            registered = [n for n in reversed(self._classes) if n not in self.builtin]
        return [*registered, *(n for n in installed if n not in registered)]

    def get(self, name: str) -> type[T]:
        """The class registered as ``name``.

        Raises:
            ConfigError: nothing has that name, or an installed entry does not import.
        """
        with self._lock:
            found = self._classes.get(name)
        if found is not None:
            return found
        target = self.builtin.get(name)
        installed = None if target is not None else self.installed().get(name)
        if target is None and installed is None:
            raise ConfigError(f"unknown {self.what} {name!r} (known: {', '.join(self.names())})")
        try:
            cls: type[T] = import_target(target or installed or "")
        except (ImportError, AttributeError, ValueError) as exc:
            if installed is None:
                raise
            raise ConfigError(
                f"the {self.what} {name!r} that an installed package declares "
                f"({self.group}: {installed}) does not import: {exc}"
            ) from None
        if installed is not None and self.on_load is not None:
            self.on_load(name)
        with self._lock:
            return self._classes.setdefault(name, cls)
