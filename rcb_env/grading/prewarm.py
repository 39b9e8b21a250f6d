"""Starting the next paper's warm process while the current paper's episodes are graded.

A warm process takes seconds to start (it imports torch, jax or pandas). When a run walks
papers in order, the first grading of each paper would wait for that import while a core
idles; :class:`Prewarmer` starts the next paper's process in a background thread as soon as
the current paper's first episode begins, so the import overlaps the current paper's work.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterable

from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.logs import get_logger
from rcb_env.sandbox.base import Executor
from rcb_env.task.models import Paper

log = get_logger(__name__)


class Prewarmer:
    """``starting(paper)`` when work on ``paper`` begins: the paper after it in ``order`` gets
    its warm process started in the background (once). ``close()`` waits for those starts
    (call it before closing the factory). Does nothing for executors without a warm path."""

    def __init__(
        self,
        executor_for: Callable[[Paper], Executor],
        grading: GradingConfig,
        order: Iterable[Paper],
    ) -> None:
        self._executor_for = executor_for
        self._grading = grading
        papers: list[Paper] = []
        for paper in order:
            if not papers or papers[-1].id != paper.id:
                papers.append(paper)
        self._next = {a.id: b for a, b in itertools.pairwise(papers) if a.id != b.id}
        self._claimed: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.started: list[str] = []
        """Papers whose warm process a background start made live."""

    def starting(self, paper: Paper) -> None:
        following = self._next.get(paper.id)
        if following is None:
            return
        with self._lock:
            if following.id in self._claimed:
                return
            self._claimed.add(following.id)
            thread = threading.Thread(
                target=self._warm, args=(following,), name="rcb-prewarm", daemon=True
            )
            self._threads.append(thread)
        thread.start()

    def _warm(self, paper: Paper) -> None:
        with contextlib.suppress(Exception):
            grader = Grader(self._grading, executor=self._executor_for(paper))
            if grader.prewarm(paper):
                with self._lock:
                    self.started.append(paper.id)
                log.debug("warm process started ahead", paper=paper.id)

    def close(self) -> None:
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()
