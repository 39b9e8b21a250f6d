"""Argument order swaps: two neighbouring positional arguments of a call exchanged."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant, shown


class Arguments(Operator):
    name = "arguments"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if not isinstance(node, cst.Call):
            return
        empty = cst.Module(body=())
        args = list(node.args)
        for i in range(len(args) - 1):
            a, b = args[i], args[i + 1]
            if a.keyword or b.keyword or a.star or b.star:
                continue
            swapped = list(args)
            swapped[i] = a.with_changes(value=b.value)
            swapped[i + 1] = b.with_changes(value=a.value)
            yield (
                node.with_changes(args=swapped),
                f"arguments swapped: {shown(empty.code_for_node(a.value), 30)} <-> "
                f"{shown(empty.code_for_node(b.value), 30)}",
            )
