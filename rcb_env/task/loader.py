"""Load a pset (``papers.yaml`` + one folder per paper) or a lone paper folder, as published."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pathspec
from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from rcb_env.errors import (
    DuplicateSnippetError,
    MetadataError,
    MissingTaskFileError,
    TaskLoadError,
)
from rcb_env.guest.protocol import split_lines
from rcb_env.task import annotations as ann
from rcb_env.task.models import AnnotatedFile, LoadFailure, Overlay, Paper, PaperMeta, Pset, Snippet

PAPERS_YAML = "papers.yaml"
TEST_FILE = "paper2code_test.py"
PAPER_FILES = ("paper2code_paper.tex", "paper2code_paper.md")
OVERLAY_FILE = "rcb-env.yaml"
#: Never shown to an agent: the test, reference copies, caches that may hold compiled references,
#: version control, and rcb-env's own overlay.
DEFAULT_HIDDEN = (TEST_FILE, "*_ref.py", "__pycache__", "*.pyc", ".git", OVERLAY_FILE)
_SKIP_WALK = {".git", "__pycache__"}

_META_FIELDS = set(PaperMeta.model_fields)


def slugify(text: str) -> str:
    """Reduce to ``[A-Za-z0-9_-]`` (Gymnasium's id grammar, minus the ``.`` we use as separator)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_")
    return slug or "x"


def is_hidden(rel_path: str, patterns: tuple[str, ...]) -> bool:
    """True if the path, or any folder above it, matches a hidden pattern. Patterns follow
    ``.gitignore`` rules (pathspec): a pattern without ``/`` matches a name at any depth, one
    with ``/`` is anchored at the paper folder, ``*`` stays within one folder, ``**`` crosses
    folders, and a matched folder hides everything under it."""
    return _spec(patterns).match_file(rel_path)


@functools.lru_cache(maxsize=256)
def _spec(patterns: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(patterns)


def walk_files(root: Path) -> Iterator[str]:
    """Every regular file under ``root`` as a sorted POSIX relative path (symlinks not followed)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_WALK)
        rel_dir = Path(dirpath).relative_to(root)
        for name in sorted(filenames):
            yield (rel_dir / name).as_posix()


def _as_tuple(value: Any, field: str, where: str, line: int | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise MetadataError(
        f"field {field!r} must be a string, a list of strings or null, not {value!r}",
        file=where,
        line=line,
    )


_MONTH_RE = re.compile(r"^\d{4}-\d{2}$")


def _as_date(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, str) and _MONTH_RE.match(value.strip()):
        return f"{value.strip()}-01"
    return value


def parse_meta(entry: Any, *, where: str, line: int | None) -> PaperMeta:
    """Validate one ``papers.yaml`` entry. Unknown fields are ignored (the format may grow)."""
    if not isinstance(entry, Mapping):
        raise MetadataError(f"each entry must be a mapping, not {entry!r}", file=where, line=line)
    paper_id = entry.get("id")
    if not isinstance(paper_id, str) or not paper_id or "/" in paper_id or paper_id in {".", ".."}:
        raise MetadataError(
            f"entry needs an 'id' naming its folder, got {paper_id!r}", file=where, line=line
        )
    data: dict[str, Any] = {k: v for k, v in entry.items() if k in _META_FIELDS}
    for key in ("annotated_file_paths", "context_file_paths"):
        data[key] = _as_tuple(entry.get(key), key, where, line)
    for key in ("arxiv_date", "arxiv_v1_date", "first_commit_date", "last_commit_date"):
        if key in data:
            data[key] = _as_date(data[key])
    for key in ("title", "arxiv_abs", "github_url", "venue"):
        if key in data and data[key] is not None and not isinstance(data[key], str):
            data[key] = str(data[key])
    try:
        return PaperMeta.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise MetadataError(
            f"paper {paper_id}: invalid field {field!r}: {first['msg']}", file=where, line=line
        ) from None


def _read_yaml(path: Path) -> Any:
    """The YAML document, as ruamel.yaml's round-trip loader builds it: mappings and lists that
    remember the line of each item (see :func:`_entry_lines`).

    Raises:
        MetadataError: unreadable, malformed, or a value that cannot be built (with its line).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MetadataError(f"cannot read: {exc}", file=path) from None
    try:
        return YAML(typ="rt", pure=True).load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise MetadataError(
            f"malformed YAML: {exc.problem or exc.context or exc}", file=path, line=line
        ) from None
    except YAMLError as exc:
        raise MetadataError(f"malformed YAML: {exc}", file=path) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # A well-formed scalar that cannot be built, e.g. the unquoted date 2025-13-45: the
        # loader does not say where, so find the first such scalar in the composed document.
        raise MetadataError(
            f"invalid YAML value: {exc}", file=path, line=_bad_scalar_line(text)
        ) from None


def _bad_scalar_line(text: str) -> int | None:
    """1-based line of the first scalar that cannot be constructed."""
    loader = YAML(typ="safe", pure=True)
    try:
        stack = [loader.compose(text)]
    except YAMLError:
        return None
    while stack:
        n = stack.pop(0)
        if isinstance(n, ScalarNode):
            try:
                loader.constructor.construct_object(n)
            except (ValueError, TypeError, OverflowError, YAMLError):
                return int(n.start_mark.line) + 1
        elif isinstance(n, SequenceNode):
            stack.extend(n.value)
        elif isinstance(n, MappingNode):
            for k, v in n.value:
                stack.extend([k, v])
    return None


def _read_overlay(path: Path, *, key: str | None = None) -> Overlay | None:
    if not path.is_file():
        return None
    data = _read_yaml(path)
    environments: Mapping[str, Any] = {}
    if key is not None:
        papers = (data or {}).get("papers", {}) if isinstance(data, Mapping) else None
        if not isinstance(papers, Mapping):
            raise MetadataError("pset overlay needs a 'papers:' mapping", file=path)
        environments = data.get("environments") or {}
        if not isinstance(environments, Mapping):
            raise MetadataError("'environments:' must map names to requirement lists", file=path)
        data = papers.get(key)
        if data is None:
            return None
    if not isinstance(data, Mapping):
        raise MetadataError("overlay must be a mapping", file=path)
    fields = {k: _plain(v) for k, v in data.items()}
    env = fields.get("environment")
    if env is not None:
        if env not in environments:
            raise MetadataError(
                f"paper {key}: environment {env!r} is not defined under 'environments:'",
                file=path,
                line=_line_of(data, "environment"),
            )
        definition = _plain(environments[env])
        if isinstance(definition, dict):  # {requirements: [...], standins: [...]}
            fields.setdefault("requirements", definition.get("requirements", ()))
            fields.setdefault("standins", definition.get("standins", ()))
        else:
            fields.setdefault("requirements", definition)
    try:
        return Overlay.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise MetadataError(
            f"invalid overlay field {field!r}: {first['msg']}",
            file=path,
            line=_line_of(data, str(first["loc"][0])),
        ) from None


def read_overlay(path: Path, *, key: str | None = None) -> Overlay | None:
    """An overlay file (a paper folder's ``rcb-env.yaml``, or with ``key`` the entry of that
    paper in a pset-level one, its ``environments:`` resolved).

    Raises:
        MetadataError: the file or the entry is malformed (names file and line).
    """
    return _read_overlay(path, key=key)


def _plain(value: Any) -> Any:
    """ruamel.yaml's containers as tuples and dicts (the frozen models take tuples)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    return value


def _line_of(data: Any, key: str) -> int | None:
    lc = getattr(data, "lc", None)
    try:
        return int(lc.key(key)[0]) + 1 if lc is not None else None
    except (KeyError, TypeError):
        return None


def _merge(base: Overlay | None, top: Overlay | None) -> Overlay:
    if base is None:
        return top or Overlay()
    if top is None:
        return base
    return base.model_copy(update=top.model_dump(exclude_unset=True))


def _check_rel(rel: str, *, field: str, where: str, paper: str) -> None:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        raise MetadataError(
            f"paper {paper}: {field} entry {rel!r} must stay inside the paper folder", file=where
        )


def _read_text(path: Path) -> str:
    try:
        # Bytes, then decode: text mode would turn \r\n into \n and break byte-exact round trips.
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskLoadError(f"not UTF-8 text: {exc}", file=path) from None


def _unique_slugs(names: list[str]) -> dict[str, str]:
    raw = {n: slugify(n) for n in names}
    counts: dict[str, int] = {}
    for s in raw.values():
        counts[s] = counts.get(s, 0) + 1
    return {
        n: s if counts[s] == 1 else f"{s}_{hashlib.sha1(n.encode()).hexdigest()[:6]}"
        for n, s in raw.items()
    }


def load_paper(
    folder: Path,
    meta: PaperMeta,
    overlay: Overlay | None = None,
    *,
    meta_source: str | None = None,
) -> Paper:
    """Load one paper folder against its metadata.

    Raises:
        TaskLoadError: (a subclass of it) naming file, line and snippet.
    """
    folder = folder.resolve()
    where = meta_source or str(folder)
    if not folder.is_dir():
        raise MissingTaskFileError(
            f"paper folder {meta.id!r} does not exist", file=where, paper=meta.id
        )
    paper_file = next((n for n in PAPER_FILES if (folder / n).is_file()), None)
    if paper_file is None:
        raise MissingTaskFileError(
            f"no paper text ({' or '.join(PAPER_FILES)})", file=folder, paper=meta.id
        )
    if not (folder / TEST_FILE).is_file():
        raise MissingTaskFileError("test file is missing", file=folder / TEST_FILE, paper=meta.id)
    overlay = _merge(overlay, _read_overlay(folder / OVERLAY_FILE))

    for rel in meta.context_file_paths:
        _check_rel(rel, field="context_file_paths", where=where, paper=meta.id)
        if not (folder / rel).is_file():
            raise MissingTaskFileError(
                f"context file {rel!r} listed for paper {meta.id} does not exist",
                file=folder / rel,
            )
    if not meta.annotated_file_paths:
        raise MetadataError(f"paper {meta.id} lists no annotated_file_paths", file=where)

    files: list[AnnotatedFile] = []
    snippets: list[Snippet] = []
    seen: dict[str, str] = {}
    for rel in meta.annotated_file_paths:
        _check_rel(rel, field="annotated_file_paths", where=where, paper=meta.id)
        path = folder / rel
        if not path.is_file():
            raise MissingTaskFileError(
                f"annotated file {rel!r} listed for paper {meta.id} does not exist", file=path
            )
        text = _read_text(path)
        files.append(AnnotatedFile(path=PurePosixPath(rel).as_posix(), text=text))
        spans = ann.parse_spans(text, str(path))
        for span in spans:
            if span.name in seen:
                raise DuplicateSnippetError(
                    f"snippet name already used in {seen[span.name]} of the same paper",
                    file=path,
                    line=span.start_line,
                    snippet=span.name,
                )
            seen[span.name] = rel
        for span in spans:
            snippets.append(
                Snippet(
                    paper_id=meta.id,
                    name=span.name,
                    slug="",
                    file=PurePosixPath(rel).as_posix(),
                    start_line=span.start_line,
                    end_line=span.end_line,
                    indent=ann.min_indent(text, span),
                    depth=span.depth,
                    parent=span.parent,
                    children=tuple(s.name for s in spans if s.parent == span.name),
                    weight=ann.weight(text, span),
                    distinct_lines=ann.distinct_lines(text, span, spans),
                    reference_body=ann.reference_body(text, span),
                    masked_text=ann.mask(text, span),
                )
            )
    slugs = _unique_slugs([s.name for s in snippets])
    snippets = [s.model_copy(update={"slug": slugs[s.name]}) for s in snippets]

    patterns = DEFAULT_HIDDEN + overlay.hidden_paths
    hidden = tuple(p for p in walk_files(folder) if is_hidden(p, patterns))
    annotated = {f.path for f in files}
    clash = sorted(annotated & set(hidden))
    if clash:
        raise MetadataError(
            f"annotated file {clash[0]!r} matches a hidden pattern; the agent could not see it",
            file=where,
        )
    return Paper(
        meta=meta,
        root=folder,
        slug=slugify(meta.id),
        paper_file=paper_file,
        annotated_files=tuple(files),
        context_files=meta.context_file_paths,
        hidden_patterns=patterns,
        hidden_paths=hidden,
        overlay=overlay,
        snippets=tuple(snippets),
    )


def _entry_lines(data: Any) -> list[int | None]:
    """1-based line of each item of a loaded YAML list (ruamel.yaml keeps them)."""
    if isinstance(data, CommentedSeq):
        return [int(data.lc.item(i)[0]) + 1 for i in range(len(data))]
    return []


def load_pset(root: Path, *, papers: set[str] | None = None, overlay: Path | None = None) -> Pset:
    """Load a pset root. Papers that fail are returned in ``failures``; the rest load.

    Raises:
        MetadataError: ``papers.yaml`` itself is missing or malformed.
    """
    root = root.resolve()
    yaml_path = root / PAPERS_YAML
    if not yaml_path.is_file():
        raise MissingTaskFileError("papers.yaml is missing", file=yaml_path)
    data = _read_yaml(yaml_path)
    if not isinstance(data, list):
        raise MetadataError("papers.yaml must be a list of papers", file=yaml_path, line=1)
    lines = _entry_lines(data)
    pset_overlay = overlay if overlay is not None else root / OVERLAY_FILE
    loaded: list[Paper] = []
    failures: list[LoadFailure] = []
    seen_ids: set[str] = set()
    for i, entry in enumerate(data):
        line = lines[i] if i < len(lines) else None
        where = f"{yaml_path}:{line}" if line else str(yaml_path)
        try:
            meta = parse_meta(entry, where=str(yaml_path), line=line)
        except MetadataError as exc:
            pid = entry.get("id") if isinstance(entry, Mapping) else None
            failures.append(_failure(str(pid or f"<entry {i + 1}>"), exc))
            continue
        if papers is not None and meta.id not in papers:
            continue
        try:
            if meta.id in seen_ids:
                raise MetadataError(
                    f"paper id {meta.id!r} is listed twice", file=yaml_path, line=line
                )
            seen_ids.add(meta.id)
            settings = _read_overlay(pset_overlay, key=meta.id)
            loaded.append(load_paper(root / meta.id, meta, settings, meta_source=where))
        except TaskLoadError as exc:
            failures.append(_failure(meta.id, exc))
    if papers is not None:
        missing = papers - {p.id for p in loaded} - {f.paper for f in failures}
        for pid in sorted(missing):
            failures.append(
                LoadFailure(
                    paper=pid,
                    message=f"{yaml_path}: no paper {pid!r} is listed",
                    error_type="MetadataError",
                )
            )
    return Pset(root=root, papers=tuple(loaded), failures=tuple(failures))


def _failure(paper: str, exc: TaskLoadError) -> LoadFailure:
    return LoadFailure(paper=paper, message=str(exc), error_type=type(exc).__name__)


def load_lone_paper(folder: Path) -> Paper:
    """Load a paper folder outside a pset: metadata from the parent's ``papers.yaml`` when it
    lists the folder, else annotated files are found by scanning for markers."""
    folder = folder.resolve()
    parent_yaml = folder.parent / PAPERS_YAML
    if parent_yaml.is_file():
        data = _read_yaml(parent_yaml)
        if isinstance(data, list):
            for entry, line in zip(data, _entry_lines(data), strict=False):
                if isinstance(entry, Mapping) and entry.get("id") == folder.name:
                    meta = parse_meta(entry, where=str(parent_yaml), line=line)
                    overlay = _read_overlay(folder.parent / OVERLAY_FILE, key=folder.name)
                    return load_paper(folder, meta, overlay, meta_source=f"{parent_yaml}:{line}")
    overlay = _read_overlay(folder / OVERLAY_FILE) or Overlay()
    patterns = DEFAULT_HIDDEN + overlay.hidden_paths
    annotated = tuple(
        rel
        for rel in walk_files(folder)
        if rel.endswith(".py")
        and not is_hidden(rel, patterns)
        and any(
            ann.START_RE.match(line.rstrip("\n")) for line in split_lines(_read_text(folder / rel))
        )
    )
    meta = PaperMeta(id=folder.name, annotated_file_paths=annotated)
    return load_paper(folder, meta, overlay)


def load(path: Path | str, *, papers: set[str] | None = None, source: str | None = None) -> Pset:
    """Load a named benchmark (``researchcodebench``: its fetched copy, with rcb-env's overlay)
    or a task folder, with the named task source or the one whose layout it is.

    Raises:
        MissingTaskFileError: a benchmark not fetched yet, or a folder no source recognises.
        ConfigError: ``source`` names no registered source.
    """
    from rcb_env.catalog import resolve
    from rcb_env.task.source import detect_source, get_source

    root, bench = resolve(path)
    if source is None and bench is not None:
        source = bench.source
    found = get_source(source) if source is not None else detect_source(root)
    if found is None:
        raise MissingTaskFileError(
            f"not a task folder of any known layout: neither a pset ({PAPERS_YAML}) nor a "
            f"paper folder ({TEST_FILE})",
            file=root,
        )
    overlay = bench.overlay_path() if bench is not None else None
    pset = found.load(root, papers=papers, overlay=overlay)
    if bench is not None:
        pset = pset.model_copy(update={"benchmark": bench.name})
    return pset


def load_paper2code(
    path: Path, *, papers: set[str] | None = None, overlay: Path | None = None
) -> Pset:
    """Load a paper2code pset root (with ``overlay`` instead of its own ``rcb-env.yaml``), or a
    lone paper folder as a one-paper pset."""
    path = path.resolve()
    if (path / PAPERS_YAML).is_file():
        return load_pset(path, papers=papers, overlay=overlay)
    if (path / TEST_FILE).is_file():
        try:
            paper = load_lone_paper(path)
        except TaskLoadError as exc:
            return Pset(root=path, papers=(), failures=(_failure(path.name, exc),))
        return Pset(root=path, papers=(paper,))
    raise MissingTaskFileError(
        f"neither a pset ({PAPERS_YAML}) nor a paper folder ({TEST_FILE})", file=path
    )


def bundled_root() -> Path:
    """The tasks shipped with rcb-env (inside the wheel, or ``tasks/`` in a source checkout)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_bundled_tasks", here.parent / "tasks"):
        if (candidate / PAPERS_YAML).is_file():
            return candidate
    raise MissingTaskFileError("bundled tasks are not installed", file=here / "_bundled_tasks")
