"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    """Run ``fn`` ``n`` times; the wall time of each call in milliseconds."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def p50(xs: list[float]) -> float:
    return statistics.median(xs)
