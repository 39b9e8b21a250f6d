"""Candidate regions of one annotated file: named rules over its syntax tree, pure and seeded.

Works on the file with the published markers removed (the text a synthesised pset holds), in
its 1-based line numbers. Three rules, each inside function bodies only (module and class
level code runs at import, where a missing line is an import error rather than a wrong result):

- ``function-body``: a function's whole body, its docstring left out (the docstring stays as
  the specification the solver reads);
- ``block``: the body of a compound statement (``if``/``else``, ``for``, ``while``, ``with``,
  ``try`` and its handlers);
- ``lines``: short runs of consecutive statements of one statement list, tiling it (run
  lengths of 2 to 4 statements and the first run's offset drawn from ``Random(f"{seed}:
  {file}:{line of the list}")``: the same seed proposes the same regions), and at the next
  scale up each pair of adjacent runs (4 to 8 statements) as one run;
- ``statement``: one whole statement of a list of several (a compound statement with its
  header and everything it holds; a statement over several lines is one region).

The regions of one file never cross (a run of statements holds whole statements; a block lies
inside one statement), so they nest the way the published snippets do and can all be marked at
once. A region that cannot be cut on whole lines, that the paper's test does not execute, that
overlaps a published snippet's lines (either direction) or repeats a published snippet's code
is dropped, with the rule that dropped it (:data:`DROP_REASONS`).
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rcb_env._common import parse_python
from rcb_env.guest.protocol import split_lines
from rcb_env.task.annotations import is_code_line
from rcb_env.validation.audit import MIN_CHARS, is_generic

RULES = ("function-body", "block", "lines", "statement")
#: Why a proposed region is not a candidate (static: before anything runs).
DROP_REASONS = {
    "partial_lines": "the region shares a line with code outside it",
    "not_executed": "the paper's test does not execute it (coverage of the reference run)",
    "trivial": "only `pass`, `...` or a docstring",
    "too_large": "more code lines than --max-lines",
    "overlaps_published": "overlaps a published snippet's lines",
    "repeats_published": "repeats a line of a published snippet's code",
}
#: Share of a region's statements the test must execute (its first one always).
MIN_EXECUTED = 0.5
MIN_RUN, MAX_RUN = 2, 4


@dataclass(frozen=True)
class Region:
    """A proposed snippet: lines ``start``..``end`` (1-based, inclusive) of ``file``."""

    file: str
    start: int
    end: int
    rule: str
    owner: str
    """Qualified name of the function it lies in."""
    indent: str
    weight: int
    """Code lines (the official line weight)."""

    @property
    def name(self) -> str:
        """The snippet's name (the solver's hint): what it is, where it starts (and, for a
        run of lines, where it ends: runs of two scales can start on one line)."""
        what = {
            "function-body": "body",
            "block": "block",
            "lines": "lines",
            "statement": "statement",
        }[self.rule]
        where = f"{self.start}-{self.end}" if self.rule == "lines" else str(self.start)
        return f"{what} of {self.owner} at {self.file}:{where}"

    def overlaps(self, start: int, end: int) -> bool:
        return self.start <= end and start <= self.end


@dataclass(frozen=True)
class Published:
    """What of the test set lies in one file: its snippets' line ranges (1-based, inclusive, in
    the marker-free text) and every published snippet's :func:`distinctive` lines (the whole
    paper's: code repeated from another file counts too)."""

    ranges: Sequence[tuple[int, int]] = ()
    code: frozenset[str] = frozenset()

    def clash(self, region: Region) -> tuple[str, str] | None:
        """Why ``region`` would touch the test set (a reason of :data:`DROP_REASONS` and its
        detail), or None."""
        for a, b in self.ranges:
            if region.overlaps(a, b):
                return "overlaps_published", f"published lines {a}-{b}"
        return None

    def repeats(self, lines: Iterable[str]) -> str | None:
        """A line of ``lines`` that a published snippet holds, or None."""
        shared = distinctive(lines) & self.code
        return sorted(shared)[0] if shared else None


@dataclass(frozen=True)
class Dropped:
    region: Region
    reason: str
    detail: str = ""


def _norm(line: str) -> str:
    return " ".join(line.split())


def distinctive(lines: Iterable[str]) -> set[str]:
    """The lines that identify code (the leak audit's rule: long enough, not a comment, not
    made of keywords and builtins alone), normalised."""
    out = set()
    for line in lines:
        n = _norm(line)
        if len(n) >= MIN_CHARS and not n.startswith("#") and not is_generic(n):
            out.add(n)
    return out


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _lists(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists a compound statement holds."""
    out: list[list[ast.stmt]] = []
    for field in ("body", "orelse", "finalbody"):
        value = getattr(stmt, field, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            out.append(value)
    for handler in getattr(stmt, "handlers", []) or []:
        out.append(handler.body)
    for case in getattr(stmt, "cases", []) or []:
        out.append(case.body)
    return out


class _Walker:
    def __init__(self, file: str, text: str, seed: int, windows: int = 0) -> None:
        self.file = file
        self.lines = split_lines(text)
        self.raw = [line.rstrip("\r\n").encode() for line in self.lines]
        self.seed = seed
        self.windows = windows
        self.found: list[Region] = []
        self.cut_badly: list[Region] = []

    def region(self, stmts: Sequence[ast.stmt], rule: str, owner: str) -> None:
        first, last = stmts[0], stmts[-1]
        start, end = first.lineno, last.end_lineno or last.lineno
        head = self.raw[start - 1]
        indent = head[: len(head) - len(head.lstrip())].decode()
        weight = sum(1 for line in self.lines[start - 1 : end] if is_code_line(line))
        r = Region(self.file, start, end, rule, owner, indent, weight)
        before = head[: first.col_offset]
        after = self.raw[end - 1][last.end_col_offset or 0 :].strip()
        if before.strip() or (after and not after.startswith(b"#")):
            self.cut_badly.append(r)
        else:
            self.found.append(r)

    def statements(self, stmts: list[ast.stmt], owner: str, rule: str) -> None:
        """A statement list inside a function: the list itself under ``rule``, its runs, and
        what its statements hold."""
        if rule == "function-body" and stmts and _is_docstring(stmts[0]):
            stmts = stmts[1:]
        if not stmts:
            return
        if self.windows:
            for i in range(len(stmts)):
                for n in range(1, min(self.windows, len(stmts) - i) + 1):
                    self.region(stmts[i : i + n], "lines", owner)
            for stmt in stmts:
                self.nested(stmt, owner)
            return
        self.region(stmts, rule, owner)
        rng = random.Random(f"{self.seed}:{self.file}:{stmts[0].lineno}")
        i = rng.randrange(MIN_RUN)
        runs: list[tuple[int, int]] = []
        while i + MIN_RUN <= len(stmts):
            n = min(rng.randint(MIN_RUN, MAX_RUN), len(stmts) - i)
            if n >= MIN_RUN and n < len(stmts):
                self.region(stmts[i : i + n], "lines", owner)
                runs.append((i, i + n))
            i += n
        for (a, b), (c, d) in zip(runs[::2], runs[1::2], strict=False):
            if b == c and d - a < len(stmts):
                self.region(stmts[a:d], "lines", owner)  # two adjacent runs: the next scale up
        for stmt in stmts:
            if len(stmts) > 1:
                self.region([stmt], "statement", owner)
            self.nested(stmt, owner)

    def nested(self, stmt: ast.stmt, owner: str) -> None:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            self.statements(
                stmt.body, f"{owner}.{stmt.name}" if owner else stmt.name, "function-body"
            )
        elif isinstance(stmt, ast.ClassDef):
            for inner in stmt.body:
                self.nested(inner, f"{owner}.{stmt.name}" if owner else stmt.name)
        elif owner and _lists(stmt):
            for body in _lists(stmt):
                self.statements(body, owner, "block")

    def module(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.nested(stmt, "")


def _statement_lines(tree: ast.Module, start: int, end: int) -> list[int]:
    return sorted(
        {
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.stmt) and start <= n.lineno <= end and not _is_docstring(n)
        }
    )


@dataclass(frozen=True)
class Rules:
    """How regions are proposed: the seed of the runs of lines, the largest region."""

    seed: int = 0
    max_lines: int = 80
    windows: int = 0
    """Not 0: instead of the rules, every run of 1 to ``windows`` consecutive statements of
    every statement list inside a function, at every offset (regions that cross, which one
    pset cannot hold: the ceiling of what the papers' tests allow, for the census; the rules
    propose a nested part of these)."""


def propose(
    file: str, text: str, executed: set[int], published: Published, rules: Rules
) -> tuple[list[Region], list[Dropped]]:
    """The candidate regions of ``file`` (its marker-free ``text``), and each region dropped
    with its reason. ``executed``: the lines the paper's test ran.

    Raises:
        SyntaxError: ``text`` does not parse.
    """
    tree = parse_python(text)
    walker = _Walker(file, text, rules.seed, rules.windows)
    walker.module(tree)
    seen: set[tuple[int, int]] = set()
    kept: list[Region] = []
    dropped = [Dropped(r, "partial_lines") for r in walker.cut_badly]
    for r in walker.found:
        if (r.start, r.end) in seen:
            continue  # the same lines under an earlier rule (a body that is one run, say)
        seen.add((r.start, r.end))
        lines = walker.lines[r.start - 1 : r.end]
        stmts = _statement_lines(tree, r.start, r.end)
        ran = [n for n in stmts if n in executed]
        clash = published.clash(r)
        if clash is not None:
            dropped.append(Dropped(r, *clash))
        elif not stmts or all(
            _is_docstring(n)
            or isinstance(n, ast.Pass)
            or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
            for n in ast.walk(tree)
            if isinstance(n, ast.stmt) and r.start <= n.lineno <= r.end
        ):
            dropped.append(Dropped(r, "trivial"))
        elif r.weight > rules.max_lines:
            dropped.append(Dropped(r, "too_large", f"{r.weight} > {rules.max_lines}"))
        elif stmts[0] not in executed or len(ran) < MIN_EXECUTED * len(stmts):
            dropped.append(Dropped(r, "not_executed", f"{len(ran)} of {len(stmts)} statements ran"))
        elif (line := published.repeats(lines)) is not None:
            dropped.append(Dropped(r, "repeats_published", line))
        else:
            kept.append(r)
    kept.sort(key=lambda r: (r.start, -r.end))
    return kept, dropped


def mark(text: str, regions: Sequence[Region]) -> str:
    """``text`` with a marker pair around every region (outer markers outside inner ones).

    Raises:
        ValueError: two regions cross (they must nest or be apart).
    """
    ordered = sorted(regions, key=lambda r: (r.start, -r.end))
    stack: list[Region] = []
    for r in ordered:
        while stack and stack[-1].end < r.start:
            stack.pop()
        if stack and r.end > stack[-1].end:
            raise ValueError(f"regions cross: {stack[-1].name} and {r.name}")
        stack.append(r)
    lines = split_lines(text)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    opens: dict[int, list[Region]] = {}
    closes: dict[int, list[Region]] = {}
    for r in ordered:
        opens.setdefault(r.start, []).append(r)
        closes.setdefault(r.end, []).append(r)
    out: list[str] = []
    for i, line in enumerate(lines, start=1):
        for r in opens.get(i, []):
            out.append(f'{r.indent}# <paper2code name="{r.name}">{newline}')
        out.append(line if line.endswith("\n") else line + newline)
        for r in sorted(closes.get(i, []), key=lambda r: -r.start):
            out.append(f'{r.indent}# </paper2code name="{r.name}">{newline}')
    return "".join(out)
