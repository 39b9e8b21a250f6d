"""What a mutation operator is: for one syntax node, the changed nodes it can stand in for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import libcst as cst

__all__ = ["Operator", "Variant", "expression", "shown"]

Variant = tuple[cst.CSTNode, str]
"""A replacement node and a short description of the change (``+ -> -``)."""


class Operator:
    """One kind of mutation. Subclasses name themselves and yield, for a node of the kind they
    change, each replacement with its description; other nodes yield nothing."""

    name: ClassVar[str]

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        """Replacements for ``node`` (whose source text is ``code``)."""
        raise NotImplementedError


def expression(text: str) -> cst.BaseExpression:
    """``text`` as an expression node."""
    return cst.parse_expression(text)


def shown(code: str, limit: int = 60) -> str:
    """``code`` on one line, cut to ``limit`` characters, for a description."""
    one = " ".join(code.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."
