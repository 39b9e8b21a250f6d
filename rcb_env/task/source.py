"""The task-source contract: what a benchmark layout implements so that every later stage
(workspace, grading, the task statement, agents) works with it unchanged.

A source turns a folder into frozen task data (:class:`~rcb_env.task.models.Pset`, papers,
snippets) and owns the behaviour that depends on the layout: which files the agent sees and how
the region is masked, how a body goes back into a pristine copy, which tests a run must report,
and how the task is put to the agent. Everything else in rcb-env talks to this contract only.

To add a layout: subclass :class:`TaskSource`, decorate it with :func:`register_source`, and give
its papers ``source=<name>``. ``rcb_env.load(path)`` asks each registered source's
:meth:`TaskSource.detect` (most recently registered first).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, NamedTuple, TypeVar

from rcb_env.frozen import Frozen
from rcb_env.registry import Registry
from rcb_env.task.models import Paper, Pset, Snippet
from rcb_env.task.reach import Reach
from rcb_env.verdicts import Verdict


class TaskStatement(Frozen):
    """The task as structured fields. The environment renders them into the first observation;
    agents that build their own prompts read them from ``info["task"]`` at reset."""

    title: str
    """Paper title (or id)."""
    file: str
    """The file holding the masked region, relative to the workspace."""
    placeholder: str
    """The exact text that stands where the code was removed (what an agent replaces)."""
    placeholder_intro: str = "these two comment lines stand where the code was removed"
    """How the statement introduces the placeholder ("In <file>, <this>:")."""
    indent: str
    """Indentation of the masked region."""
    intro: str
    """One sentence: what the agent is asked to do."""
    instructions: str
    """How the answer is written and graded (follows the placeholder in the statement)."""
    context_files: tuple[str, ...] = ()
    """Files worth reading for context."""
    paper_file: str
    """The paper's text file, relative to the paper folder."""
    paper_is_markdown: bool = False
    """Markdown headings (else LaTeX sectioning commands)."""


class Guarded(NamedTuple):
    """What the runner guards from the code under test while grading a snippet."""

    removed: tuple[str, ...]
    """Taken off the disk once the tests are loaded (modules the tests import are held in
    memory)."""
    kept: tuple[str, ...] = ()
    """Left on the disk for the tests (fixtures, the test's own log) but never opened by the
    candidate's code, which then may start no program."""
    options: tuple[str, ...] = ()
    """Runner options (``watch-logging``: the tests report through their log, so the logging
    configuration must not change while a test runs)."""


class Judged(NamedTuple):
    """A source's last word on a grading run."""

    verdict: Verdict
    """rcb-env's verdict, possibly turned into a failure by the layout's own rule."""
    official_pass: bool | None
    """The official harness's rule on this run; None: the default (paper2code) rule."""


class TaskSource(ABC):
    """One benchmark layout."""

    name: ClassVar[str]
    """Registry name, stored on each paper (``Paper.source``)."""

    @classmethod
    @abstractmethod
    def detect(cls, root: Path) -> bool:
        """Is ``root`` a folder of this layout?"""

    @abstractmethod
    def load(
        self, root: Path, *, papers: set[str] | None = None, overlay: Path | None = None
    ) -> Pset:
        """Every task under ``root`` (only ``papers`` when given), with rcb-env's settings from
        ``overlay`` when given (a named benchmark's, kept in the project) instead of the tree's.

        Raises:
            TaskLoadError: the folder itself is unusable (a bad paper is a ``LoadFailure``).
        """

    @abstractmethod
    def write_workspace(self, paper: Paper, snippet: Snippet, dest: Path) -> None:
        """Write the agent's masked tree for ``snippet`` into the empty folder ``dest``: the
        region masked, hidden files (tests, references) left out."""

    @abstractmethod
    def write_grading_copy(self, paper: Paper, snippet: Snippet, body: str, dest: Path) -> None:
        """Write a pristine copy of the paper into the empty folder ``dest`` with ``body`` in
        place of the snippet's region (everything else byte for byte as published)."""

    @abstractmethod
    def extract_body(self, paper: Paper, snippet: Snippet, edited: str) -> tuple[str, bool]:
        """The candidate body from the agent's edited copy of ``snippet.file``, and whether the
        file was also changed outside the region (ignored for grading)."""

    @abstractmethod
    def expected_tests(self, paper: Paper) -> tuple[str, ...]:
        """The tests a grading run of ``paper.test_file`` must report as passed (found
        statically, so the tested code cannot change the count)."""

    @abstractmethod
    def statement(self, paper: Paper, snippet: Snippet) -> TaskStatement:
        """The task as the agent is given it."""

    # Hooks with defaults: a layout overrides what differs from the paper2code one. ----------
    def paper_text(self, paper: Paper) -> str:
        """The paper as text (what ``read_paper`` and the statement show)."""
        return (paper.root / paper.paper_file).read_text(encoding="utf-8", errors="replace")

    def solved_file(self, paper: Paper, snippet: Snippet, body: str) -> str:
        """``snippet.file`` as the agent's workspace holds it, with ``body`` in the region (what
        a perfect agent leaves behind)."""
        return snippet.masked_text.replace(snippet.todo_body(), body, 1)

    def test_file(self, paper: Paper, snippet: Snippet) -> str:
        """The test entry point that grades ``snippet``, relative to the paper folder."""
        return snippet.test_file or paper.test_file

    def tests_for(self, paper: Paper, snippet: Snippet) -> tuple[str, ...]:
        """The tests a grading run of ``snippet``'s test file must report as passed."""
        return self.expected_tests(paper)

    def guarded(self, paper: Paper, snippet: Snippet) -> Guarded:
        """What the runner guards from the code under test while grading ``snippet``. Default:
        every hidden path, taken off the disk once the tests are loaded."""
        return Guarded(removed=paper.hidden_paths)

    def reach(self, paper: Paper, snippet: Snippet) -> Reach | None:
        """Does the snippet's test reach its code (a static check for ``validate``)? None: the
        layout does not say (paper2code's tests import the annotated files directly)."""
        return None

    def judge(self, paper: Paper, snippet: Snippet, verdict: Verdict, copy: Path) -> Judged:
        """The layout's own rule on top of rcb-env's verdict, and the official harness's rule,
        from the finished run (``copy`` is the grading copy, still on disk). Default: the
        verdict as is; the official rule is the paper2code one (exit 0, no error words)."""
        return Judged(verdict=verdict, official_pass=None)


#: The entry-point group where other distributions declare task sources
#: (``[project.entry-points."rcb_env.task_sources"] name = "package.module:Source"``).
SOURCES_GROUP = "rcb_env.task_sources"
#: Sources by name (built in, declared by an installed distribution, or registered): resolved
#: on first use, so the registry imports nothing.
_registry: Registry[TaskSource] = Registry(
    "task source",
    {"paper2code": "rcb_env.task.paper2code:Paper2Code", "lmr": "rcb_env.task.lmr:LmrBench"},
    group=SOURCES_GROUP,
)
_instances: dict[str, TaskSource] = {}
_lock = threading.Lock()
S = TypeVar("S", bound=type[TaskSource])


def register_source(cls: S) -> S:
    """Class decorator: make a layout available by its ``name``."""
    _registry.register(cls.name, cls)
    with _lock:
        _instances.pop(cls.name, None)
    return cls


def source_names() -> list[str]:
    """Every registered or built-in source name."""
    return _registry.names()


def get_source(name: str) -> TaskSource:
    """The (shared, stateless) instance of the named source.

    Raises:
        ConfigError: no source has that name.
    """
    cls = _registry.get(name)
    with _lock:
        inst = _instances.get(name)
        if inst is None or type(inst) is not cls:
            inst = _instances[name] = cls()
        return inst


def source_for(paper: Paper) -> TaskSource:
    """The source that loaded ``paper``."""
    return get_source(paper.source)


def detect_source(root: Path) -> TaskSource | None:
    """The source whose layout ``root`` is: user-registered sources first (newest first), then
    those installed distributions declare, the built-in ones last."""
    for name in [*_registry.custom(), *_registry.builtin]:
        if _registry.get(name).detect(root):
            return get_source(name)
    return None
