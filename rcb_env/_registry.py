"""A registry of classes by name, with built-in entries named as ``module:Class`` and imported
on first use (so a registry never imports its implementations, and an implementation whose
dependencies are missing only matters to whoever asks for it)."""

from __future__ import annotations

import importlib
import threading
from typing import Generic, TypeVar

from rcb_env.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, builtin: dict[str, str]) -> None:
        self.what = what
        self.builtin = dict(builtin)
        self._classes: dict[str, type[T]] = {}
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

    def names(self) -> list[str]:
        """Built-in names first, then registered ones, in registration order."""
        with self._lock:
            return [*self.builtin, *(n for n in self._classes if n not in self.builtin)]

    def custom(self) -> list[str]:
        """Registered names that are not built in, newest first."""
        with self._lock:
            return [n for n in reversed(self._classes) if n not in self.builtin]

    def get(self, name: str) -> type[T]:
        """The class registered as ``name``.

        Raises:
            ConfigError: nothing has that name.
        """
        with self._lock:
            found = self._classes.get(name)
        if found is not None:
            return found
        target = self.builtin.get(name)
        if target is None:
            raise ConfigError(f"unknown {self.what} {name!r} (known: {', '.join(self.names())})")
        module, _, attr = target.partition(":")
        cls: type[T] = getattr(importlib.import_module(module), attr)
        with self._lock:
            return self._classes.setdefault(name, cls)
