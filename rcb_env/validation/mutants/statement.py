"""Deleted statements: a simple statement line (or a whole ``if``/``for``/``with`` block) replaced
by ``pass``."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant, shown


def _trivial(line: cst.SimpleStatementLine) -> bool:
    """Nothing to delete: ``pass``, ``...`` or a docstring."""
    return all(
        isinstance(s, cst.Pass)
        or (isinstance(s, cst.Expr) and isinstance(s.value, cst.SimpleString | cst.Ellipsis))
        for s in line.body
    )


class Statement(Operator):
    name = "statement"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if isinstance(node, cst.SimpleStatementLine):
            if _trivial(node):
                return
        elif not isinstance(node, cst.If | cst.For | cst.With | cst.While):
            return
        # the statement's own first line (the comments above it belong to the node, and stay)
        lines = [ln for ln in code.strip().splitlines() if not ln.lstrip().startswith("#")]
        first = lines[0] if lines else ""
        replacement = cst.SimpleStatementLine(
            body=[cst.Pass()],
            leading_lines=node.leading_lines,
        )
        yield replacement, f"deleted: {shown(first)}"
