"""The runner's signed report channel, read and verified on the host.

The runner (:mod:`rcb_env.guest.runner`, run by the task's interpreter) writes one event per
line as ``<hmac> <json>`` with a sequence number; the key is deleted before any tested code
runs. The event names and the line reader are the grading protocol's
(:mod:`rcb_env.guest.protocol`), shared with the verifier of an exported Harbor task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rcb_env.guest.protocol import (
    EV_DONE,
    EV_FORGED,
    EV_MAIN_DONE,
    EV_SCRIPT_ERROR,
    EV_START,
    EV_TAMPER,
    EV_TEST,
    parse_report,
)
from rcb_env.untrusted import NotARegularFile, TooLarge, read_beneath

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
    return parse_report(raw, key)
