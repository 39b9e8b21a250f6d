"""Small pieces every stage shares: head-and-tail truncation, thread-safe parsing (the frozen model
base is the public :mod:`rcb_env.frozen`)."""

from __future__ import annotations

import ast
import threading
import warnings

__all__ = ["omitted", "parse_python", "truncate"]


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


def parsing() -> threading.Lock:
    """The lock :func:`parse_python` holds: for code that parses with ``ast`` itself (the
    candidate policy, a standard-library file shipped into sandboxes too)."""
    return _AST_LOCK


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
