"""What a verdict depended on, named so that a run can record it and a regrading can tell what
changed since: the grader's version (rcb-env's, and the content of the code that grades) and each
snippet's test file (its content)."""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path

from rcb_env import guest
from rcb_env.task.models import Paper, Snippet
from rcb_env.task.source import source_for

__all__ = ["grader_version", "hash_of_tests"]

#: The code a verdict comes from: grading's host side and what runs inside the sandbox.
_GRADER_CODE = (Path(__file__).parent, Path(guest.__file__).parent)


@functools.cache
def grader_version() -> str:
    """``<rcb-env version>+<hash of the grading code>``: two runs graded by the same code have
    the same one, so a regrading can tell a verdict that changed with the grader from one that
    changed with the task."""
    try:
        version = metadata.version("rcb-env")
    except metadata.PackageNotFoundError:  # a source tree used without installing it
        version = "unknown"
    digest = hashlib.sha256()
    for folder in _GRADER_CODE:
        for path in sorted(folder.glob("*.py")):
            digest.update(f"{folder.name}/{path.name}\0".encode())
            digest.update(path.read_bytes())
    return f"{version}+{digest.hexdigest()[:12]}"


def hash_of_tests(paper: Paper, snippet: Snippet) -> str:
    """The content hash of the test file that grades ``snippet`` (``missing`` when the paper
    has none)."""
    path = paper.root / source_for(paper).test_file(paper, snippet)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return "missing"
