"""The paper of an LMR-Bench task as text: its pages from ``paper.json``."""

from __future__ import annotations

import functools
import json
from pathlib import Path


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
