"""The LMR-Bench layout (Yan et al., 2025) as a task source.

One folder per task: ``info.json`` (the paper, the repository folder, and ``implementations``:
each a function to write, with its instruction, goal file, goal function, class, golden file and
unit test), ``golden_files/*_golden.py`` (whole-file references) and the repository with the goal
functions masked (``paper.json`` page texts, ``paper.pdf``, ``unit_test/unit_test_<k>.py``).

Each implementation is one episode. There are no markers: the region is found by parsing
(:mod:`rcb_env.task.pyregion`: the masked function against the golden one), the reference body
is the golden function's, re-indented to the masked file, and a candidate goes back into the
masked file with every other byte kept (never the golden file copied: some golden files are
older versions of the file). Weight: the reference body's code lines (not blank, not a ``#``
comment), the ResearchCodeBench rule.

The agent sees the repository without ``unit_test/`` (unless the goal file is there: three tasks
put the function in the test script), ``__pycache__`` (some hold compiled golden code) or any
golden file. Grading runs the implementation's unit test the official way (``cd <repo>;
PYTHONPATH=. python unit_test/unit_test_<k>.py``) under rcb-env's runner; it passes only if the
program exits 0, every unittest test passes and the test's own log has at least one "Passed"
line and no "Failed" line. The official rule (the log alone, exit status ignored) is kept
beside it (``official_pass``).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shutil
from pathlib import Path
from typing import Any, TypedDict

from rcb_env.catalog.fetch import verified_gaps
from rcb_env.errors import MetadataError, MissingTaskFileError, TaskLoadError
from rcb_env.task import loader
from rcb_env.task import pyregion as pr
from rcb_env.task.annotations import is_code_line
from rcb_env.task.discovery import expected_tests
from rcb_env.task.models import (
    AnnotatedFile,
    LoadFailure,
    Overlay,
    Paper,
    PaperMeta,
    Pset,
    Snippet,
)
from rcb_env.task.reach import Reach, reach
from rcb_env.task.regions import extract_span
from rcb_env.task.source import Guarded, Judged, TaskSource, TaskStatement
from rcb_env.untrusted import read_beneath
from rcb_env.verdicts import FailureKind, Outcome, Verdict

INFO = "info.json"
GOLDEN_DIR = "golden_files"
PAPER_JSON = "paper.json"
PAPER_PDF = "paper.pdf"
TEST_DIR = "unit_test"
#: Never in an LMR workspace or grading copy: compiled files (some are compiled golden code).
HIDDEN = (
    "__pycache__",
    "*.pyc",
    ".git",
    ".DS_Store",
    ".ipynb_checkpoints",  # editor backups: one holds a copy of a masked function
    "*_golden.py",
    GOLDEN_DIR,
)
_LFS_HEAD = b"version https://git-lfs.github.com/spec/v1"
#: The most of a test's log the official rule reads.
_LOG_LIMIT = 64 * 1024 * 1024
_LOG_LITERAL = re.compile(r"""['"]([^'"\s/\\]+\.log)['"]""")
_MODEL_HUB = re.compile(r"\.from_pretrained\(|hf_hub_download\(|snapshot_download\(")
_CUDA = re.compile(r"""\.cuda\(|device\s*=\s*['"]cuda|['"]cuda(:\d+)?['"]""")


def _task_folders(root: Path) -> list[Path]:
    if (root / INFO).is_file():
        return [root]
    return sorted(
        d
        for d in root.iterdir()
        if d.is_dir() and not d.name.startswith(".") and ((d / INFO).is_file() or _looks_like(d))
    )


def _looks_like(folder: Path) -> bool:
    """A task folder without its ``info.json`` (reported, not skipped)."""
    return (folder / GOLDEN_DIR).is_dir()


def _is_lfs_pointer(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(_LFS_HEAD)) == _LFS_HEAD
    except OSError:
        return False


def _json_line(text: str, key: str, after: int = 0) -> int | None:
    """1-based line of the first ``"key"`` at or after character ``after`` (for error messages)."""
    at = text.find(f'"{key}"', after)
    return text.count("\n", 0, at) + 1 if at >= 0 else None


class _Where(TypedDict):
    file: Path
    line: int | None
    snippet: str


class _Impl:
    """One ``implementations`` entry, checked, with where it is in ``info.json``."""

    def __init__(self, raw: Any, position: int, info: Path, text: str, offset: int) -> None:
        self.position = position
        self.line = _json_line(text, "instruction", offset) or _json_line(text, "implementations")
        if not isinstance(raw, dict):
            raise MetadataError(
                f"implementation {position} is not an object", file=info, line=self.line
            )
        self.raw = raw

        def text_field(name: str, required: bool = True) -> str:
            value = raw.get(name)
            if value is None or value == "":
                if required:
                    raise MetadataError(
                        f"implementation {position} has no {name!r}",
                        file=info,
                        line=_json_line(text, "goal_file", offset) or self.line,
                    )
                return ""
            if not isinstance(value, str):
                raise MetadataError(
                    f"implementation {position}: {name!r} must be a string, not "
                    f"{type(value).__name__}",
                    file=info,
                    line=self.line,
                )
            return value.strip()

        self.instruction = text_field("instruction", required=False)
        self.goal_file = text_field("goal_file")
        self.golden_file = text_field("golden_file")
        self.goal_function = text_field("goal_function", required=False)
        self.class_name = text_field("class_name", required=False) or None
        self.unit_test_file = text_field("unit_test_file", required=False)
        self.index = raw.get("index", position)


class LmrBench(TaskSource):
    """LMR-Bench task folders (``info.json`` + ``golden_files/`` + the masked repository)."""

    name = "lmr"

    @classmethod
    def detect(cls, root: Path) -> bool:
        if (root / INFO).is_file():
            return True
        try:
            return any((d / INFO).is_file() for d in root.iterdir() if d.is_dir())
        except OSError:
            return False

    # loading ---------------------------------------------------------------------------------
    def load(
        self, root: Path, *, papers: set[str] | None = None, overlay: Path | None = None
    ) -> Pset:
        root = root.resolve()
        if not root.is_dir():
            raise MissingTaskFileError("not a folder", file=root)
        if overlay is None and (root / loader.OVERLAY_FILE).is_file():
            overlay = root / loader.OVERLAY_FILE
        missing, submodules = verified_gaps(root)
        loaded: list[Paper] = []
        failures: list[LoadFailure] = []
        for folder in _task_folders(root):
            if papers is not None and folder.name not in papers:
                continue
            try:
                task_overlay = (
                    loader.read_overlay(overlay, key=folder.name) if overlay else None
                ) or Overlay()
                rel = "" if folder == root else f"{folder.name}/"
                gaps = {m.removeprefix(rel) for m in missing if m.startswith(rel)}
                empty = {m.removeprefix(rel) for m in submodules if m.startswith(rel)}
                loaded.append(load_task(folder, task_overlay, missing=gaps, submodules=empty))
            except TaskLoadError as exc:
                failures.append(
                    LoadFailure(paper=folder.name, message=str(exc), error_type=type(exc).__name__)
                )
        if papers is not None:
            known = {p.id for p in loaded} | {f.paper for f in failures}
            for name in sorted(papers - known):
                failures.append(
                    LoadFailure(
                        paper=name,
                        message=f"no task folder {name!r} in {root}",
                        error_type="MissingTaskFileError",
                    )
                )
        return Pset(root=root, papers=tuple(loaded), failures=tuple(failures))

    # the contract ----------------------------------------------------------------------------
    def write_workspace(self, paper: Paper, snippet: Snippet, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        for rel in loader.walk_files(paper.root):
            if rel != snippet.file and loader.is_hidden(rel, paper.hidden_patterns):
                continue
            src = paper.root / rel
            if src.is_symlink():
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if rel == snippet.file:
                target.write_bytes(snippet.masked_text.encode())
            else:
                shutil.copyfile(src, target)

    def solved_file(self, paper: Paper, snippet: Snippet, body: str) -> str:
        return _splice(snippet, body)

    def write_grading_copy(self, paper: Paper, snippet: Snippet, body: str, dest: Path) -> None:
        shutil.copytree(paper.root, dest, ignore=_grading_ignore, symlinks=True)
        for copy in paper.excluded_paths:
            (dest / copy).unlink(missing_ok=True)  # the answer, left in the repository
        inserted = self.solved_file(paper, snippet, body)
        (dest / snippet.file).write_bytes(inserted.encode())
        # A log left in the tree would speak for a run that never wrote one: every test's log
        # starts empty (and exists, so that the runner can guard it).
        for other in paper.snippets:
            log = _log_file(paper, other)
            if log is not None:
                (dest / log).parent.mkdir(parents=True, exist_ok=True)
                (dest / log).write_bytes(b"")

    def extract_body(self, paper: Paper, snippet: Snippet, edited: str) -> tuple[str, bool]:
        return extract_span(snippet.masked_text, snippet.start_line, snippet.end_line - 1, edited)

    def expected_tests(self, paper: Paper) -> tuple[str, ...]:
        return self.tests_for(paper, paper.snippets[0])

    def tests_for(self, paper: Paper, snippet: Snippet) -> tuple[str, ...]:
        path = paper.root / self.test_file(paper, snippet)
        try:
            return expected_tests(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return ()

    def statement(self, paper: Paper, snippet: Snippet) -> TaskStatement:
        symbol = snippet.symbol or snippet.name
        test = self.test_file(paper, snippet)
        test_visible = test == snippet.file
        if snippet.placeholder:
            intro = (
                f"the body of `{symbol}` was removed; this is what stands in its place "
                f"(lines {snippet.start_line + 1}-{snippet.end_line - 1})"
            )
        else:
            intro = (
                f"the body of `{symbol}` was removed after line {snippet.start_line}; "
                "nothing stands in its place (shown empty below)"
            )
        pdf = " and paper.pdf" if (paper.root / PAPER_PDF).is_file() else ""
        instruction = snippet.instruction or ""
        return TaskStatement(
            title=paper.meta.title or paper.id,
            file=snippet.file,
            placeholder=snippet.todo_body(),
            placeholder_intro=intro,
            indent=snippet.indent,
            intro="implement one function of the code that accompanies the paper",
            instructions=(
                (f"The task: {instruction}\n" if instruction else "")
                + f"Write the body of `{symbol}` in {snippet.file} at the same indentation, "
                "keeping its signature, using the paper and the rest of the repository. Only "
                f"that body is graded, by the unit test {test}"
                + ("" if test_visible else " (hidden from you)")
                + ": it passes when the test program exits normally, every test passes and "
                "its log reports no failed check. Changes elsewhere are ignored. The paper is "
                f"{PAPER_JSON} (its text){pdf}. When done, call submit."
            ),
            paper_file=PAPER_JSON,
            paper_is_markdown=True,
        )

    # hooks -----------------------------------------------------------------------------------
    def paper_text(self, paper: Paper) -> str:
        return render_paper(paper.root / PAPER_JSON, paper.meta.title or paper.id)

    def guarded(self, paper: Paper, snippet: Snippet) -> Guarded:
        # Test scripts leave the disk once loaded; fixtures (inputs and expected outputs) stay
        # for the tests, unreadable by the candidate. The goal file is the candidate's own. The
        # tests' logs are part of the verdict: the candidate can neither open them nor change
        # the logging configuration while a test runs.
        removed: list[str] = []
        kept: list[str] = []
        for rel in paper.hidden_paths:
            if rel == snippet.file:
                continue
            (removed if rel.endswith(".py") else kept).append(rel)
        logs = {log for s in paper.snippets if (log := _log_file(paper, s)) is not None}
        kept += sorted(logs - set(kept))
        return Guarded(removed=tuple(removed), kept=tuple(kept), options=("watch-logging",))

    def reach(self, paper: Paper, snippet: Snippet) -> Reach | None:
        if not snippet.masked_text or not snippet.symbol:
            return None  # an empty repository: nothing to look at
        path = paper.overlay.env.get("PYTHONPATH", ".").split(":")
        return reach(paper.root, self.test_file(paper, snippet), snippet.file, snippet.symbol, path)

    def judge(self, paper: Paper, snippet: Snippet, verdict: Verdict, copy: Path) -> Judged:
        log = _log_file(paper, snippet)
        if log is None:
            # No log to read: rcb-env's verdict alone; the official rule cannot pass.
            return Judged(verdict=verdict, official_pass=False)
        try:
            # Written by the run: an untrusted file (a FIFO or link there is never followed).
            # From the grading folder down: the run could swap the copy's folder for a link.
            raw = read_beneath(copy.parent, f"{copy.name}/{log}", _LOG_LIMIT)
        except (OSError, ValueError):
            raw = b""
        lines = raw.decode("utf-8", "replace").splitlines()
        passed = sum("Passed" in line for line in lines)
        failed = sum("Failed" in line for line in lines)
        official = passed >= 1 and failed == 0
        if verdict.outcome is Outcome.PASSED and not official:
            why = (
                f"{failed} checks logged as failed in {log}"
                if failed
                else f"no check logged as passed in {log}"
            )
            verdict = Verdict(Outcome.FAILED, FailureKind.LOG_FAILURE, why, verdict.tests)
        return Judged(verdict=verdict, official_pass=official)


def _splice(snippet: Snippet, body: str) -> str:
    """The masked goal file with ``body`` in the snippet's region, every other byte kept."""
    lines = pr.split_lines(snippet.masked_text)
    if body and not body.endswith("\n"):
        body += "\n"
    return "".join(lines[: snippet.start_line]) + body + "".join(lines[snippet.end_line - 1 :])


def _grading_ignore(_directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in {".git", "__pycache__", ".DS_Store"} or n.endswith(".pyc")}


def _log_name(test_path: Path) -> str | None:
    """The log file a test script writes (its one ``'*.log'`` literal), or None."""
    try:
        stamp = test_path.stat().st_mtime_ns
    except OSError:
        return None
    return _log_name_of(test_path, stamp)


@functools.lru_cache(maxsize=256)
def _log_name_of(test_path: Path, _stamp: int) -> str | None:
    try:
        text = test_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    names: list[str] = sorted(set(_LOG_LITERAL.findall(text)))
    if len(names) == 1:
        return names[0]
    if f"{test_path.stem}.log" in names:
        return f"{test_path.stem}.log"
    return None


def _log_file(paper: Paper, snippet: Snippet) -> str | None:
    """Where ``snippet``'s test writes its log, relative to the repository (``logs/`` beside
    the test), or None if the test keeps no log."""
    test = snippet.test_file or paper.test_file
    name = _log_name(paper.root / test)
    if name is None:
        return None
    return (Path(test).parent / "logs" / name).as_posix()


def _paper_pages(path: Path) -> tuple[tuple[str, str], ...]:
    try:
        return _pages_of(path, path.stat().st_mtime_ns)
    except OSError:
        return ()


@functools.lru_cache(maxsize=64)
def _pages_of(path: Path, _stamp: int) -> tuple[tuple[str, str], ...]:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, json.JSONDecodeError):
        return ()
    if isinstance(data, dict):
        items = sorted(data.items(), key=lambda kv: (not kv[0].isdigit(), _num(kv[0]), kv[0]))
        return tuple((str(k), str(v)) for k, v in items)
    if isinstance(data, list):
        return tuple((str(i + 1), str(v)) for i, v in enumerate(data))
    return (("1", str(data)),)


def _num(text: str) -> int:
    return int(text) if text.isdigit() else 0


def render_paper(path: Path, title: str) -> str:
    """``paper.json`` (page number -> page text) as Markdown: one ``##`` heading per page."""
    pages = _paper_pages(path)
    if not pages:
        return f"# {title}\n\n(no paper text: {path.name} is missing or unreadable)\n"
    parts = [f"# {title}\n"]
    parts += [f"## Page {k}\n\n{text.strip()}\n" for k, text in pages]
    return "\n".join(parts)


# one task ------------------------------------------------------------------------------------
def _candidates(repo: Path, rel: str, *, what: str, info: Path, line: int | None) -> list[str]:
    """Files ``rel`` may mean inside the repository: the path as named if it exists, then every
    other file with the same name (info.json's names are sometimes stale, and some repositories
    hold an unmasked copy of the goal file beside the masked one)."""
    clean = rel.strip().removeprefix("./")
    if ".." in Path(clean).parts or clean.startswith("/"):
        raise MetadataError(f"{what} {rel!r} leaves the repository", file=info, line=line)
    found = [clean] if (repo / clean).is_file() else []
    if repo.is_dir():
        stem = Path(clean).name
        found += [r for r in loader.walk_files(repo) if Path(r).name == stem and r != clean]
    return found or [clean]


def _unit_test(repo: Path, impl: _Impl, position: int) -> str:
    """The implementation's unit test: as named, else ``unit_test/unit_test_<k>.py`` for the
    implementation's place, else the only test script."""
    named = impl.unit_test_file
    if named and (repo / named).is_file():
        return named
    for k in (impl.index, position):
        guess = f"{TEST_DIR}/unit_test_{k}.py"
        if (repo / guess).is_file():
            return guess
    scripts = sorted(p.name for p in (repo / TEST_DIR).glob("unit_test*.py"))
    if len(scripts) == 1:
        return f"{TEST_DIR}/{scripts[0]}"
    return named or f"{TEST_DIR}/unit_test_{position}.py"


def _changed_functions(masked: str, golden: str) -> list[tuple[str, str | None]]:
    """Functions (name, class) whose code differs between the masked and the golden file."""

    def table(text: str) -> dict[tuple[str, str | None], str]:
        out: dict[tuple[str, str | None], str] = {}
        tree = pr.parse(text)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out[(node.name, None)] = ast.dump(node)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        out[(item.name, node.name)] = ast.dump(item)
        return out

    try:
        m, g = table(masked), table(golden)
    except SyntaxError:
        return []
    return [key for key in m if key in g and m[key] != g[key]]


def _most_masked(
    masked: str, golden: str, changed: list[tuple[str, str | None]]
) -> tuple[str, str | None]:
    """Of the functions that differ, the one that lost the most code lines to the mask (an
    implementation without ``goal_function``; other differences are incidental edits)."""

    def lost(key: tuple[str, str | None]) -> int:
        try:
            a = pr.align(masked, golden, key[0], key[1])
        except pr.RegionError:
            return -1
        kept = sum(is_code_line(x) for x in pr.split_lines(a.masked.text(pr.split_lines(masked))))
        had = sum(is_code_line(x) for x in pr.split_lines(a.reference.text(pr.split_lines(golden))))
        return had - kept

    return max(changed, key=lost)


_FIXTURE = re.compile(r"^[\w./-]+\.(pt|pth|pkl|pickle|npy|npz|json|jsonl|csv|tsv|bin|safetensors)$")


def _absent_fixtures(repo: Path, test_file: str, text: str) -> list[str]:
    """Data files the test names as string literals that are nowhere in the repository (looked
    up from the repository root, the test's folder, and by file name)."""
    try:
        tree = pr.parse(text)
    except SyntaxError:
        return []
    names = {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and _FIXTURE.match(n.value)
    }
    basenames = {Path(r).name for r in loader.walk_files(repo)}
    here = (repo / test_file).parent
    return sorted(
        n
        for n in names
        if not (repo / n).exists() and not (here / n).exists() and Path(n).name not in basenames
    )


def _availability(
    repo: Path,
    test_file: str,
    *,
    missing: set[str],
    repo_rel: str,
) -> str | None:
    """Why an implementation cannot run on a CPU machine without network, from its files."""
    test = repo / test_file
    if not test.is_file():
        return f"its unit test {test_file} is not in the repository"
    text = test.read_text(encoding="utf-8", errors="replace")
    lacking = sorted(
        m.removeprefix(repo_rel)
        for m in missing
        if m.startswith(repo_rel) and Path(m).name in text and not m.endswith(PAPER_PDF)
    )
    if lacking:
        return f"files the test reads are missing from this copy: {', '.join(lacking)}"
    here = Path(test_file).parent
    named = [
        rel
        for rel in loader.walk_files(repo)
        if Path(rel).name in text and Path(rel).suffix != ".py" and _is_lfs_pointer(repo / rel)
    ]
    # A name the test uses may exist in several folders: the test's own folder speaks for it.
    lfs = sorted(
        rel
        for rel in named
        if Path(rel).parent == here
        or rel in text
        or not any(Path(o).name == Path(rel).name and Path(o).parent == here for o in named)
    )
    absent = _absent_fixtures(repo, test_file, text)
    if absent:
        return (
            "test fixtures are not in the repository: "
            + ", ".join(absent[:6])
            + (f" and {len(absent) - 6} more" if len(absent) > 6 else "")
        )
    if lfs:
        return (
            "test fixtures are Git LFS pointers whose content is not in the repository: "
            + ", ".join(lfs[:6])
            + (f" and {len(lfs) - 6} more" if len(lfs) > 6 else "")
        )
    if _MODEL_HUB.search(text):
        return "the test downloads a pretrained model from a model hub (no network in sandboxes)"
    if _CUDA.search(text) and "is_available" not in text:
        return "the test needs a CUDA GPU"
    return None


def load_task(
    folder: Path,
    overlay: Overlay,
    *,
    missing: set[str] | None = None,
    submodules: set[str] | None = None,
) -> Paper:
    """One task folder as a paper with one snippet per implementation.

    ``missing``/``submodules``: files the installed copy lacks and empty submodule folders,
    relative to ``folder`` (see :func:`rcb_env.catalog.fetch.verified_gaps`).

    Raises:
        TaskLoadError: ``info.json`` is missing or malformed, or an implementation's function
            cannot be found or aligned (names file, line and implementation).
    """
    missing = missing or set()
    submodules = submodules or set()
    info = folder / INFO
    try:
        text = info.read_text(encoding="utf-8")
    except OSError as exc:
        raise MissingTaskFileError(f"cannot read {INFO}: {exc.strerror}", file=info) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetadataError(f"not valid JSON: {exc.msg}", file=info, line=exc.lineno) from None
    if not isinstance(data, dict):
        raise MetadataError("must be a JSON object", file=info, line=1)
    raw_impls = data.get("implementations")
    if not isinstance(raw_impls, list) or not raw_impls:
        raise MetadataError(
            "needs a non-empty 'implementations' list",
            file=info,
            line=_json_line(text, "implementations") or 1,
        )
    repo_name = data.get("repo_folder_name")
    if not isinstance(repo_name, str) or not (folder / repo_name).is_dir():
        others = [
            d.name
            for d in folder.iterdir()
            if d.is_dir() and d.name not in {GOLDEN_DIR, "__pycache__"} and d.name[0] != "."
        ]
        if len(others) != 1:
            raise MetadataError(
                f"repo_folder_name {repo_name!r} is not a folder here (found: {sorted(others)})",
                file=info,
                line=_json_line(text, "repo_folder_name"),
            )
        repo_name = others[0]
    repo = folder / repo_name
    repo_rel = f"{repo_name}/"
    empty = repo_name in submodules or not any(repo.iterdir())
    title = data.get("paper_name")
    meta = PaperMeta(
        id=folder.name,
        title=str(title) if title else None,
        arxiv_abs=str(data["paper_url"]) if data.get("paper_url") else None,
        github_url=str(data["repo_url"]) if data.get("repo_url") else None,
    )
    patterns = (*HIDDEN, f"/{TEST_DIR}/", loader.OVERLAY_FILE, *overlay.hidden_paths)
    offsets = [m.start() for m in re.finditer(r'"instruction"', text)]
    impls = [
        _Impl(raw, i + 1, info, text, offsets[i] if i < len(offsets) else 0)
        for i, raw in enumerate(raw_impls)
    ]
    names = [f"{impl.position}-{impl.goal_function or 'function'}" for impl in impls]
    slugs = dict(zip(names, [loader.slugify(n) for n in names], strict=True))
    snippets: list[Snippet] = []
    annotated: dict[str, str] = {}
    for impl, name in zip(impls, names, strict=True):
        snippet = _snippet(
            folder, repo, impl, name, slugs[name], empty=empty, missing=missing, repo_rel=repo_rel
        )
        if not impl.goal_function and snippet.symbol:  # found by comparing the files
            named = f"{impl.position}-{snippet.symbol.rsplit('.', 1)[-1]}"
            snippet = snippet.model_copy(update={"name": named, "slug": loader.slugify(named)})
        snippets.append(snippet)
        if snippet.masked_text:
            annotated.setdefault(snippet.file, snippet.masked_text)
    goal_files = {s.file for s in snippets}
    copies = _golden_copies(folder.resolve(), repo.resolve()) if not empty else ()
    twins = _function_copies(repo, snippets, skip={*goal_files, *copies}) if not empty else ()
    patterns = (*patterns, *(f"/{c}" for c in (*copies, *twins)))
    hidden = tuple(
        rel
        for rel in (loader.walk_files(repo) if not empty else ())
        if rel not in goal_files and loader.is_hidden(rel, patterns)
    )
    env = {"PYTHONPATH": ".", **overlay.env}
    return Paper(
        meta=meta,
        source=LmrBench.name,
        root=repo.resolve(),
        slug=loader.slugify(folder.name),
        paper_file=PAPER_JSON,
        test_file=snippets[0].test_file or f"{TEST_DIR}/unit_test_1.py",
        annotated_files=tuple(AnnotatedFile(path=p, text=t) for p, t in annotated.items()),
        hidden_patterns=patterns,
        hidden_paths=hidden,
        overlay=overlay.model_copy(update={"env": env}),
        snippets=tuple(snippets),
        excluded_paths=copies,
        unavailable=(
            f"empty repository: {repo_name}/ is a git submodule link whose content is not in "
            "the benchmark"
            if empty
            else None
        ),
    )


def _snippet(
    folder: Path,
    repo: Path,
    impl: _Impl,
    name: str,
    slug: str,
    *,
    empty: bool,
    missing: set[str],
    repo_rel: str,
) -> Snippet:
    info = folder / INFO
    where = _Where(file=info, line=impl.line, snippet=name)
    golden_rel = impl.golden_file
    golden = folder / golden_rel
    if not golden.is_file():
        raise MissingTaskFileError(f"golden file {golden_rel} does not exist", **where)
    golden_text = golden.read_text(encoding="utf-8", errors="replace")
    goals = _candidates(repo, impl.goal_file, what="goal_file", info=info, line=impl.line)
    goal = goals[0]
    test = _unit_test(repo, impl, impl.position)
    function, class_name = impl.goal_function, impl.class_name

    def make(weight: int, **region: Any) -> Snippet:
        return Snippet(
            paper_id=folder.name,
            name=name,
            slug=slug,
            file=goal,
            depth=0,
            parent=None,
            children=(),
            weight=weight,
            distinct_lines=weight,
            test_file=test,
            instruction=impl.instruction or None,
            **region,
        )

    if empty:
        # Nothing to mask or run; keep the implementation listed, weighed by the golden file.
        return make(
            _golden_weight(golden_text, function, class_name),
            start_line=0,
            end_line=1,
            indent="",
            reference_body="",
            masked_text="",
            placeholder="",
            symbol=f"{class_name}.{function}" if class_name else function or None,
        )
    if not (repo / goal).is_file():
        raise MissingTaskFileError(f"goal file {impl.goal_file} is not in {repo.name}/", **where)
    errors: list[str] = []
    for goal in goals:
        masked_text = (repo / goal).read_text(encoding="utf-8", errors="replace")
        if not function:
            changed = _changed_functions(masked_text, golden_text)
            if not changed:
                errors.append(f"{goal} does not differ from {golden_rel} in any function")
                continue
            function, class_name = _most_masked(masked_text, golden_text, changed)
        try:
            a = pr.align(masked_text, golden_text, function, class_name)
            break
        except pr.RegionError as exc:
            errors.append(f"{goal} against {golden_rel}: {exc}")
    else:
        what = "no goal_function, and no file" if not impl.goal_function else "no file"
        raise TaskLoadError(
            f"{what} named {Path(impl.goal_file).name} has a masked function: " + "; ".join(errors),
            **where,
        )
    symbol = f"{class_name}.{function}" if class_name else function
    m_lines, g_lines = pr.split_lines(masked_text), pr.split_lines(golden_text)
    placeholder = a.masked.text(m_lines)
    reference = pr.reindent(a.reference.text(g_lines), a.reference.indent, a.masked.indent)
    _check_roundtrip(masked_text, a, reference, golden_text, function, class_name, where)
    weight = sum(is_code_line(line) for line in pr.split_lines(reference))
    reason = _availability(repo, test, missing=missing, repo_rel=repo_rel)
    return make(
        weight,
        start_line=a.masked.before,
        end_line=a.masked.after,
        indent=a.masked.indent,
        reference_body=reference,
        masked_text=masked_text,
        placeholder=placeholder,
        symbol=symbol,
        unavailable=reason,
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
