"""The LMR-Bench layout (Yan et al., 2025) as a task source.

One folder per task: ``info.json`` (the paper, the repository folder, and ``implementations``:
each a function to write, with its instruction, goal file, goal function, class, golden file and
unit test), ``golden_files/*_golden.py`` (whole-file references) and the repository with the goal
functions masked (``paper.json`` page texts, ``paper.pdf``, ``unit_test/unit_test_<k>.py``).

Each implementation is one episode. There are no markers: the region is found by parsing
(:mod:`rcb_env.task.pyregion`: the masked function against the golden one), the reference body
is the golden function's, re-indented to the masked file, and a candidate goes back into the
masked file with every other byte kept (never the golden file copied: some golden files are
older versions of the file). Weight: the reference body's code lines (not blank, not a ``#``
comment), the ResearchCodeBench rule.

The agent sees the repository without ``unit_test/`` (unless the goal file is there: three tasks
put the function in the test script), ``__pycache__`` (some hold compiled golden code) or any
golden file. Grading runs the implementation's unit test the official way (``cd <repo>;
PYTHONPATH=. python unit_test/unit_test_<k>.py``) under rcb-env's runner; it passes only if the
program exits 0, every unittest test passes and the test's own log has at least one "Passed"
line and no "Failed" line. The official rule (the log alone, exit status ignored) is kept
beside it (``official_pass``).
"""

from __future__ import annotations

from rcb_env.task.lmr.layout import GOLDEN_DIR, HIDDEN, INFO, PAPER_JSON, PAPER_PDF, TEST_DIR
from rcb_env.task.lmr.paper_text import render_paper
from rcb_env.task.lmr.source import LmrBench
from rcb_env.task.lmr.tasks import load_task

__all__ = [
    "GOLDEN_DIR",
    "HIDDEN",
    "INFO",
    "PAPER_JSON",
    "PAPER_PDF",
    "TEST_DIR",
    "LmrBench",
    "load_task",
    "render_paper",
]
