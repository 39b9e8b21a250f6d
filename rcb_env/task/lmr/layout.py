"""The LMR-Bench layout: file names, what is hidden, and the task folders' shapes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypedDict

from rcb_env.errors import MetadataError
from rcb_env.task import pyregion as pr
from rcb_env.task.models import Snippet

#: The task source's registry name (``TaskSource.name``).
SOURCE_NAME = "lmr"
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


def _splice(snippet: Snippet, body: str) -> str:
    """The masked goal file with ``body`` in the snippet's region, every other byte kept."""
    lines = pr.split_lines(snippet.masked_text)
    if body and not body.endswith("\n"):
        body += "\n"
    return "".join(lines[: snippet.start_line]) + body + "".join(lines[snippet.end_line - 1 :])
