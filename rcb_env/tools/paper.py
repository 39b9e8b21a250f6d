"""The paper as the agent reads it: whole, as an outline of headings, or one section."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LATEX_HEADING = re.compile(
    r"^\s*\\(part|chapter|section|subsection|subsubsection|paragraph)\*?\s*(?:\[[^\]]*\])?\s*\{(.*)\}"
)
_LATEX_LEVEL = {
    "part": 0,
    "chapter": 1,
    "section": 2,
    "subsection": 3,
    "subsubsection": 4,
    "paragraph": 5,
}
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    line: int  # 0-based index of the heading line


def headings(text: str, markdown: bool) -> list[Heading]:
    out = []
    in_code = False
    for i, line in enumerate(text.splitlines()):
        if markdown:
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            m = _MD_HEADING.match(line)
            if m and not in_code:
                out.append(Heading(len(m.group(1)), m.group(2).strip(), i))
        else:
            m = _LATEX_HEADING.match(line)
            if m:
                out.append(Heading(_LATEX_LEVEL[m.group(1)], m.group(2).strip(), i))
    return out


def outline(text: str, markdown: bool) -> str:
    hs = headings(text, markdown)
    if not hs:
        return "(the paper has no section headings)"
    base = min(h.level for h in hs)
    return "\n".join(f"{'  ' * (h.level - base)}- {h.title}" for h in hs)


def section(text: str, markdown: bool, query: str) -> str | None:
    """The section whose heading matches ``query`` (exact, then substring, case-insensitive),
    up to the next heading of the same or a higher level."""
    hs = headings(text, markdown)
    q = query.strip().lower()
    match = next((h for h in hs if h.title.lower() == q), None) or next(
        (h for h in hs if q in h.title.lower()), None
    )
    if match is None:
        return None
    lines = text.splitlines()
    end = next((h.line for h in hs if h.line > match.line and h.level <= match.level), len(lines))
    return "\n".join(lines[match.line : end]).rstrip() + "\n"
