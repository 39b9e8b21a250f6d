"""Frozen task data: what a pset, a paper and a snippet are. Behaviour lives elsewhere."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import Field

from rcb_env.catalog.assets import Asset
from rcb_env.frozen import Frozen
from rcb_env.task.annotations import Span, todo_lines


class PaperMeta(Frozen):
    """One entry of ``papers.yaml``, with string-or-list fields normalised to tuples."""

    id: str
    """Folder name of the paper inside the pset."""
    title: str | None = None
    """Paper title."""
    arxiv_abs: str | None = None
    """arXiv abstract page."""
    arxiv_date: dt.date | None = None
    """Date of the arXiv version the task was built from."""
    arxiv_v1_date: dt.date | None = None
    """Date of the first arXiv version."""
    github_url: str | None = None
    """Official repository."""
    first_commit_date: dt.date | None = None
    """First commit of the official repository (the official contamination cut-off field)."""
    last_commit_date: dt.date | None = None
    """Last commit of the official repository."""
    venue: str | None = None
    """Where the paper appeared."""
    annotated_file_paths: tuple[str, ...] = ()
    """Files holding snippets, relative to the paper folder."""
    context_file_paths: tuple[str, ...] = ()
    """Extra files shown to a single-shot solver, relative to the paper folder."""

    def date(self, field: DateField) -> dt.date | None:
        """The named date, for filtering by a model's knowledge cut-off."""
        value: dt.date | None = getattr(self, field)
        return value


DateField = Literal["first_commit_date", "arxiv_v1_date", "arxiv_date", "last_commit_date"]


class AuditAccepted(Frozen):
    """A leak-audit finding that is the benchmark's design, not a leak of rcb-env's."""

    path: str
    """Where the answer's lines are found, relative to the paper folder (gitignore rules); for
    ``kind: environment``, relative to the interpreter's ``site-packages``."""
    kind: Literal["paper_text", "sibling", "vendored", "environment", "other"]
    """What it is: the paper's own text, a sibling file of the repository, a vendored copy, an
    installed library."""
    reason: str
    """Why the solver may see it."""


class Overlay(Frozen):
    """rcb-env's optional per-paper settings (``rcb-env.yaml``); the published format has none."""

    hidden_paths: tuple[str, ...] = ()
    """Extra glob patterns (relative to the paper folder) the agent must never see."""
    timeout_s: float | None = None
    """Grading timeout for this paper's test file, in seconds."""
    known_issue: str | None = None
    """Why this paper's tests cannot pass on a standard machine (network, missing packages)."""
    requirements: tuple[str, ...] = ()
    """Python requirements of the paper's tests (used to build task environments)."""
    environment: str | None = None
    """Name of the pset overlay's requirement set (``environments:``) this paper uses; its
    requirements become :attr:`requirements`, and ``rcb-env setup`` builds it."""
    standins: tuple[str, ...] = ()
    """Import-only stand-in packages (rcb-env's, :mod:`rcb_env.catalog.standins`) installed into
    the paper's environment for packages that cannot be installed."""
    audit_accepted: tuple[AuditAccepted, ...] = ()
    """Leak-audit findings that are part of the benchmark's design, each with its reason."""
    assets: tuple[Asset, ...] = ()
    """Files the tests need that ``rcb-env setup --assets`` fetches into a read-only cache
    (:class:`rcb_env.catalog.assets.Asset`)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the paper's test runs and shells; ``{assets}`` stands for its
    asset folder (e.g. ``TORCH_HOME: "{assets}/torch"``)."""


BlockerKind = Literal["lfs", "missing", "absent", "hub", "cuda", "test"]
#: What ``rcb-env get`` lifts: LFS content, files a partial source lacked.
FETCHED_BY_GET: frozenset[str] = frozenset({"lfs", "missing"})


class Blocker(Frozen):
    """One reason a snippet cannot run here."""

    kind: BlockerKind
    """``lfs``: fixtures that are Git LFS pointers; ``missing``: files this copy's source
    lacked; ``absent``: files the benchmark does not have; ``hub``: a model download in the test
    with no asset declared; ``cuda``: needs a GPU; ``test``: no test file."""
    reason: str


class Snippet(Frozen):
    """One masked region: the unit of an episode."""

    paper_id: str
    """Id (folder) of the paper this snippet belongs to."""
    name: str
    """Name from the marker; unique within the paper."""
    slug: str
    """``name`` reduced to ``[A-Za-z0-9_-]``, unique within the paper (for Gymnasium ids)."""
    file: str
    """Annotated file, POSIX path relative to the paper folder."""
    start_line: int
    """1-based line of the start marker in the original file."""
    end_line: int
    """1-based line of the end marker in the original file."""
    indent: str
    """Minimum indentation over the snippet's non-blank lines, markers included."""
    depth: int
    """0 for a top-level snippet, 1 for its children, and so on."""
    parent: str | None
    """Name of the enclosing snippet, if any."""
    children: tuple[str, ...]
    """Names of the directly nested snippets."""
    weight: int
    """Code lines strictly between the markers, children's included (the metric's L_s)."""
    distinct_lines: int
    """Code lines of this snippet that belong to none of its children."""
    reference_body: str
    """The original text strictly between the two markers."""
    masked_text: str
    """The annotated file as the solver sees it when this snippet is masked."""
    placeholder: str | None = None
    """What stands in the region in ``masked_text`` when the layout masks with its own text
    (LMR-Bench's ``pass``, TODOs, ``raise NotImplementedError``); None: the two TODO comment
    lines of the paper2code layout."""
    symbol: str | None = None
    """The function whose body is the region (``Class.method``), for layouts that mask functions."""
    instruction: str | None = None
    """The benchmark's own words on what to implement, when it has them (LMR-Bench)."""
    test_file: str | None = None
    """This snippet's test entry point when the layout has one per snippet; None: the paper's."""
    unavailable: str | None = None
    """Why this snippet cannot run in a standard installation, found by its task source (a test
    fixture the repository lacks, a model download, CUDA); None: nothing known."""
    blockers: tuple[Blocker, ...] = ()
    """Every reason found, the first one being :attr:`unavailable` (what a fetch would lift is
    told apart from what none would)."""

    @property
    def id(self) -> str:
        """Stable id ``<paper>/<snippet name>``."""
        return f"{self.paper_id}/{self.name}"

    @property
    def span(self) -> Span:
        """Marker positions as the pure annotation functions take them."""
        return Span(
            name=self.name,
            start=self.start_line - 1,
            end=self.end_line - 1,
            depth=self.depth,
            parent=self.parent,
        )

    def todo_body(self) -> str:
        """The masked placeholder (the layout's own, or two TODO comment lines) as a candidate
        body."""
        if self.placeholder is not None:
            return self.placeholder
        return "".join(todo_lines(self.name, self.weight, self.indent))

    def pass_body(self) -> str:
        """``pass`` at the snippet's indentation: the weakest valid candidate."""
        return f"{self.indent}pass\n"


class AnnotatedFile(Frozen):
    """An annotated file's original text (markers included)."""

    path: str
    """POSIX path relative to the paper folder."""
    text: str
    """Exact original contents."""


class Paper(Frozen):
    """One paper folder: metadata, where things are, and its snippets in file order."""

    meta: PaperMeta
    """Entry from ``papers.yaml`` (or synthesised for a lone paper folder)."""
    source: str = "paper2code"
    """Name of the task source (layout) that loaded it; see :mod:`rcb_env.task.source`."""
    root: Path
    """Absolute path of the paper folder (the pristine tree)."""
    slug: str
    """Paper id reduced to ``[A-Za-z0-9_-]`` (for Gymnasium ids)."""
    paper_file: str
    """``paper2code_paper.tex`` or ``paper2code_paper.md``."""
    test_file: str = "paper2code_test.py"
    """The test entry point."""
    annotated_files: tuple[AnnotatedFile, ...]
    """Files holding snippets."""
    context_files: tuple[str, ...] = ()
    """Context files that exist, relative to the folder."""
    hidden_patterns: tuple[str, ...]
    """Glob patterns the agent must never see (defaults plus the overlay's)."""
    hidden_paths: tuple[str, ...]
    """Existing files matched by ``hidden_patterns`` at load time."""
    overlay: Overlay = Field(default_factory=Overlay)
    """rcb-env's settings for this paper."""
    snippets: tuple[Snippet, ...]
    """Every snippet, parents and children, ordered by file then start line."""
    excluded_paths: tuple[str, ...] = ()
    """Files in neither the workspace nor the grading copy: copies of the answer the benchmark
    left in the repository (found by the task source)."""
    unavailable: str | None = None
    """Why none of this paper's snippets can run (an empty repository), found by its task
    source; None: nothing known (see also :attr:`Overlay.known_issue`)."""

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def total_weight(self) -> int:
        return sum(s.weight for s in self.snippets)

    def snippet(self, name: str) -> Snippet:
        for s in self.snippets:
            if s.name == name:
                return s
        raise KeyError(f"paper {self.id} has no snippet named {name!r}")

    def file_text(self, path: str) -> str:
        for f in self.annotated_files:
            if f.path == path:
                return f.text
        raise KeyError(f"{path} is not an annotated file of paper {self.id}")


class LoadFailure(Frozen):
    """A paper that could not be loaded, kept so the other papers still run."""

    paper: str
    """Paper id (folder) that failed."""
    message: str
    """The full error text (names file, line and snippet where known)."""
    error_type: str
    """Class name of the :class:`~rcb_env.errors.TaskLoadError` subclass."""


class PsetPart(Frozen):
    """One benchmark of a combined selection (:func:`rcb_env.task.selection.combine`)."""

    name: str
    """The benchmark's name (or its folder's)."""
    root: Path
    """The folder it was loaded from."""
    papers: tuple[str, ...]
    """Ids of its papers (in the combined selection)."""


class Pset(Frozen):
    """A loaded problem set: the papers that loaded, and those that did not."""

    root: Path
    """Folder that was loaded (pset root or a lone paper folder)."""
    papers: tuple[Paper, ...]
    """Papers in ``papers.yaml`` order."""
    failures: tuple[LoadFailure, ...] = ()
    """Papers that failed to load, with why."""
    benchmark: str | None = None
    """The named benchmark it is (:mod:`rcb_env.catalog`), if any."""
    parts: tuple[PsetPart, ...] = ()
    """When several benchmarks were loaded together: each one (rates and denominators are
    reported per part as well as together)."""

    @property
    def snippets(self) -> tuple[Snippet, ...]:
        return tuple(s for p in self.papers for s in p.snippets)

    def paper(self, paper_id: str) -> Paper:
        for p in self.papers:
            if p.id == paper_id:
                return p
        raise KeyError(f"no paper {paper_id!r} in {self.root}")


def task_hash(snippet: Snippet) -> str:
    """A snippet's content hash: what a run's record names, and what a node checks its own copy
    of the tasks against before it runs a job."""
    spec = snippet.model_dump(mode="json")
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
