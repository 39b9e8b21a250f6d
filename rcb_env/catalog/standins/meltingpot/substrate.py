"""Stand-in for ``meltingpot.substrate``: importable; every attribute refuses when used."""

from typing import Any

from ._missing import refuse


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return refuse(__name__, name)
