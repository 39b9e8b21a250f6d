"""Numeric constant changes: to 0 and to 1, plus and minus one, doubled, sign flipped."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant, expression


class Constant(Operator):
    name = "constant"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if not isinstance(node, cst.Integer | cst.Float):
            return
        try:
            value = node.evaluated_value
        except (ValueError, SyntaxError):
            return
        seen = {code}
        candidates: list[int | float]
        if isinstance(value, int):
            candidates = [0, 1, value + 1, value - 1, value * 2, -value]
        elif isinstance(value, float):
            candidates = [0.0, 1.0, value + 1, value * 2, -value]
        else:  # complex
            return
        for new in candidates:
            if new == value:
                continue
            text = repr(new)
            if text in seen:
                continue
            seen.add(text)
            yield expression(f"({text})" if new < 0 else text), f"{code} -> {text}"
