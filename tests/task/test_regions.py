"""The masked region read back from an edited file (:func:`rcb_env.task.regions.extract_region`)."""

from __future__ import annotations

from rcb_env.task.regions import extract_region

MASKED = "def f(xs):\n    total = 0    \n    \n    # TODO: fill in\n    \n    return total \n"
TODO = ["    # TODO: fill in\n"]


def test_a_file_stripped_of_trailing_whitespace_gives_the_body_alone() -> None:
    """An agent CLI's write tool (Claude Code's) strips trailing whitespace from every line of
    the file it writes: the lines around the block changed only in that, so the body is still
    what stands in the block's place, and nothing counts as edited outside it."""
    edited = (
        "def f(xs):\n    total = 0\n\n    for x in xs:\n        total += x\n\n    return total\n"
    )
    assert extract_region(MASKED, TODO, edited) == (
        "    for x in xs:\n        total += x\n",
        False,
    )


def test_a_changed_line_outside_still_counts() -> None:
    edited = MASKED.replace("    # TODO: fill in\n", "    total = sum(xs)\n").replace(
        "return total", "return total + 1"
    )
    assert extract_region(MASKED, TODO, edited) == ("    total = sum(xs)\n", True)
