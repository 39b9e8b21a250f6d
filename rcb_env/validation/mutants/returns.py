"""Returns replaced: by one of the returned expression's inputs, or by a zero-like value of the
same shape (``0 * (...)``), or by ``None``."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant, expression, shown

_SIMPLE = (cst.Name, cst.Attribute, cst.Subscript)


def _inputs(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of ``value`` that are plain names, attributes or subscripts."""
    if isinstance(value, cst.Call):
        parts = [a.value for a in value.args if not a.keyword and not a.star]
    elif isinstance(value, cst.BinaryOperation):
        parts = [value.left, value.right]
    elif isinstance(value, cst.Subscript):
        parts = [value.value]
    elif isinstance(value, cst.UnaryOperation):
        parts = [value.expression]
    else:
        parts = []
    return [p for p in parts if isinstance(p, _SIMPLE)]


class Returns(Operator):
    name = "returns"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if not isinstance(node, cst.Return) or node.value is None:
            return
        empty = cst.Module(body=())
        value = node.value
        text = empty.code_for_node(value)
        if isinstance(value, cst.Name) and value.value == "None":
            return
        for part in _inputs(value):
            name = empty.code_for_node(part)
            yield node.with_changes(value=part.deep_clone()), f"return {shown(name)} instead"
        if isinstance(value, cst.Tuple):
            yield node.with_changes(value=expression("None")), "return None instead"
        else:
            yield (
                node.with_changes(value=expression(f"0 * ({text})")),
                f"return zero-like 0 * ({shown(text, 40)})",
            )
