"""The host lock that lets a test marked ``exclusive`` run while no other test does
(tests/conftest.py): a waiting exclusive test is not overtaken by tests that start after it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.conftest import host_lock


def test_a_waiting_exclusive_holder_goes_before_later_shared_ones(tmp_path: Path) -> None:
    lock, gate = tmp_path / "lock", tmp_path / "gate"
    order: list[str] = []
    release_first = threading.Event()

    def shared(name: str, hold: threading.Event | None = None) -> None:
        with host_lock(False, lock, gate):
            order.append(f"{name} in")
            if hold is not None:
                hold.wait(10)
            order.append(f"{name} out")

    def exclusive() -> None:
        with host_lock(True, lock, gate):
            order.append("exclusive in")
            time.sleep(0.2)
            order.append("exclusive out")

    first = threading.Thread(target=shared, args=("first", release_first))
    first.start()
    while "first in" not in order:
        time.sleep(0.01)
    waiter = threading.Thread(target=exclusive)
    waiter.start()
    time.sleep(0.3)  # the exclusive holder now waits for the first test to end
    later = threading.Thread(target=shared, args=("later",))
    later.start()
    time.sleep(0.3)
    assert order == ["first in"]  # the later test waits behind the exclusive one
    release_first.set()
    for t in (first, waiter, later):
        t.join(10)
    assert order == [
        "first in",
        "first out",
        "exclusive in",
        "exclusive out",
        "later in",
        "later out",
    ]


def test_shared_holders_run_together(tmp_path: Path) -> None:
    lock, gate = tmp_path / "lock", tmp_path / "gate"
    inside = threading.Barrier(2, timeout=5)

    def shared() -> None:
        with host_lock(False, lock, gate):
            inside.wait()  # both inside at once, or the barrier times out

    threads = [threading.Thread(target=shared) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not inside.broken
