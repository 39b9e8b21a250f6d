"""The runner's signed report channel, read and verified on the host.

The runner (``_runner.py``, run by the task's interpreter) writes one event per line as
``<hmac> <json>`` with a sequence number; the key is deleted before any tested code runs. The
event names are the runner's own constants, so the two sides cannot drift apart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from rcb_env.grading._runner import (
    EV_DONE,
    EV_MAIN_DONE,
    EV_SCRIPT_ERROR,
    EV_START,
    EV_TAMPER,
    EV_TEST,
)
from rcb_env.untrusted import NotARegularFile, TooLarge, read_beneath

#: Not written by the runner: a line whose signature or sequence number is wrong.
EV_FORGED = "forged"

__all__ = [
    "EV_DONE",
    "EV_FORGED",
    "EV_MAIN_DONE",
    "EV_SCRIPT_ERROR",
    "EV_START",
    "EV_TAMPER",
    "EV_TEST",
    "read_report",
]


#: The most a report may hold: thousands of tests with long messages stay far below it; more
#: is someone else's writing.
REPORT_LIMIT = 64 * 1024 * 1024


def read_report(
    base: Path, relative: str, key: bytes, limit: int = REPORT_LIMIT
) -> list[dict[str, Any]]:
    """The runner's events, verified, from ``base / relative`` (read as an untrusted file: a
    FIFO, link or folder put there instead, or a file over ``limit`` bytes, is someone else's
    doing and becomes a ``forged`` event; nothing here waits). Each line is ``<hmac> <json>``
    with a sequence number. A torn last line (process killed mid-write) is dropped; a line with
    a bad signature, or out of sequence, is someone else's writing and becomes a ``forged``
    event."""
    events: list[dict[str, Any]] = []
    try:
        raw = read_beneath(base, relative, limit)
    except FileNotFoundError:
        return events
    except (NotARegularFile, TooLarge) as exc:
        return [{"event": EV_FORGED, "why": f"the report cannot be read: {exc}"}]
    lines = raw.split(b"\n")
    expected = 1
    for i, line in enumerate(lines):
        if not line:
            continue
        mac, _, body = line.partition(b" ")
        good = hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).hexdigest().encode())
        event: Any = None
        if good:
            try:
                event = json.loads(body)
            except json.JSONDecodeError:
                event = None
        if not good or not isinstance(event, dict) or event.get("seq") != expected:
            if i == len(lines) - 1 and not raw.endswith(b"\n"):
                break  # torn by a kill
            events.append({"event": EV_FORGED, "line": line[:200].decode("utf-8", "replace")})
            continue
        expected += 1
        events.append(event)
    return events
