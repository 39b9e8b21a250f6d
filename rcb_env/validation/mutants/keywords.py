"""Dropped keyword arguments: a call without one of its ``name=value`` arguments (the callee's
default then applies)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from rcb_env.validation.mutants._base import Operator, Variant, shown


class Keywords(Operator):
    name = "keywords"

    def variants(self, node: cst.CSTNode, code: str) -> Iterator[Variant]:
        if not isinstance(node, cst.Call):
            return
        empty = cst.Module(body=())
        args = list(node.args)
        for i, arg in enumerate(args):
            if arg.keyword is None:
                continue
            kept = args[:i] + args[i + 1 :]
            if kept and i == len(args) - 1:
                # the new last argument takes the dropped one's comma (none, or a trailing one)
                kept[-1] = kept[-1].with_changes(comma=arg.comma)
            yield (
                node.with_changes(args=kept),
                f"keyword dropped: {shown(empty.code_for_node(arg).rstrip(', '), 50)}",
            )
