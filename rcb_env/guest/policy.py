"""The candidate policy: what a snippet body may not say. Checked on the host before a body is
graded (and by the Harbor verifier inside its container, which ships this file beside itself),
so it imports only the standard library and keeps to syntax older Pythons accept.

The tested code runs in the test process, beside the tests, the reference and rcb-env's runner.
Python gives code in a process a way to everything else in it (a function's ``__globals__``, a
class's ``__subclasses__()``, a frame's ``f_back``, ``gc``, ``ctypes``); the runner's run-time
guards (docs/threat-model.md) see only some of those ways. A research snippet needs none of
them. So a body is refused, before it runs, when it reaches for the machinery instead of
computing: the interpreter's reflection (dunder attributes and names, ``getattr`` and friends
with a computed or private name, ``eval``/``exec``/``compile``, ``globals()``/``vars()``,
three-argument ``type``), modules that exist to reach into a process or a test framework
(``sys``, ``gc``, ``ctypes``, ``inspect``, ``unittest``, ``pickle``, ...), classes that change
how values compare (comparison, conversion and array/tensor dispatch methods: a value that
lies), and rebinding an attribute of anything it imported (a shared library function that the
tests' reference computation also uses).

Each finding names the line (of the body) and the construct. The rules were measured against
every published reference body (ResearchCodeBench's 212, LMR-Bench's 28), the bundled tasks and
the mutants ``validate --mutants`` grades: none is flagged (``tests/test_policy.py``).
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from typing import NamedTuple

#: Modules a body may not import (the first dotted component, or the whole name): the
#: process's and the test framework's own machinery, serialisers that call arbitrary
#: callables, foreign-function interfaces, and ways to run code later or elsewhere.
DENIED_MODULES = frozenset(
    {
        "__main__",
        "_ctypes",
        "_thread",
        "atexit",
        "bdb",
        "builtins",
        "__builtin__",
        "cffi",
        "cloudpickle",
        "code",
        "codeop",
        "copyreg",
        "ctypes",
        "dill",
        "faulthandler",
        "gc",
        "imp",
        "importlib",
        "inspect",
        "marshal",
        "mmap",
        "mock",
        "dirty_equals",
        "hamcrest",
        "numpy.ma",
        "torch.masked",
        "multiprocessing",
        "nose",
        "pdb",
        "pickle",
        "posix",
        "pty",
        "pytest",
        "resource",
        "runpy",
        "shelve",
        "signal",
        "site",
        "subprocess",
        "sys",
        "threading",
        "trace",
        "traceback",
        "types",
        "unittest",
        "weakref",
        "zipimport",
    }
)

#: Reflection by name (attribute getters, format fields, static lookups) and the test
#: framework's skip: refused as a name and as an attribute.
_HELPERS = frozenset(
    {"attrgetter", "methodcaller", "Formatter", "getattr_static", "SkipTest", "skipTest"}
)

#: Names a body may not use at all.
DENIED_NAMES = (
    frozenset(
        {
            "eval",
            "exec",
            "compile",
            "globals",
            "locals",
            "vars",
            "breakpoint",
            "__import__",
            "__build_class__",
        }
    )
    | _HELPERS
)

#: Attribute names a body may not use (``x.eval()`` and ``re.compile`` are ordinary methods;
#: these are reflection, the test framework's control flow, or a library's values that compare
#: equal to anything: a fully masked array passes ``numpy.testing.assert_allclose``).
DENIED_ATTRIBUTES = _HELPERS | frozenset(
    {
        "MaskedArray",
        "MaskedTensor",
        "masked_tensor",
        "as_masked_tensor",
        "ANY",
        "approx",
    }
)
#: Submodules of what a body imported that it may not reach by attribute (``np.ma``).
DENIED_SUBMODULES = frozenset({"ma", "masked"})

#: The ways to the process's raw memory through a library: numpy makes an array of whatever
#: address an object's ``__array_interface__`` names; with the addresses ``id()`` gives, that
#: reads and writes any object in the process, the verdict's included. Refused as names,
#: attributes, keywords and string constants, with the helpers that hand out raw addresses or
#: foreign memory. (numpy's ``as_strided``, a view with any strides, is used by research code
#: for sliding windows: the runner refuses only a view outside its array's memory.)
MEMORY_INTERFACES = frozenset(
    {"__array_interface__", "__array_struct__", "__cuda_array_interface__", "__dlpack__"}
)
MEMORY_HELPERS = frozenset({"byte_bounds", "ctypeslib", "ctypes", "DummyArray"})

#: Reflection builtins: allowed only as a direct call with a constant, public attribute name.
ATTRIBUTE_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr"})

#: Dunder attributes that are plain data or ordinary protocol calls (``super().__init__``).
ALLOWED_DUNDERS = frozenset(
    {
        "__init__",
        "__name__",
        "__qualname__",
        "__doc__",
        "__class__",
        "__call__",
        "__len__",
        "__iter__",
        "__next__",
        "__getitem__",
        "__setitem__",
        "__contains__",
        "__repr__",
        "__str__",
        "__enter__",
        "__exit__",
        "__post_init__",
        "__version__",
        "__file__",
        "__all__",
    }
)

#: Methods whose definition changes how a value compares, converts or dispatches (the ways a
#: value can claim to equal what it does not): a body may not define them, nor assign them.
#: Everything dunder outside :data:`ALLOWED_DUNDERS` is refused anyway; this set only makes
#: the message precise.
LYING_METHODS = frozenset(
    {
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__bool__",
        "__float__",
        "__int__",
        "__index__",
        "__complex__",
        "__abs__",
        "__round__",
        "__sub__",
        "__rsub__",
        "__torch_function__",
        "__torch_dispatch__",
        "__array_ufunc__",
        "__array_function__",
        "__array__",
        "__array_wrap__",
        "__array_priority__",
        "__instancecheck__",
        "__subclasscheck__",
        "__getattribute__",
    }
)

_FORMAT_FIELD = re.compile(r"\{[^{}:!]*[.\[]")


class Finding(NamedTuple):
    line: int
    """1-based line within the body."""
    what: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what}"


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def parse_body(body: str) -> ast.Module | None:
    """The body as statements (its common indentation removed), or None if it does not parse
    on its own."""
    text = textwrap.dedent(body.expandtabs(8) if "\t" in body else body)
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=32)  # a file is checked with every body graded into it
def imported_names(source: str) -> frozenset[str]:
    """The names a file binds by ``import`` (anywhere in it): a module, or whatever was taken
    from one. Their attributes are shared with every other importer, the tests' reference
    among them."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name != "*":
                    names.add(alias.asname or alias.name)
    return frozenset(names)


class _Checker(ast.NodeVisitor):
    def __init__(self, shared: frozenset[str]) -> None:
        self.shared = set(shared)
        self.findings: list[Finding] = []
        self.called: set[int] = set()
        #: names bound by ``from numpy... import as_strided`` and the like
        self.memory_names: set[str] = set()

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value in MEMORY_INTERFACES:
            self.flag(node, f"names {node.value} (a way to the process's raw memory)")

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg in MEMORY_INTERFACES:
            self.flag(node, f"passes {node.arg} (a way to the process's raw memory)")
        self.generic_visit(node)

    def flag(self, node: ast.AST, what: str) -> None:
        self.findings.append(Finding(getattr(node, "lineno", 0), what))

    # Imports ----------------------------------------------------------------------------
    def _module(self, node: ast.AST, name: str) -> None:
        parts = name.split(".")
        if parts[0] in DENIED_MODULES or name in DENIED_MODULES:
            self.flag(node, f"imports {name} (the process's or the test framework's machinery)")
        elif any(p.startswith("_") for p in parts):
            self.flag(node, f"imports the private module {name}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(node, alias.name)
            self.shared.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._module(node, node.module)
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, "imports * (names it cannot see)")
                continue
            if alias.name in MEMORY_HELPERS:
                self.flag(node, f"imports {alias.name} (a way to the process's raw memory)")
                self.memory_names.add(alias.asname or alias.name)
            if (
                _dunder(alias.name)
                or alias.name in DENIED_NAMES
                or alias.name.startswith("_")
                or alias.name in DENIED_ATTRIBUTES
                or (alias.name in DENIED_SUBMODULES and node.module in ("numpy", "torch"))
            ):
                self.flag(node, f"imports the name {alias.name}")
            self.shared.add(alias.asname or alias.name)

    # Names and attributes ---------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if name in DENIED_NAMES:
            self.flag(node, f"uses {name}")
        elif name in MEMORY_INTERFACES or name in self.memory_names:
            self.flag(node, f"uses {name} (a way to the process's raw memory)")
        elif name in ATTRIBUTE_BUILTINS and id(node) not in self.called:
            self.flag(node, f"uses {name} other than in a direct call")
        elif name == "type" and id(node) not in self.called:
            self.flag(node, "uses type other than as type(x)")
        elif _dunder(name) and name not in ALLOWED_DUNDERS:
            self.flag(node, f"uses the name {name}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr in DENIED_ATTRIBUTES:
            self.flag(node, f"uses .{attr}")
        elif attr in MEMORY_HELPERS or attr in MEMORY_INTERFACES:
            self.flag(node, f"uses .{attr} (a way to the process's raw memory)")
        elif (
            attr in DENIED_SUBMODULES
            and isinstance(node.value, ast.Name)
            and node.value.id in self.shared
        ):
            self.flag(
                node, f"uses {node.value.id}.{attr} (masked values compare equal to anything)"
            )
        elif _dunder(attr):
            if attr not in ALLOWED_DUNDERS or (
                attr == "__class__" and isinstance(node.ctx, (ast.Store, ast.Del))
            ):
                self.flag(node, f"uses the attribute {attr} (the interpreter's reflection)")
        elif attr.startswith("_") and not _is_own(node.value):
            self.flag(node, f"uses the private attribute {attr} of something it did not make")
        elif attr in ("format", "format_map"):
            receiver = node.value
            if not (isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)):
                self.flag(node, f"calls .{attr} on a string it computes")
            elif _FORMAT_FIELD.search(receiver.value):
                self.flag(node, "formats with attribute or item access in a field")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.called.add(id(func))
            if func.id in ATTRIBUTE_BUILTINS:
                name = node.args[1] if len(node.args) > 1 else None
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    self.flag(node, f"{func.id}() with a computed attribute name")
                elif name.value.startswith("_"):
                    self.flag(node, f"{func.id}() of the private attribute {name.value}")
                elif func.id in ("setattr", "delattr") and node.args:
                    target = node.args[0]
                    if isinstance(_root(target), ast.Name) and _root(target).id in self.shared:  # type: ignore[attr-defined]
                        self.flag(node, f"{func.id}() on something it imported")
            elif func.id == "type" and (len(node.args) != 1 or node.keywords):
                self.flag(node, "type() with more than one argument (a new class)")
        self.generic_visit(node)

    # Definitions and bindings -----------------------------------------------------------
    def _defines(self, node: ast.AST, name: str) -> None:
        if name in LYING_METHODS:
            self.flag(node, f"defines {name} (a value that decides its own comparisons)")
        elif _dunder(name) and name not in ALLOWED_DUNDERS:
            self.flag(node, f"defines {name}")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._defines(node, node.name)
        self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._defines(node, node.name)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for keyword in node.keywords:
            if keyword.arg == "metaclass":
                self.flag(node, "defines a class with a metaclass")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.flag(node, "declares global " + ", ".join(node.names))

    def _target(self, target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._target(element, None)
            return
        if isinstance(target, ast.Starred):
            self._target(target.value, None)
            return
        if isinstance(target, ast.Name):
            self._defines(target, target.id)
            return
        root = _root(target)
        if (
            isinstance(target, (ast.Attribute, ast.Subscript))
            and isinstance(root, ast.Name)
            and root.id in self.shared
            and not (isinstance(value, ast.Constant))
        ):
            self.flag(target, f"rebinds an attribute of {root.id}, which it imported")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, None)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target, node.value)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, None)
        self.generic_visit(node)


def _is_own(node: ast.AST) -> bool:
    """``self``/``cls`` (or an attribute chain on them): the objects the snippet's own class
    made, whose private attributes are the paper's."""
    root = _root(node)
    return isinstance(root, ast.Name) and root.id in ("self", "cls")


def check(body: str, file_text: str = "", reference: str | None = None) -> list[Finding]:
    """What the body may not say (empty: nothing). ``file_text``: the file the body goes into
    (its imports are shared objects); ``reference``: the reference body, if known (a body
    that does not parse on its own is refused only when the reference does)."""
    tree = parse_body(body)
    if tree is None:
        if reference is not None and parse_body(reference) is not None:
            return [Finding(1, "does not parse as statements on its own, as the block must")]
        return []
    checker = _Checker(imported_names(file_text) if file_text else frozenset())
    checker.visit(tree)
    seen: set[tuple[int, str]] = set()
    out = []
    for finding in sorted(checker.findings):
        if (finding.line, finding.what) not in seen:
            seen.add((finding.line, finding.what))
            out.append(finding)
    return out


def candidate_lines(before: str, after: str) -> tuple[int, int]:
    """The lines of ``after`` (1-based, inclusive) that differ from ``before``: where a body
    went in, less the lines at either edge that equal what was there (those are the
    reference's lines, run as the reference). ``(0, 0)`` when nothing differs."""
    old = before.split("\n")
    new = after.split("\n")
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < min(len(old), len(new)) - prefix
        and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]
    ):
        suffix += 1
    lo, hi = prefix + 1, len(new) - suffix
    return (lo, hi) if lo <= hi else (0, 0)
