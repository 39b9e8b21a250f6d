"""Which rollouts of a training run are done, so that a run restarted after its process was
killed neither loses nor counts a rollout twice.

A rollout is named by its group and sample (``<group_id>/s<sample>``). Before it runs, the
ledger appends a *started* line to ``rollouts.jsonl``; its trajectory goes to
``trajectories.jsonl`` (:class:`~rcb_env.rl.export.TrajectoryLog`) only when it has finished.
A rollout that was started but has no trajectory was interrupted mid-episode: it is recorded as
such (an *interrupted* line) and, when asked for again, run again from the start in a fresh
sandbox; its trajectory says how many runs were interrupted (``interrupted``). A rollout that
has a trajectory is never run again: :meth:`RolloutLedger.run` returns the recorded one.
(Resuming from the last completed turn is not offered: the workspace of a killed process is
gone with its sandbox.)
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from rcb_env.rl.export import TRAJECTORIES, TrajectoryLog, read_trajectories
from rcb_env.rl.trajectory import Trajectory

LEDGER = "rollouts.jsonl"


def key(group_id: str, sample: int) -> str:
    """A rollout's name in the ledger."""
    return f"{group_id}/s{sample}"


class RolloutLedger:
    """The rollouts of one run folder: done (with a trajectory), interrupted, started."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / LEDGER
        trajectories = run_dir / TRAJECTORIES
        self._done: dict[str, Trajectory] = {}
        if trajectories.exists():
            for t in read_trajectories(trajectories):
                self._done.setdefault(key(t.group_id, t.sample), t)
        self._interrupted: Counter[str] = Counter()
        started: set[str] = set()
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:  # a torn last line of a killed process
                    continue
                if event.get("event") == "interrupted":
                    self._interrupted[event["key"]] += 1
                    started.discard(event["key"])
                elif event.get("event") == "started":
                    started.add(event["key"])
        self._lock = threading.Lock()
        self._file = self.path.open("a", encoding="utf-8")
        for name in sorted(started - set(self._done)):  # killed mid-episode last time
            self._interrupted[name] += 1
            self._write({"key": name, "event": "interrupted"})
        self._log = TrajectoryLog(run_dir)

    def _write(self, event: dict[str, str]) -> None:
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def done(self, group_id: str, sample: int) -> Trajectory | None:
        """The recorded trajectory of a finished rollout."""
        return self._done.get(key(group_id, sample))

    @property
    def interrupted(self) -> dict[str, int]:
        """Rollouts interrupted mid-episode, with how many times."""
        return dict(self._interrupted)

    async def run(
        self, group_id: str, sample: int, make: Callable[[], Awaitable[Trajectory]]
    ) -> Trajectory:
        """The rollout's trajectory: the recorded one if it finished before, else ``make()``'s
        (recorded once it has finished)."""
        name = key(group_id, sample)
        with self._lock:
            recorded = self._done.get(name)
            if recorded is None:
                self._write({"key": name, "event": "started"})
        if recorded is not None:
            return recorded
        t = await make()
        if (t.group_id, t.sample) != (group_id, sample):
            raise ValueError(f"the rollout made is {key(t.group_id, t.sample)}, not {name}")
        t = t.model_copy(update={"interrupted": self._interrupted.get(name, 0)})
        with self._lock:
            self._log.append(t)
            self._done[name] = t
        return t

    def close(self) -> None:
        self._file.close()
        self._log.close()


__all__ = ["LEDGER", "RolloutLedger", "key"]
