"""The agent protocol: observation in, action out."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from rcb_env.tools.actions import Action, ToolSpec


@runtime_checkable
class Agent(Protocol):
    """What the runner drives. ``act`` may return a typed action, a dict, or a JSON string."""

    name: str

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        """A new episode: the task statement, its info and the tools available."""
        ...

    def act(self, observation: str, info: dict[str, Any]) -> Action | dict[str, Any] | str:
        """The next action, given the last observation."""
        ...

    def end(self, info: dict[str, Any]) -> None:
        """The episode ended (``info`` holds the grade)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Name and settings, for the episode record."""
        ...


def load_agent_class(spec: str) -> type[Any]:
    """``package.module:ClassName`` -> the class (bring your own agent).

    Raises:
        ValueError: the spec is malformed, the module or class does not exist.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"agent {spec!r}: expected a built-in name or 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"agent {spec!r}: cannot import {module_name}: {exc}") from None
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ValueError(f"agent {spec!r}: {module_name} has no class {attr}")
    return cls
