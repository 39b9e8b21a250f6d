"""Arithmetic operator swaps (``+``/``-``, ``*``/``/``, ``//``, ``**``, ``@``), in expressions and
augmented assignments, and a dropped unary minus."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant

_BINARY: dict[type[cst.BaseBinaryOp], tuple[type[cst.BaseBinaryOp], ...]] = {
    cst.Add: (cst.Subtract,),
    cst.Subtract: (cst.Add,),
    cst.Multiply: (cst.Divide,),
    cst.Divide: (cst.Multiply,),
    cst.FloorDivide: (cst.Divide,),
    cst.Modulo: (cst.FloorDivide,),
    cst.Power: (cst.Multiply,),
    cst.MatrixMultiply: (cst.Multiply,),
}
_AUGMENTED: dict[type[cst.BaseAugOp], tuple[type[cst.BaseAugOp], ...]] = {
    cst.AddAssign: (cst.SubtractAssign,),
    cst.SubtractAssign: (cst.AddAssign,),
    cst.MultiplyAssign: (cst.DivideAssign,),
    cst.DivideAssign: (cst.MultiplyAssign,),
}


class Arithmetic(Operator):
    name = "arithmetic"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if isinstance(node, cst.BinaryOperation):
            op = node.operator
            for new in _BINARY.get(type(op), ()):
                swapped = new(  # type: ignore[call-arg]
                    whitespace_before=getattr(op, "whitespace_before"),  # noqa: B009
                    whitespace_after=getattr(op, "whitespace_after"),  # noqa: B009
                )
                yield node.with_changes(operator=swapped), f"{_sym(op)} -> {_sym(swapped)}"
        elif isinstance(node, cst.AugAssign):
            aug = node.operator
            for new_aug in _AUGMENTED.get(type(aug), ()):
                swapped_aug = new_aug(  # type: ignore[call-arg]
                    whitespace_before=getattr(aug, "whitespace_before"),  # noqa: B009
                    whitespace_after=getattr(aug, "whitespace_after"),  # noqa: B009
                )
                yield (
                    node.with_changes(operator=swapped_aug),
                    f"{_sym(aug)} -> {_sym(swapped_aug)}",
                )
        elif isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            yield node.expression, "unary - dropped"


def _sym(op: cst.CSTNode) -> str:
    return cst.Module(body=()).code_for_node(op).strip()
