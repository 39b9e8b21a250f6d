"""An eval run's rounds of infrastructure failures, on the one retry policy."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from rcb_env.retry import zero_waits
from rcb_env.runner import eval as runner_eval


class _Episodes:
    """Where episodes run, as ``_run_rounds`` sees it: each item fails ``fails[item]`` times
    for infrastructure reasons, then succeeds."""

    def __init__(self, fails: dict[str, int], ceiling_after: int | None = None) -> None:
        self.fails = dict(fails)
        self.failed: list[Any] = []
        self.rounds: list[list[Any]] = []
        self.ceiling_after = ceiling_after
        """The run reaches its spending ceiling after this many rounds (None: never)."""

    def stopped(self) -> bool:
        return self.ceiling_after is not None and len(self.rounds) >= self.ceiling_after

    def run(self, items: list[Any]) -> None:
        self.rounds.append(list(items))
        for item in items:
            if self.fails[item] > 0:
                self.fails[item] -= 1
                self.failed.append(item)


@contextmanager
def _warnings(name: str) -> Iterator[list[logging.LogRecord]]:
    """The records ``name``'s logger emits in the block (wherever logging is configured)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def _rounds(
    episodes: _Episodes,
    todo: list[str],
    retries: int,
    on_plan: Callable[[int], None] | None = None,
    run_id: str = "r",
) -> None:
    """``_run_rounds`` with ``retry_delay_s`` 5 s (a wait the tests never sit through)."""
    runner_eval._run_rounds(cast(Any, episodes), cast(Any, todo), retries, 5.0, on_plan, run_id)


def test_failed_episodes_run_again_in_rounds_without_waiting_in_tests() -> None:
    episodes = _Episodes({"a": 0, "b": 3, "c": 1})
    plans: list[int] = []
    with zero_waits(), _warnings(runner_eval.__name__) as logs:
        start = time.monotonic()
        # Three rounds 5, 10 and 15 s apart for real.
        _rounds(episodes, ["a", "b", "c"], 3, plans.append, "run-1")
        took = time.monotonic() - start
    assert took < 1.0
    assert episodes.rounds == [["a", "b", "c"], ["b", "c"], ["b"], ["b"]]
    assert plans == [5, 6, 7]
    retried = [e.__dict__ for e in logs if e.msg == "retrying infrastructure failures"]
    assert [(e["round"], e["episodes"], e["run_id"]) for e in retried] == [
        (1, 2, "run-1"),
        (2, 1, "run-1"),
        (3, 1, "run-1"),
    ]


def test_rounds_stop_when_nothing_failed_or_the_retries_run_out() -> None:
    clean = _Episodes({"a": 0})
    with zero_waits():
        _rounds(clean, ["a"], 3)
    assert clean.rounds == [["a"]]
    stubborn = _Episodes({"a": 9})
    with zero_waits():
        _rounds(stubborn, ["a"], 1)
    assert stubborn.rounds == [["a"], ["a"]]  # one retry round, failed again
    none = _Episodes({"a": 9})
    _rounds(none, ["a"], 0)  # no retry: no wait
    assert none.rounds == [["a"]]


def test_a_run_at_its_ceiling_runs_no_further_round() -> None:
    capped = _Episodes({"a": 9, "b": 0}, ceiling_after=1)
    with zero_waits():
        _rounds(capped, ["a", "b"], 3)
    assert capped.rounds == [["a", "b"]]  # "a" failed, but is left for a resumed run
    already = _Episodes({"a": 0}, ceiling_after=0)
    _rounds(already, ["a"], 3)
    assert already.rounds == []  # reached before the first round: nothing starts
