"""Comparison operator swaps: the boundary (``<``/``<=``) and the negation (``==``/``!=``,
``is``/``is not``, ``in``/``not in``)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant

_SWAPS: dict[type[cst.BaseCompOp], tuple[type[cst.BaseCompOp], ...]] = {
    cst.LessThan: (cst.LessThanEqual, cst.GreaterThanEqual),
    cst.LessThanEqual: (cst.LessThan, cst.GreaterThan),
    cst.GreaterThan: (cst.GreaterThanEqual, cst.LessThanEqual),
    cst.GreaterThanEqual: (cst.GreaterThan, cst.LessThan),
    cst.Equal: (cst.NotEqual,),
    cst.NotEqual: (cst.Equal,),
    cst.Is: (cst.IsNot,),
    cst.IsNot: (cst.Is,),
    cst.In: (cst.NotIn,),
    cst.NotIn: (cst.In,),
}
_SPACE = cst.SimpleWhitespace(" ")


class Comparison(Operator):
    name = "comparison"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if not isinstance(node, cst.Comparison):
            return
        empty = cst.Module(body=())
        for i, target in enumerate(node.comparisons):
            op = target.operator
            for new in _SWAPS.get(type(op), ()):
                swapped = new(whitespace_before=_SPACE, whitespace_after=_SPACE)  # type: ignore[call-arg]
                targets = list(node.comparisons)
                targets[i] = target.with_changes(operator=swapped)
                yield (
                    node.with_changes(comparisons=targets),
                    f"{empty.code_for_node(op).strip()} -> {empty.code_for_node(swapped).strip()}",
                )
