"""Mutants of a snippet's reference body: small semantic changes a test should notice.

Each operator is a module of this package (one kind of change) named in :data:`OPERATORS`. The
body is parsed with libcst, which keeps its text byte for byte, so a mutant differs from the
reference only where it was changed and its diff is that change. Only the body between the
markers is mutated, never the code around it. A mutant that does not parse, or that has the
reference's syntax tree (the same code by construction), or the tree of an earlier mutant, is
not kept; :class:`Generation` counts them. A seed and a cap bound the mutants kept per snippet,
drawn in turn from each operator so that no one kind crowds out the others.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import random
import re
from collections.abc import Iterator, Mapping
from typing import cast

import libcst as cst
from libcst.metadata import (
    CodeRange,
    MetadataWrapper,
    PositionProvider,
    WhitespaceInclusivePositionProvider,
)

from rcb_env._common import parse_python
from rcb_env.frozen import Frozen
from rcb_env.registry import Registry
from rcb_env.validation.mutants._base import Operator

__all__ = ["OPERATORS", "Generation", "Mutant", "diff", "generate"]

OPERATORS: Registry[Operator] = Registry(
    "mutation operator",
    {
        name: f"rcb_env.validation.mutants.{name}:{name.capitalize()}"
        for name in (
            "arithmetic",
            "comparison",
            "constant",
            "boolean",
            "index",
            "arguments",
            "statement",
            "returns",
            "keywords",
        )
    },
)
"""Mutation operators by name (built-in: one module each, imported on first use)."""

_WRAP = "if True:\n"


class Mutant(Frozen):
    """One changed body."""

    key: str
    """Hash of the body: names the mutant across runs (records, resumption)."""
    operator: str
    """The operator's name."""
    description: str
    """What changed, e.g. ``+ -> -``."""
    line: int
    """1-based line of the change within the body."""
    body: str
    """The whole mutated body, as it is inserted between the markers."""


class Generation(Frozen):
    """The mutants of one body, and what was left out."""

    mutants: tuple[Mutant, ...]
    """Kept (at most the cap), in body order."""
    candidates: int
    """Distinct mutants found before the cap."""
    unparsable: int
    """Changes whose code does not parse (not counted)."""
    equivalent: int
    """Changes with the reference's syntax tree or an earlier mutant's (not counted)."""
    error: str | None = None
    """Why the reference body itself could not be mutated (it does not parse alone)."""


def _tree(code: str) -> str | None:
    """The syntax tree of ``code`` as text, or None when it does not parse."""
    try:
        return ast.dump(parse_python(code))
    except (SyntaxError, ValueError):
        return None


class _Nodes:
    """Every node of a parsed body in source order, its first line, and where a one-line node's
    text is in the code (whitespace it owns included)."""

    def __init__(self, module: cst.Module) -> None:
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        found = wrapper.resolve_many([PositionProvider, WhitespaceInclusivePositionProvider])
        positions = cast(Mapping[cst.CSTNode, CodeRange], found[PositionProvider])
        spans = cast(Mapping[cst.CSTNode, CodeRange], found[WhitespaceInclusivePositionProvider])
        order: list[cst.CSTNode] = []

        class _All(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                order.append(node)
                return True

        module.visit(_All())
        self.order = order
        self.code = module.code  # generated on each read of the property: once here
        self.lines = {n: positions[n].start.line for n in order if n in positions}
        starts = [0]
        for line in self.code.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        self.spans: dict[cst.CSTNode, tuple[int, int]] = {}
        for n in order:
            span = spans.get(n)
            if span is not None and span.start.line == span.end.line:
                row = starts[span.start.line - 1]
                self.spans[n] = (row + span.start.column, row + span.end.column)


def _replaced(module: cst.Module, nodes: _Nodes, node: cst.CSTNode, new: cst.CSTNode) -> str:
    """The code with ``node`` replaced by ``new``. A change within one line is spliced into the
    text (what the whole tree's code generation would give: a node on one line owes nothing to
    its surroundings, such as the indentation of a block; far faster); any other change goes
    through the tree.

    Raises:
        Exception: the code generator rejects the replacement.
    """
    span = nodes.spans.get(node)
    if span is not None:
        text = module.code_for_node(new)
        if "\n" not in text and "\r" not in text:
            return nodes.code[: span[0]] + text + nodes.code[span[1] :]
    changed = module.deep_replace(node, new)
    assert isinstance(changed, cst.Module)
    return changed.code


def _candidates(
    body: str, operators: list[Operator]
) -> Iterator[tuple[Operator, str, int, str] | None]:
    """Every change of every operator: (operator, description, line, new body), or None for a
    change that does not parse."""
    wrapped = bool(body.strip()) and body.lstrip("\n")[:1] in (" ", "\t")
    code = _WRAP + body if wrapped else body
    module = cst.parse_module(code)
    nodes = _Nodes(module)
    # the wrapper that lets an indented body parse is not the body's
    outside: set[int] = {id(module)}
    if wrapped:
        wrapper = module.body[0]
        assert isinstance(wrapper, cst.If)
        outside |= {id(wrapper), id(wrapper.test), id(wrapper.body)}
    texts: dict[cst.CSTNode, str] = {}
    for op in operators:
        for node in nodes.order:
            if id(node) in outside:
                continue
            if node not in texts:
                span = nodes.spans.get(node)
                texts[node] = nodes.code[span[0] : span[1]] if span else module.code_for_node(node)
            for new, description in op.variants(node, texts[node]):
                try:
                    text = _replaced(module, nodes, node, new)
                except Exception:  # a replacement the code generator rejects
                    yield None
                    continue
                if _tree(text) is None:
                    yield None
                    continue
                line = nodes.lines.get(node, 1) - (1 if wrapped else 0)
                yield op, description, max(1, line), text[len(_WRAP) :] if wrapped else text


def generate(
    body: str,
    *,
    seed: int | str = 0,
    cap: int | None = None,
    operators: tuple[str, ...] | None = None,
) -> Generation:
    """The mutants of ``body`` (at most ``cap``, drawn with ``seed``) by ``operators`` (default:
    all of :data:`OPERATORS`)."""
    ops = [OPERATORS.get(n)() for n in (operators or tuple(OPERATORS.names()))]
    wrapped = bool(body.strip()) and body.lstrip("\n")[:1] in (" ", "\t")
    reference = _tree(_WRAP + body if wrapped else body)
    try:
        found = list(_candidates(body, ops))
    except cst.ParserSyntaxError as exc:
        return Generation(
            mutants=(), candidates=0, unparsable=0, equivalent=0, error=str(exc).splitlines()[0]
        )
    seen = {reference}
    unparsable = equivalent = 0
    by_operator: dict[str, list[tuple[int, Mutant]]] = {}
    for order, item in enumerate(found):
        if item is None:
            unparsable += 1
            continue
        op, description, line, text = item
        tree = _tree(_WRAP + text if wrapped else text)
        if tree in seen:
            equivalent += 1
            continue
        seen.add(tree)
        key = hashlib.sha256(text.encode()).hexdigest()[:16]
        mutant = Mutant(key=key, operator=op.name, description=description, line=line, body=text)
        by_operator.setdefault(op.name, []).append((order, mutant))
    total = sum(len(v) for v in by_operator.values())
    rng = random.Random(f"{seed}")
    pools = [rng.sample(v, len(v)) for _, v in sorted(by_operator.items())]
    picked: list[tuple[int, Mutant]] = []
    limit = total if cap is None else min(cap, total)
    while len(picked) < limit:
        for pool in pools:
            if pool and len(picked) < limit:
                picked.append(pool.pop())
    picked.sort(key=lambda p: (p[1].line, p[0]))
    return Generation(
        mutants=tuple(m for _, m in picked),
        candidates=total,
        unparsable=unparsable,
        equivalent=equivalent,
    )


def diff(reference: str, mutant: str, name: str = "snippet", start: int = 1) -> str:
    """A unified diff of a mutant against the reference body (lines numbered from ``start``)."""
    lines = difflib.unified_diff(
        reference.splitlines(keepends=True),
        mutant.splitlines(keepends=True),
        fromfile=f"{name} (reference)",
        tofile=f"{name} (mutant)",
        n=1,
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text if start == 1 else _renumber(text, start - 1)


def _renumber(text: str, offset: int) -> str:
    """Hunk headers shifted by ``offset`` lines (the body's place in its file)."""

    def bump(m: re.Match[str]) -> str:
        a, b, c, d = m.group(1), m.group(2) or "", m.group(3), m.group(4) or ""
        return f"@@ -{int(a) + offset}{b} +{int(c) + offset}{d} @@"

    return re.sub(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@", bump, text)
