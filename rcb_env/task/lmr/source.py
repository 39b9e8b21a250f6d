"""LMR-Bench as a task source: the masked workspace, the grading copy, the body, and the
verdict with the test's own log."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from rcb_env.catalog.fetch import verified_gaps
from rcb_env.errors import MissingTaskFileError, TaskLoadError
from rcb_env.task import loader
from rcb_env.task.discovery import expected_tests
from rcb_env.task.lmr.layout import (
    _LOG_LIMIT,
    _LOG_LITERAL,
    INFO,
    PAPER_JSON,
    PAPER_PDF,
    SOURCE_NAME,
    _splice,
    _task_folders,
)
from rcb_env.task.lmr.paper_text import render_paper
from rcb_env.task.lmr.tasks import load_task
from rcb_env.task.models import (
    LoadFailure,
    Overlay,
    Paper,
    Pset,
    Snippet,
)
from rcb_env.task.reach import Reach, reach
from rcb_env.task.regions import extract_span
from rcb_env.task.source import Guarded, Judged, TaskSource, TaskStatement
from rcb_env.untrusted import read_beneath
from rcb_env.verdicts import FailureKind, Outcome, Verdict


class LmrBench(TaskSource):
    """LMR-Bench task folders (``info.json`` + ``golden_files/`` + the masked repository)."""

    name = SOURCE_NAME

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
