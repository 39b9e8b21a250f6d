"""Does a test reach the candidate's code? A static check for task validation (a task source's
:meth:`~rcb_env.task.source.TaskSource.reach`; ``rcb-env validate`` reports it).

From the test script, follow its imports (and the imports of the repository modules they load,
transitively, resolved the way Python would on the test's ``sys.path``) to the candidate's file;
then, inside that module, follow the names the importers use through the module's top-level
functions and classes to the masked function. The answers:

- ``not_imported``: the candidate's module is never loaded by the test (the test exercises some
  other code: a copy of the answer, say);
- ``not_called``: the module is loaded, but nothing the test uses refers to the masked function
  (the test checks a neighbour; the task is weak);
- ``reached``: a path exists (static: a call may still be skipped at run time);
- ``unknown``: the test imports dynamically, or a file does not parse.

Standard-library only; conservative where Python is dynamic (``import module`` then
``module.attr``, ``from m import *``: every name counts as used).
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from pathlib import Path
from typing import Literal

from rcb_env._common import parse_python
from rcb_env.frozen import Frozen

__all__ = ["Reach", "ReachKind", "reach"]

ReachKind = Literal["reached", "not_imported", "not_called", "unknown"]
_ALL = "*"


class Reach(Frozen):
    """Whether the test reaches the masked function, and how we know."""

    kind: ReachKind
    detail: str


def _parse(path: Path) -> ast.Module | None:
    try:
        return parse_python(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


class _Resolver:
    """Module names to files on a fixed ``sys.path`` (folders), the way Python's path finder
    does: a regular module or package anywhere on the path before a namespace package."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots

    def find(self, dotted: str) -> tuple[Path | None, list[Path]]:
        """(the module's file or None, the folders it spans when it is a package)."""
        parts = dotted.split(".")
        search = self.roots
        found: Path | None = None
        for i, part in enumerate(parts):
            regular: Path | None = None
            spaces: list[Path] = []
            for folder in search:
                pkg = folder / part
                if (pkg / "__init__.py").is_file():
                    regular = pkg / "__init__.py"
                    break
                if (folder / f"{part}.py").is_file():
                    regular = folder / f"{part}.py"
                    break
                if pkg.is_dir():
                    spaces.append(pkg)
            if regular is not None:
                found = regular
                search = [regular.parent] if regular.name == "__init__.py" else []
            elif spaces:
                found = None
                search = spaces
            else:
                return None, []
            if i < len(parts) - 1 and not search:
                return None, []
        return found, search


def _absolute(module: str | None, level: int, package: str | None) -> str | None:
    if level == 0:
        return module
    if package is None:
        return None
    base = package.split(".") if package else []
    if level - 1 > len(base):
        return None
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


def _top_level_refs(tree: ast.Module) -> dict[str, set[str]]:
    """Each top-level function or class: the names its code refers to."""
    refs: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names: set[str] = set()
            for n in ast.walk(node):
                if isinstance(n, ast.Name):
                    names.add(n.id)
                elif isinstance(n, ast.Attribute):
                    names.add(n.attr)
            refs[node.name] = names
    return refs


def reach(root: Path, test_file: str, goal_file: str, symbol: str, path: list[str]) -> Reach:
    """Does ``test_file`` reach ``symbol`` (``func`` or ``Class.method``) of ``goal_file``?
    ``path``: the ``PYTHONPATH`` entries of the test run, relative to ``root``."""
    root = root.resolve()
    test = (root / test_file).resolve()
    goal = (root / goal_file).resolve()
    if test == goal:
        return Reach(kind="reached", detail="the masked function is in the test script itself")
    roots = [test.parent, *((root / p).resolve() for p in path)]
    resolver = _Resolver(roots)
    used: set[str] = set()
    importers: list[str] = []
    unresolved: list[str] = []
    seen: set[Path] = {test}
    #: the dotted name each file was imported as (its package, for relative imports)
    names: dict[Path, str] = {test: "__main__"}
    queue: deque[Path] = deque([test])
    dynamic = False
    while queue:
        current = queue.popleft()
        tree = _parse(current)
        if tree is None:
            if current == test:
                return Reach(kind="unknown", detail=f"{test_file} does not parse")
            continue
        dotted_name = names.get(current, "")
        if current == test:
            package: str | None = ""
        elif current.name == "__init__.py":
            package = dotted_name
        else:
            package = dotted_name.rpartition(".")[0]

        def load(dotted: str) -> tuple[Path | None, list[Path]]:
            file, spans = resolver.find(dotted)
            if file is not None and file not in seen and root in file.parents:
                seen.add(file)
                names[file] = dotted
                queue.append(file)
            return file, spans

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    for k in range(1, len(parts) + 1):
                        file, _ = load(".".join(parts[:k]))
                        if file == goal:
                            used.add(_ALL)
                            importers.append(current.name)
                        if file is None and current == test and k == len(parts):
                            unresolved.append(alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                module = _absolute(node.module, node.level, package)
                if module is None:
                    continue
                file, spans = load(module) if module else (None, [])
                for alias in node.names:
                    sub, _ = load(f"{module}.{alias.name}") if module else (None, [])
                    if sub == goal:
                        used.add(_ALL)
                        importers.append(current.name)
                    elif file == goal:
                        used.add(alias.name)
                        importers.append(current.name)
                if file is None and not spans and current == test:
                    unresolved.append(module.split(".")[0])
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in {"__import__", "import_module", "spec_from_file_location"}:
                    dynamic = dynamic or current == test
    rel_goal = goal_file
    if goal not in seen:
        if dynamic:
            return Reach(kind="unknown", detail="the test imports modules dynamically")
        others = sorted(set(unresolved) - set(sys.stdlib_module_names))
        imports = f" (it imports {', '.join(others)} from outside the repository)" if others else ""
        return Reach(
            kind="not_imported",
            detail=f"the test never imports {rel_goal}, the candidate's file{imports}",
        )
    owner = symbol.split(".", 1)[0]
    if _ALL in used or owner in used:
        return Reach(kind="reached", detail=f"the test uses {owner} of {rel_goal}")
    tree = _parse(goal)
    if tree is None:
        return Reach(kind="unknown", detail=f"{rel_goal} does not parse")
    refs = _top_level_refs(tree)
    todo = deque(n for n in used if n in refs)
    reached = set(todo)
    while todo:
        for ref in refs.get(todo.popleft(), ()):
            if ref in refs and ref not in reached:
                reached.add(ref)
                todo.append(ref)
    if owner in reached:
        return Reach(kind="reached", detail=f"{owner} is reached through {', '.join(sorted(used))}")
    return Reach(
        kind="not_called",
        detail=f"the test uses {', '.join(sorted(used)) or 'nothing'} of {rel_goal}, which never "
        f"refers to {symbol}",
    )
