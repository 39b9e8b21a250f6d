"""How the model-free checks report progress: a :data:`Meter` opens a bar per phase (the
command line draws it; a library caller may pass :func:`quiet`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol


class Bar(Protocol):
    """One phase's progress."""

    def advance(self, description: str) -> None:
        """One more item done (``description`` names it)."""
        ...

    def planned(self, total: int) -> None:
        """The phase's items, once known."""
        ...


Meter = Callable[[str, "int | None"], AbstractContextManager[Bar]]
"""Opens the bar of a phase: its label and its total (None: not known yet)."""


class _Silent:
    def advance(self, description: str) -> None:
        pass

    def planned(self, total: int) -> None:
        pass


@contextmanager
def quiet(label: str, total: int | None = None) -> Iterator[Bar]:
    """A meter that shows nothing."""
    del label, total
    yield _Silent()
