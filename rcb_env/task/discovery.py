"""Which tests a unittest file defines, found statically (the tested code cannot change it): what
a task source reports as the tests a grading run must pass (:meth:`TaskSource.expected_tests`)."""

from __future__ import annotations

import ast

from rcb_env._common import parse_python

__all__ = ["expected_tests"]

_SKIP_DECORATORS = {"skip", "skipIf", "skipUnless", "expectedFailure"}


def expected_tests(test_source: str) -> tuple[str, ...]:
    """``Class.method`` of every test the file itself defines, found statically (so the tested
    code cannot change the count). Methods with a skip or expected-failure decorator are left
    out."""
    try:
        tree = parse_python(test_source)
    except SyntaxError:
        return ()
    classes: dict[str, ast.ClassDef] = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def base_names(c: ast.ClassDef) -> list[str]:
        out = []
        for b in c.bases:
            if isinstance(b, ast.Name):
                out.append(b.id)
            elif isinstance(b, ast.Attribute):
                out.append(b.attr)
        return out

    def is_test_class(c: ast.ClassDef, seen: frozenset[str] = frozenset()) -> bool:
        for b in base_names(c):
            if b.endswith("TestCase"):
                return True
            if b in classes and b not in seen and is_test_class(classes[b], seen | {c.name}):
                return True
        return False

    def class_skipped(c: ast.ClassDef) -> bool:
        return any(_decorator_name(d) in _SKIP_DECORATORS for d in c.decorator_list)

    def methods(c: ast.ClassDef, seen: frozenset[str] = frozenset()) -> dict[str, bool]:
        found: dict[str, bool] = {}
        for b in reversed(base_names(c)):
            if b in classes and b not in seen:
                found.update(methods(classes[b], seen | {c.name}))
        for node in c.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                "test"
            ):
                found[node.name] = any(
                    _decorator_name(d) in _SKIP_DECORATORS for d in node.decorator_list
                )
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        found.pop(t.id, None)
        return found

    out: list[str] = []
    for name, c in classes.items():
        if is_test_class(c) and not class_skipped(c):
            out.extend(f"{name}.{m}" for m, skipped in methods(c).items() if not skipped)
    return tuple(out)


def _decorator_name(d: ast.expr) -> str:
    if isinstance(d, ast.Call):
        d = d.func
    if isinstance(d, ast.Attribute):
        return d.attr
    if isinstance(d, ast.Name):
        return d.id
    return ""
