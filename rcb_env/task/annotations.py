"""The ``<paper2code>`` annotation grammar as pure functions over text.

Lines are split on ``\\n`` only and keep their endings, so that masking and re-insertion work on
the exact bytes of the file (``\\r\\n`` files and files without a final newline round-trip).
Line numbers in this module's public results are 1-based, as an editor shows them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rcb_env.errors import AnnotationError, DuplicateSnippetError
from rcb_env.guest.protocol import split_lines

START_RE = re.compile(r'^\s*#\s*<paper2code\s+name="([^"]+)">\s*$')
END_RE = re.compile(r'^\s*#\s*</paper2code\s+name="([^"]+)">\s*$')
# Anything in a comment that looks like a marker but does not match the strict grammar.
_MARKERISH_RE = re.compile(r"#.*</?\s*paper2code\b")


def _bare(line: str) -> str:
    return line[:-1] if line.endswith("\n") else line


def _indent_width(line: str) -> int:
    bare = _bare(line)
    return len(bare) - len(bare.lstrip())


def is_code_line(line: str) -> bool:
    """The line-weight rule: not blank, and the first non-space character is not ``#``."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def is_marker(line: str) -> bool:
    bare = _bare(line)
    return bool(START_RE.match(bare) or END_RE.match(bare))


@dataclass(frozen=True)
class Span:
    """Where one snippet stands in its file (0-based line indexes of its two marker lines)."""

    name: str
    start: int
    end: int
    depth: int
    parent: str | None

    @property
    def start_line(self) -> int:
        return self.start + 1

    @property
    def end_line(self) -> int:
        return self.end + 1


def parse_spans(text: str, file: str) -> tuple[Span, ...]:
    """All snippets of one file, in order of their start markers.

    Raises:
        AnnotationError: a marker is malformed, unmatched, crossed, mis-indented or unclosed.
        DuplicateSnippetError: two snippets of the file share a name.
    """
    lines = split_lines(text)
    # stack entries: (name, start index, indentation width, parent name)
    stack: list[tuple[str, int, int, str | None]] = []
    first_seen: dict[str, int] = {}
    spans: list[Span] = []
    for i, line in enumerate(lines):
        bare = _bare(line)
        start = START_RE.match(bare)
        end = END_RE.match(bare)
        if start:
            name = start.group(1)
            if name in first_seen:
                raise DuplicateSnippetError(
                    f"duplicate snippet name (first opened at line {first_seen[name] + 1})",
                    file=file,
                    line=i + 1,
                    snippet=name,
                )
            first_seen[name] = i
            parent = stack[-1][0] if stack else None
            stack.append((name, i, _indent_width(line), parent))
        elif end:
            name = end.group(1)
            if not stack:
                raise AnnotationError(
                    "end marker but no snippet is open", file=file, line=i + 1, snippet=name
                )
            open_name, open_at, open_indent, parent = stack[-1]
            if open_name != name:
                raise AnnotationError(
                    f'end marker crosses snippet "{open_name}" (opened at line {open_at + 1}), '
                    "which must close first",
                    file=file,
                    line=i + 1,
                    snippet=name,
                )
            if _indent_width(line) != open_indent:
                raise AnnotationError(
                    f"end marker indented by {_indent_width(line)}, its start marker "
                    f"(line {open_at + 1}) by {open_indent}",
                    file=file,
                    line=i + 1,
                    snippet=name,
                )
            stack.pop()
            spans.append(Span(name=name, start=open_at, end=i, depth=len(stack), parent=parent))
        elif _MARKERISH_RE.search(bare):
            raise AnnotationError(
                "malformed marker: a marker line must be exactly "
                '# <paper2code name="..."> or # </paper2code name="..."> and nothing else',
                file=file,
                line=i + 1,
            )
    if stack:
        name, open_at, _, _ = stack[-1]
        raise AnnotationError("snippet is never closed", file=file, line=open_at + 1, snippet=name)
    spans.sort(key=lambda s: s.start)
    return tuple(spans)


def reference_body(text: str, span: Span) -> str:
    """The exact text strictly between the span's two markers."""
    return "".join(split_lines(text)[span.start + 1 : span.end])


def weight(text: str, span: Span) -> int:
    """Code lines strictly between the markers (nested children's lines included)."""
    return sum(1 for line in split_lines(text)[span.start + 1 : span.end] if is_code_line(line))


def distinct_lines(text: str, span: Span, spans: tuple[Span, ...]) -> int:
    """Code lines of the span that belong to no child span (each code line counted once)."""
    lines = split_lines(text)
    inner = set(range(span.start + 1, span.end))
    for other in spans:
        if other.parent == span.name:
            inner -= set(range(other.start, other.end + 1))
    return sum(1 for i in inner if is_code_line(lines[i]))


def _min_indent(lines: list[str]) -> str:
    best: str | None = None
    for line in lines:
        bare = _bare(line)
        if not bare.strip():
            continue
        indent = bare[: len(bare) - len(bare.lstrip())]
        if best is None or len(indent) < len(best):
            best = indent
    return best or ""


def todo_lines(name: str, line_count: int, indent: str, newline: str = "\n") -> list[str]:
    """The two comment lines that stand in for a masked snippet."""
    return [
        f'{indent}# TODO: Implement block "{name}"{newline}',
        f"{indent}# Approximately {line_count} line(s) of code.{newline}",
    ]


def strip_markers(text: str) -> str:
    """Delete every marker line, keeping everything else byte for byte."""
    return "".join(line for line in split_lines(text) if not is_marker(line))


def mask(text: str, span: Span) -> str:
    """What the solver sees: the span (markers included) replaced by two TODO comment lines at
    the span's minimum indentation, then every other marker line removed."""
    lines = split_lines(text)
    block = lines[span.start : span.end + 1]
    start_line = lines[span.start]
    newline = "\r\n" if start_line.endswith("\r\n") else "\n"
    replacement = todo_lines(span.name, weight(text, span), _min_indent(block), newline)
    masked = lines[: span.start] + replacement + lines[span.end + 1 :]
    return strip_markers("".join(masked))


def insert(text: str, span: Span, body: str) -> str:
    """Replace everything strictly between the span's markers in the ORIGINAL text by ``body``.

    All markers stay (they are comments). A non-empty body gets a final newline if it lacks one,
    so the end marker stays on its own line.
    """
    lines = split_lines(text)
    if body and not body.endswith("\n"):
        body += "\n"
    return "".join(lines[: span.start + 1]) + body + "".join(lines[span.end :])


def min_indent(text: str, span: Span) -> str:
    return _min_indent(split_lines(text)[span.start : span.end + 1])
