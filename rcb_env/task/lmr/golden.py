"""The golden files: their copies in the repository, the reference weights, the round-trip
check."""

from __future__ import annotations

import ast
from pathlib import Path

from rcb_env.errors import TaskLoadError
from rcb_env.task import loader
from rcb_env.task import pyregion as pr
from rcb_env.task.annotations import is_code_line
from rcb_env.task.lmr.layout import GOLDEN_DIR, _splice, _Where
from rcb_env.task.models import (
    Snippet,
)


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).strip()


def _golden_copies(folder: Path, repo: Path) -> tuple[str, ...]:
    """Files of the repository that are a golden file (same text up to line endings and
    trailing spaces): the answer, left in the repository by the benchmark. Hidden like the
    golden files themselves."""
    golden = {
        _normal(p.read_text(encoding="utf-8", errors="replace"))
        for p in sorted((folder / GOLDEN_DIR).glob("*.py"))
    }
    out = []
    for rel in loader.walk_files(repo):
        if rel.endswith(".py"):
            text = (repo / rel).read_text(encoding="utf-8", errors="replace")
            if _normal(text) in golden:
                out.append(rel)
    return tuple(out)


def _function_copies(repo: Path, snippets: list[Snippet], *, skip: set[str]) -> tuple[str, ...]:
    """Other files of the repository that define a masked function with the golden body (the
    original code the benchmark left beside the masked copy): hidden from the agent, and guarded
    from the candidate while graded (the tests may still import them)."""
    wanted: dict[str, set[str]] = {}
    for s in snippets:
        if not s.symbol or not s.masked_text:
            continue
        name = s.symbol.rsplit(".", 1)[-1]
        filled = _splice(s, s.reference_body)
        try:
            fn = pr.find_function(pr.parse(filled), name, s.symbol.rpartition(".")[0] or None)
        except SyntaxError:
            continue
        if fn is not None:
            wanted.setdefault(name, set()).add(_body_dump(fn))
    found = []
    for rel in loader.walk_files(repo):
        if not rel.endswith(".py") or rel in skip:
            continue
        try:
            text = (repo / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        names = [n for n in wanted if f"def {n}" in text]
        if not names:
            continue
        try:
            tree = pr.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name in names
                and _body_dump(node) in wanted[node.name]
            ):
                found.append(rel)
                break
    return tuple(found)


def _body_dump(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    body = fn.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]  # docstrings differ between copies; the code is what matters
    return pr.normal_dump(ast.Module(body=body, type_ignores=[]))


def _golden_weight(golden_text: str, function: str, class_name: str | None) -> int:
    try:
        tree = pr.parse(golden_text)
    except SyntaxError:
        return 0
    node: ast.stmt | None = pr.find_function(tree, function, class_name)
    if node is None:  # some implementations name a class as their function
        node = next(
            (
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.ClassDef) and n.name in {function, class_name}
            ),
            None,
        )
    if node is None:
        return 0
    body: list[ast.stmt] = node.body  # type: ignore[attr-defined]
    docstring = (
        isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )
    if docstring and len(body) > 1:  # masked files keep docstrings: not the answer
        body = body[1:]
    first = body[0].lineno
    lines = pr.split_lines(golden_text)[first - 1 : node.end_lineno]
    return sum(is_code_line(line) for line in lines)


def _check_roundtrip(
    masked_text: str,
    a: pr.Alignment,
    reference: str,
    golden_text: str,
    function: str,
    class_name: str | None,
    where: _Where,
) -> None:
    """The reference inserted into the masked file must give the golden function's body."""
    lines = pr.split_lines(masked_text)
    body = reference if not reference or reference.endswith("\n") else reference + "\n"
    filled = "".join(lines[: a.masked.before]) + body + "".join(lines[a.masked.after - 1 :])
    try:
        got = pr.find_function(pr.parse(filled), function, class_name)
    except SyntaxError as exc:
        raise TaskLoadError(
            f"the reference body does not parse in the masked file (line {exc.lineno})", **where
        ) from None
    want = pr.find_function(pr.parse(golden_text), function, class_name)

    def code(fn: ast.FunctionDef | ast.AsyncFunctionDef | None) -> str:
        # The body only: a few masked files changed the signature too, which stays theirs.
        return "" if fn is None else pr.normal_dump(ast.Module(body=fn.body, type_ignores=[]))

    if got is None or want is None or code(got) != code(want):
        raise TaskLoadError(
            "the reference body inserted into the masked file does not give the golden "
            "function's body back",
            **where,
        )
