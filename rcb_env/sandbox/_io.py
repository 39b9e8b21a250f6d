"""Process-group kills and capped reads of captured output, shared by the executors."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import IO

from rcb_env._common import omitted

_CHUNK = 1 << 20


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def read_capped(f: IO[bytes], limit: int, needles: tuple[str, ...]) -> tuple[str, set[str]]:
    """Head and tail of a captured stream, and which needles occur anywhere in it."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    found: set[str] = set()
    raw_needles = [(n, n.encode()) for n in needles]
    overlap = max((len(b) for _, b in raw_needles), default=1) - 1
    prev = b""
    while raw_needles:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        window = prev + chunk
        for n, b in raw_needles:
            if b in window:
                found.add(n)
        prev = window[-overlap:] if overlap else b""
    f.seek(0)
    if size <= limit:
        return f.read().decode("utf-8", "replace"), found
    half = limit // 2
    head = f.read(half)
    f.seek(size - half)
    tail = f.read(half)
    text = (
        head.decode("utf-8", "replace")
        + omitted(size - 2 * half, "bytes")
        + tail.decode("utf-8", "replace")
    )
    return text, found
