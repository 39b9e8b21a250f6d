"""Boolean flips: ``True``/``False``, ``and``/``or``, a dropped ``not``, a negated condition."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant, expression, shown

_SPACE = cst.SimpleWhitespace(" ")


class Boolean(Operator):
    name = "boolean"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if isinstance(node, cst.Name) and node.value in ("True", "False"):
            flipped = "False" if node.value == "True" else "True"
            yield node.with_changes(value=flipped), f"{node.value} -> {flipped}"
        elif isinstance(node, cst.BooleanOperation):
            new: cst.BaseBooleanOp = (
                cst.Or(whitespace_before=_SPACE, whitespace_after=_SPACE)
                if isinstance(node.operator, cst.And)
                else cst.And(whitespace_before=_SPACE, whitespace_after=_SPACE)
            )
            old = "and" if isinstance(node.operator, cst.And) else "or"
            yield node.with_changes(operator=new), f"{old} -> {'or' if old == 'and' else 'and'}"
        elif isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            yield node.expression, "not dropped"
        elif isinstance(node, cst.If | cst.While):
            test = cst.Module(body=()).code_for_node(node.test)
            yield (
                node.with_changes(test=expression(f"not ({test})")),
                f"condition negated: {shown(test)}",
            )
