"""The published ResearchCodeBench layout (``paper2code``) as a task source.

Snippets are marked in the code with ``# <paper2code name="...">`` comment pairs; masking replaces
a snippet's lines with two TODO comment lines; grading inserts a body between the markers of a
pristine copy and runs ``paper2code_test.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rcb_env.task import annotations as ann
from rcb_env.task import loader
from rcb_env.task.discovery import expected_tests
from rcb_env.task.models import Paper, Pset, Snippet
from rcb_env.task.regions import extract_region
from rcb_env.task.source import TaskSource, TaskStatement


def _copy_ignore(_directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in {".git", "__pycache__", loader.OVERLAY_FILE}}


class Paper2Code(TaskSource):
    """``papers.yaml`` + paper folders with ``paper2code_test.py`` and marked snippets."""

    name = "paper2code"

    @classmethod
    def detect(cls, root: Path) -> bool:
        return (root / loader.PAPERS_YAML).is_file() or (root / loader.TEST_FILE).is_file()

    def load(
        self, root: Path, *, papers: set[str] | None = None, overlay: Path | None = None
    ) -> Pset:
        return loader.load_paper2code(root, papers=papers, overlay=overlay)

    def write_workspace(self, paper: Paper, snippet: Snippet, dest: Path) -> None:
        # The snippet's file is masked; every other annotated file loses its marker lines.
        annotated = {f.path: f.text for f in paper.annotated_files}
        for rel in loader.walk_files(paper.root):
            if loader.is_hidden(rel, paper.hidden_patterns):
                continue
            src = paper.root / rel
            if src.is_symlink():
                continue  # a link could point at a hidden file; never copy one
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if rel == snippet.file:
                target.write_bytes(snippet.masked_text.encode())
            elif rel in annotated:
                target.write_bytes(ann.strip_markers(annotated[rel]).encode())
            else:
                shutil.copyfile(src, target)

    def write_grading_copy(self, paper: Paper, snippet: Snippet, body: str, dest: Path) -> None:
        shutil.copytree(paper.root, dest, ignore=_copy_ignore, symlinks=True)
        inserted = ann.insert(paper.file_text(snippet.file), snippet.span, body)
        (dest / snippet.file).write_bytes(inserted.encode())

    def extract_body(self, paper: Paper, snippet: Snippet, edited: str) -> tuple[str, bool]:
        todo = ann.todo_lines(snippet.name, snippet.weight, snippet.indent)
        try:
            return extract_region(snippet.masked_text, todo, edited)
        except ValueError:
            raise ValueError(f"masked text of {snippet.id} has no TODO block") from None

    def expected_tests(self, paper: Paper) -> tuple[str, ...]:
        source = (paper.root / paper.test_file).read_text(encoding="utf-8", errors="replace")
        return expected_tests(source)

    def statement(self, paper: Paper, snippet: Snippet) -> TaskStatement:
        return TaskStatement(
            title=paper.meta.title or paper.id,
            file=snippet.file,
            placeholder=snippet.todo_body(),
            indent=snippet.indent,
            intro="implement one missing block of the code that accompanies the paper",
            instructions=(
                "Replace them with a working implementation at the same indentation, using the "
                "paper and the rest of the repository. Only that block is graded, by the paper's "
                "tests (hidden from you); changes elsewhere are ignored. When done, call submit."
            ),
            context_files=paper.context_files,
            paper_file=paper.paper_file,
            paper_is_markdown=paper.paper_file.endswith(".md"),
        )
