"""Small pieces every stage shares: the frozen model base and head-and-tail truncation."""

from __future__ import annotations

import ast
import threading
import warnings

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Base of rcb-env's data models: immutable, unknown fields refused, field docstrings kept
    as descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


def omitted(count: int, unit: str = "characters") -> str:
    """The one marker for a cut in the middle of a text."""
    return f"\n[... {count} {unit} omitted ...]\n"


def truncate(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a marker."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}{omitted(len(text) - 2 * half)}{text[-half:]}"


_AST_LOCK = threading.Lock()


def parse_python(text: str) -> ast.Module:
    """``ast.parse``, one thread at a time and quiet. CPython 3.11's conversion of a parse tree
    to Python objects keeps its recursion depth in interpreter-wide state, so two threads
    parsing at once can fail with ``SystemError: AST constructor recursion depth mismatch``
    (gradings and rollouts run in threads); a benchmark's old code may also use escapes Python
    now warns about.

    Raises:
        SyntaxError: ``text`` is not valid Python.
    """
    with _AST_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text)
