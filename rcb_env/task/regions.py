"""Where a masked region stands in an agent's edited file: the candidate body is read back by
aligning the edited text with the masked one (any layout: paper2code's TODO block, LMR-Bench's
line span)."""

from __future__ import annotations

from rcb_env.guest.protocol import extract_span, split_lines

__all__ = ["extract_region", "extract_span"]


def extract_region(masked_text: str, placeholder: list[str], edited_text: str) -> tuple[str, bool]:
    """What now stands where the ``placeholder`` lines stood in ``masked_text``.

    Lines are aligned with difflib; the body is everything between the last unchanged line before
    the placeholder and the first unchanged line after it. Returns the body and whether the file
    was also changed outside that region (such edits are ignored for grading).

    Raises:
        ValueError: ``masked_text`` does not contain the placeholder lines.
    """
    masked = split_lines(masked_text)
    want = [line.rstrip("\r\n") for line in placeholder]
    n = len(want)
    start = next(
        (
            i
            for i in range(len(masked) - n + 1)
            if [line.rstrip("\r\n") for line in masked[i : i + n]] == want
        ),
        None,
    )
    if start is None or n == 0:
        raise ValueError("the masked text has no placeholder block")
    return extract_span(masked_text, start, start + n, edited_text)
