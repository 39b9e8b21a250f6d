"""Where a masked function's removed code was, found by parsing (for layouts without markers).

A masked repository keeps a function's signature (and often its docstring, or part of its body)
and replaces the rest with a placeholder (``pass``, a TODO and a ``return``, ``raise
NotImplementedError``, nothing). Comparing the masked function's statements with the reference
(golden) function's gives the region: the statements both share at the start and at the end stay;
what lies between is the masked region in one and the reference body in the other. When the
difference is one compound statement on each side with the same header (a partial mask inside a
loop or a branch), the comparison goes inside it. Pure functions on text.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass

from rcb_env._common import parse_python

_Function = ast.FunctionDef | ast.AsyncFunctionDef


class RegionError(ValueError):
    """The function cannot be found, or masked and reference cannot be aligned."""


@dataclass(frozen=True)
class Region:
    """A masked region: 1-based line numbers in its file. The region is the lines strictly
    between ``before`` and ``after`` (it may be empty: ``after == before + 1``)."""

    before: int
    """Last line kept before the region (the header's or the last shared statement's)."""
    after: int
    """First line kept after the region (``len(lines) + 1`` when nothing follows)."""
    indent: str
    """Indentation of the block the region is in."""

    def text(self, lines: list[str]) -> str:
        return "".join(lines[self.before : self.after - 1])


@dataclass(frozen=True)
class Alignment:
    """The masked file's region and the reference file's, for the same function."""

    masked: Region
    reference: Region


def parse(text: str) -> ast.Module:
    """``ast.parse``, quiet: a benchmark's code may use escapes Python now warns about.

    Raises:
        SyntaxError: it does not parse.
    """
    return parse_python(text)


def split_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def find_function(tree: ast.Module, name: str, class_name: str | None) -> _Function | None:
    """The function ``name`` (a method of ``class_name`` when given, nested classes included):
    at module level first, then anywhere, first by position."""
    scopes: list[ast.AST] = [tree]
    if class_name:
        scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name]
        scopes.sort(key=lambda n: getattr(n, "lineno", 0))
    for scope in scopes:
        for node in getattr(scope, "body", []):
            if isinstance(node, _Function) and node.name == name:
                return node
    for scope in scopes:
        found = sorted(
            (n for n in ast.walk(scope) if isinstance(n, _Function) and n.name == name),
            key=lambda n: n.lineno,
        )
        if found:
            return found[0]
    return None


def _header_end(lines: list[str], node: ast.stmt) -> int:
    """1-based line of the ``:`` that ends a compound statement's header."""
    first_line = node.lineno
    source = "".join(lines[first_line - 1 :])
    depth = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type != tokenize.OP:
                continue
            if tok.string in "([{":
                depth += 1
            elif tok.string in ")]}":
                depth -= 1
            elif tok.string == ":" and depth == 0:
                return first_line + tok.start[0] - 1
    except (tokenize.TokenError, SyntaxError) as exc:
        raise RegionError(f"cannot read the header at line {first_line}: {exc}") from None
    raise RegionError(f"no ':' ends the header at line {first_line}")


def _start_line(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def _same_header(a: ast.stmt, b: ast.stmt) -> bool:
    """Same statement type and everything but ``body`` equal."""
    if type(a) is not type(b) or not hasattr(a, "body"):
        return False
    for field in a._fields:
        if field == "body":
            continue
        if _dump(getattr(a, field)) != _dump(getattr(b, field)):
            return False
    return True


def _dump(value: object) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    if isinstance(value, ast.AST):
        return ast.dump(value)
    return repr(value)


def _indent_of(lines: list[str], node: ast.stmt) -> str:
    line = lines[node.lineno - 1]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _region(lines: list[str], block: ast.stmt, body: list[ast.stmt], k: int, j: int) -> Region:
    if k > 0:
        before = body[k - 1].end_lineno or body[k - 1].lineno
    else:
        before = _header_end(lines, block)
        if body and body[0].lineno == before:
            raise RegionError(f"the body at line {before} is on the header's line")
    end = (block.end_lineno or block.lineno) + 1
    after = _start_line(body[len(body) - j]) if j > 0 else end
    indent = _indent_of(lines, body[0]) if body else ""
    return Region(before=before, after=max(after, before + 1), indent=indent)


def align(masked_text: str, reference_text: str, name: str, class_name: str | None) -> Alignment:
    """The region of ``name`` (in ``class_name``) that differs between the masked file and the
    reference file.

    Raises:
        RegionError: a file does not parse, the function is not in one of them, or both
            functions are the same (nothing is masked).
    """
    where = f"{class_name}.{name}" if class_name else name
    trees = []
    for label, text in (("masked", masked_text), ("reference", reference_text)):
        try:
            trees.append(parse(text))
        except SyntaxError as exc:
            raise RegionError(
                f"the {label} file does not parse (line {exc.lineno}): {exc.msg}"
            ) from None
    m_fn = find_function(trees[0], name, class_name)
    r_fn = find_function(trees[1], name, class_name)
    if m_fn is None or r_fn is None:
        missing = "masked" if m_fn is None else "reference"
        raise RegionError(f"the {missing} file has no function {where}")
    m_lines, r_lines = split_lines(masked_text), split_lines(reference_text)
    m_block: ast.stmt = m_fn
    r_block: ast.stmt = r_fn
    while True:
        m_body, r_body = m_block.body, r_block.body  # type: ignore[attr-defined]
        m_dumps, r_dumps = [ast.dump(s) for s in m_body], [ast.dump(s) for s in r_body]
        k = 0
        while k < min(len(m_dumps), len(r_dumps)) and m_dumps[k] == r_dumps[k]:
            k += 1
        if k == len(m_dumps) == len(r_dumps):
            raise RegionError(f"{where} is the same in the masked and the reference file")
        j = 0
        while j < min(len(m_dumps), len(r_dumps)) - k and m_dumps[-1 - j] == r_dumps[-1 - j]:
            j += 1
        m_diff, r_diff = m_body[k : len(m_body) - j], r_body[k : len(r_body) - j]
        if len(m_diff) == 1 and len(r_diff) == 1 and _same_header(m_diff[0], r_diff[0]):
            m_block, r_block = m_diff[0], r_diff[0]
            continue
        return Alignment(
            masked=_region(m_lines, m_block, m_body, k, j),
            reference=_region(r_lines, r_block, r_body, k, j),
        )


def normal_dump(node: ast.AST) -> str:
    """``ast.dump`` with docstrings' indentation normalised (re-indenting a block changes the
    whitespace inside its docstrings, not its code)."""
    import copy
    import inspect

    node = copy.deepcopy(node)
    for n in ast.walk(node):
        for stmt in getattr(n, "body", []) if isinstance(getattr(n, "body", None), list) else []:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                stmt.value.value = inspect.cleandoc(stmt.value.value)
    return ast.dump(node)


def reindent(body: str, old: str, new: str) -> str:
    """``body`` with the leading ``old`` indentation of each line replaced by ``new``."""
    if old == new:
        return body
    out = []
    for line in split_lines(body):
        if line.startswith(old):
            out.append(new + line[len(old) :])
        else:
            out.append(line)
    return "".join(out)
