"""The paper as the agent reads it: whole, as an outline of headings, or one section.

Headings are parsed, not pattern-matched: a LaTeX sectioning command's title is read up to its
balanced closing brace (nested braces, escaped braces, math, a title spread over lines), and what
follows it on the line (``\\label{...}``, a comment) is not part of it. Markdown has ATX (``#``)
and setext (underlined) headings; fenced code is skipped.
``tests/task/test_paper_headings.py`` holds the real-paper forms this must read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LATEX_LEVEL = {
    "part": 0,
    "chapter": 1,
    "section": 2,
    "subsection": 3,
    "subsubsection": 4,
    "paragraph": 5,
    "subparagraph": 6,
}
_LATEX_COMMAND = re.compile(r"^\s*\\(" + "|".join(_LATEX_LEVEL) + r")\*?(?![A-Za-z])\s*")
_LABEL = re.compile(r"\\label\s*\{[^{}]*\}")
_MD_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_MD_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
#: A title may continue on this many following lines before its brace must close.
_MAX_TITLE_LINES = 4


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    line: int  # 0-based index of the heading line


def _balanced(text: str, start: int, open_: str, close: str) -> int | None:
    """Index just past the ``close`` that balances the ``open_`` at ``start`` (backslash-escaped
    delimiters and ``%`` comments skipped), or None if it never closes."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "%":
            newline = text.find("\n", i)
            if newline < 0:
                return None
            i = newline + 1
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _latex_heading(lines: list[str], i: int) -> tuple[int, str] | None:
    m = _LATEX_COMMAND.match(lines[i])
    if m is None:
        return None
    text = "\n".join(lines[i : i + _MAX_TITLE_LINES])
    pos = m.end()
    if pos < len(text) and text[pos] == "[":  # a short (table-of-contents) title
        end = _balanced(text, pos, "[", "]")
        if end is None:
            return None
        pos = end
        while pos < len(text) and text[pos] in " \t":
            pos += 1
    if pos >= len(text) or text[pos] != "{":
        return None
    end = _balanced(text, pos, "{", "}")
    if end is None:
        return None
    raw = text[pos + 1 : end - 1]
    raw = re.sub(r"(?<!\\)%[^\n]*", "", raw)  # comments inside a multi-line title
    title = " ".join(_LABEL.sub("", raw).split())
    return _LATEX_LEVEL[m.group(1)], title


def headings(text: str, markdown: bool) -> list[Heading]:
    out = []
    lines = text.splitlines()
    in_code = False
    for i, line in enumerate(lines):
        if markdown:
            if _FENCE.match(line):
                in_code = not in_code
                continue
            if in_code:
                continue
            m = _MD_ATX.match(line)
            if m:
                out.append(Heading(len(m.group(1)), (m.group(2) or "").strip(), i))
                continue
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            under = _MD_SETEXT.match(nxt)
            if (
                under
                and line.strip()
                and not _MD_SETEXT.match(line)
                and not line.startswith("    ")
            ):
                out.append(Heading(1 if under.group(1)[0] == "=" else 2, line.strip(), i))
        else:
            found = _latex_heading(lines, i)
            if found is not None:
                out.append(Heading(found[0], found[1], i))
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
