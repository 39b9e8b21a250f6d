"""Which episodes of a run folder are started and which are done: the one ledger behind eval
resume (:func:`eval_ledger`) and RL resume (:class:`~rcb_env.rl.ledger.RolloutLedger`).

A run folder holds its records (one JSON line per finished episode, appended by
:class:`~rcb_env.results.records.RecordLog`) and, when episodes announce themselves, an events
file of *started* and *interrupted* lines. An episode is named by a key (an evaluation's
``<snippet>#<sample>``, a rollout's ``<group>/s<sample>``). It is *done* when the last record of
its key counts (an evaluation redoes an infrastructure failure; a rollout, retried inside, does
not); started without a record, it was *interrupted* (its process killed mid-episode): reopened,
the ledger writes an *interrupted* line for it once and counts it, and it is run again from the
start. A done episode is never run again, so a resumed run neither loses nor repeats one.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Generic, TypeVar

from pydantic import BaseModel

from rcb_env.episode.outcome import EpisodeStatus
from rcb_env.results.records import RECORDS, EpisodeRecord, RecordLog, read_jsonl

__all__ = ["EVENTS", "RECORDS", "RunLedger", "episode_key", "eval_ledger"]

EVENTS = "started.jsonl"
"""The events file of an evaluation run folder (an RL run folder names its own)."""

R = TypeVar("R", bound=BaseModel)
T = TypeVar("T")


def episode_key(snippet_id: str, sample: int) -> str:
    """An evaluation episode's name in the ledger."""
    return f"{snippet_id}#{sample}"


def _counts(_record: BaseModel) -> bool:
    return True


class RunLedger(Generic[R]):
    """The episodes of one run folder: done (with the record that counts), interrupted,
    started. Safe across threads."""

    def __init__(
        self,
        records: Path,
        *,
        model: type[R],
        key: Callable[[R], str],
        counts: Callable[[R], bool] = _counts,
        events: str = EVENTS,
    ) -> None:
        """``records``: the run folder's records file (read as ``model``); ``key``: a record's
        episode; ``counts``: whether a record finishes its episode (the last record of a key
        decides); ``events``: the events file's name in the same folder."""
        self.run_dir = records.parent
        self.records = records
        self.events = records.parent / events
        self.key = key
        self.counts = counts
        self._done: dict[str, R] = {}
        ended: Counter[str] = Counter()  # runs that left a record, counting or not
        for record in read_jsonl(self.records, model):
            name = key(record)
            ended[name] += 1
            if counts(record):
                self._done[name] = record
            else:
                self._done.pop(name, None)
        self._interrupted: Counter[str] = Counter()
        started: Counter[str] = Counter()
        if self.events.exists():
            for line in self.events.read_bytes().splitlines():
                try:
                    event = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):  # torn by a killed process
                    continue
                if not isinstance(event, dict) or not isinstance(event.get("key"), str):
                    continue
                if event.get("event") == "interrupted":
                    self._interrupted[event["key"]] += 1
                elif event.get("event") == "started":
                    started[event["key"]] += 1
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._log: RecordLog | None = None
        for name in sorted(started):
            if name in self._done:
                continue
            # a run that started, left no record and is not known as interrupted was killed
            # mid-episode last time
            lost = started[name] - ended[name] - self._interrupted[name]
            for _ in range(max(0, lost)):
                self._interrupted[name] += 1
                self._write(name, "interrupted")

    def _write(self, name: str, event: str, *, sync: bool = True) -> None:
        if self._file is None:  # opened on the first event: reading alone leaves no file
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._file = self.events.open("a", encoding="utf-8")
        self._file.write(json.dumps({"key": name, "event": event}) + "\n")
        self._file.flush()
        if sync:
            os.fsync(self._file.fileno())

    def done(self, name: str) -> R | None:
        """The record that finished the episode ``name`` (None: it is to run)."""
        with self._lock:
            return self._done.get(name)

    @property
    def interrupted(self) -> dict[str, int]:
        """Episodes interrupted mid-episode, with how many times."""
        with self._lock:
            return dict(self._interrupted)

    def pending(self, items: Iterable[T], key: Callable[[T], str]) -> list[T]:
        """The ``items`` whose episode (``key(item)``) is not done, in their order."""
        with self._lock:
            return [item for item in items if key(item) not in self._done]

    def start(self, name: str, *, sync: bool = True) -> R | None:
        """Announce that the episode ``name`` runs now (a *started* line); if it is done, its
        record instead, and nothing is written. ``sync=False``: the line is handed to the
        system (a process killed afterwards leaves it) but not forced to disk: :meth:`sync`
        does that later (a server answers first)."""
        with self._lock:
            recorded = self._done.get(name)
            if recorded is None:
                self._write(name, "started", sync=sync)
            return recorded

    def sync(self) -> None:
        """Force the events written so far to disk."""
        with self._lock:
            if self._file is not None:
                os.fsync(self._file.fileno())

    def finish(self, record: R) -> None:
        """Append ``record`` to the records file; the episode is done if it counts."""
        with self._lock:
            if self._log is None:
                self._log = RecordLog(self.records).open()
            self._log.append(record)
            if self.counts(record):
                self._done[self.key(record)] = record
            else:
                self._done.pop(self.key(record), None)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._log is not None:
                self._log.close()
                self._log = None


def _scored(record: EpisodeRecord) -> bool:
    return record.status is not EpisodeStatus.INFRA_ERROR


def _key(record: EpisodeRecord) -> str:
    return episode_key(record.snippet_id, record.sample)


def eval_ledger(records_path: Path) -> RunLedger[EpisodeRecord]:
    """The ledger of an evaluation run whose records are ``records_path``: an episode is done
    when its last record is not an infrastructure error (those are run again)."""
    return RunLedger(records_path, model=EpisodeRecord, key=_key, counts=_scored)
