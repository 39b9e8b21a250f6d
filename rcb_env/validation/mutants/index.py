"""Off-by-one in subscripts: an index or a slice bound plus or minus one."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant, expression, shown


def _bumps(value: cst.BaseExpression) -> Iterator[tuple[cst.BaseExpression, str]]:
    """``value`` plus and minus one, for the kinds of expression an index usually is."""
    code = cst.Module(body=()).code_for_node(value)
    if isinstance(value, cst.Integer):
        n = value.evaluated_value
        for new in (n + 1, n - 1):
            yield expression(f"({new})" if new < 0 else str(new)), f"{code} -> {new}"
    elif (
        isinstance(value, cst.UnaryOperation)
        and isinstance(value.operator, cst.Minus)
        and isinstance(value.expression, cst.Integer)
    ):
        n = -value.expression.evaluated_value
        for new in (n + 1, n - 1):
            yield expression(f"({new})" if new < 0 else str(new)), f"{code} -> {new}"
    elif isinstance(value, cst.Name | cst.Attribute | cst.Call | cst.BinaryOperation):
        if isinstance(value, cst.Name) and value.value in ("None", "True", "False"):
            return
        for sign in ("+", "-"):
            yield expression(f"({code}) {sign} 1"), f"{shown(code)} -> {shown(code)} {sign} 1"


class Index(Operator):
    name = "index"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if not isinstance(node, cst.SubscriptElement):
            return
        part = node.slice
        if isinstance(part, cst.Index):
            if part.star is not None:
                return
            for value, what in _bumps(part.value):
                yield node.with_changes(slice=part.with_changes(value=value)), f"index {what}"
        elif isinstance(part, cst.Slice):
            for bound in ("lower", "upper"):
                old = getattr(part, bound)
                if old is None:
                    continue
                for value, what in _bumps(old):
                    changed = part.with_changes(**{bound: value})
                    yield node.with_changes(slice=changed), f"slice {bound} {what}"
