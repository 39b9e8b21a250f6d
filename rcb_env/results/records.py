"""Episode records: versioned, self-describing, appended as they happen.

One JSON line per finished episode, written with a single ``write`` on an append-only descriptor
and fsynced, so a killed run leaves whole records and at most one torn last line, which readers
skip and :func:`RecordLog.open` cuts off before appending.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

__all__ = [
    "RECORDS",
    "RUN_FILE",
    "TRAJECTORIES",
    "EpisodeRecord",
    "InfraError",
    "RecordLog",
    "Rollout",
    "StepRecord",
    "read_records",
]

from rcb_env.episode.outcome import EpisodeOutcome, EpisodeStatus, StepRecord, StopReason
from rcb_env.errors import ConfigError, InfraError
from rcb_env.grading.models import GradeResult
from rcb_env.results.rollout import TRAJECTORY_SCHEMAS, Rollout, record_of_trajectory

# A run folder's files: their names are written here and only here.
RUN_FILE = "run.json"
"""A run's manifest (what defines it, what it could not run)."""
RECORDS = "episodes.jsonl"
"""A run's episode records, one line each (:class:`RecordLog`)."""
TRAJECTORIES = "trajectories.jsonl"
"""An RL run's finished rollouts (records with their rollout part)."""

SCHEMA = "rcb-env/episode/1"


class EpisodeRecord(BaseModel):
    """Everything about one episode: an evaluation's, or an RL rollout's with its
    :attr:`rollout` part (:class:`~rcb_env.rl.trajectory.Trajectory` is a view of such a
    record). A trajectory line of ``trajectories.jsonl`` (versions 1 and 2) reads as a record
    with its rollout part, so every run folder's episodes read as one schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: str = SCHEMA
    run_id: str
    episode_id: str
    snippet_id: str
    paper_id: str
    sample: int
    """Index of the sample (0..n-1) when a snippet is attempted several times."""
    weight: int
    """The snippet's line weight."""
    task_hash: str
    """Hash of the snippet spec (file, markers, reference, masked text)."""
    agent: dict[str, Any]
    """The agent's name and settings."""
    config: dict[str, Any]
    """Environment, sandbox, grading and budget settings."""
    status: EpisodeStatus
    """completed (submitted), truncated (a budget ended it) or infra_error (excluded)."""
    reason: StopReason
    """Why it ended (``submit``, ``budget_steps``...; ``imported`` for a record imported from
    published results, :mod:`rcb_env.results.imported`). Written as its string value, so
    records of earlier versions (a plain string) load as they are."""
    reward: float
    passed: bool | None
    """None when the episode could not be graded."""
    initial_observation: str
    steps: list[StepRecord]
    patch: str = ""
    """Unified diff of the workspace against the masked original."""
    body: str | None = None
    """The snippet body that was graded."""
    outside_edits: bool = False
    """The agent changed files or lines outside the masked block (ignored for grading)."""
    grade: GradeResult | None = None
    infra_error: InfraError | None = None
    model_calls: list[dict[str, Any]] = []
    """Every model call: request size, response, usage, cost, latency, retries, cache hit, and
    token log-probabilities when the server returned them; ``step`` is the index of the step its
    answer became (0: made before the first step)."""
    tokens: int = 0
    """Model tokens charged to the episode's budget."""
    cost: float = 0.0
    """Model cost (USD, from the run's price table)."""
    started_at: float
    """Unix time."""
    duration_s: float
    node: str | None = None
    """The Ray node that ran it (runs on a Ray cluster)."""
    attempt: int = 1
    """Which start of its group this was (a group moved off a dead node starts again)."""
    rollout: Rollout | None = None
    """An RL rollout's conversation, model turns with their tokens, group and policy version
    (None for an evaluation's episode, and then not written: its line is as before)."""

    @model_validator(mode="before")
    @classmethod
    def _from_trajectory(cls, data: Any) -> Any:
        """A trajectory line as the record it is a view of."""
        if isinstance(data, dict) and data.get("schema_version") in TRAJECTORY_SCHEMAS:
            return record_of_trajectory(data)
        return data

    @model_serializer(mode="wrap")
    def _without_rollout(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if self.rollout is None and isinstance(data, dict):
            data.pop("rollout", None)
        return data

    @classmethod
    def from_outcome(cls, outcome: EpisodeOutcome, **fields: Any) -> EpisodeRecord:
        """The record of an episode that ended with ``outcome`` (recorded as is)."""
        return cls(
            status=outcome.status,
            reason=outcome.reason,
            reward=outcome.reward,
            passed=outcome.passed,
            patch=outcome.patch,
            body=outcome.body,
            outside_edits=outcome.outside_edits,
            grade=outcome.grade,
            infra_error=outcome.infra_error,
            **fields,
        )


M = TypeVar("M", bound=BaseModel)


def read_jsonl(path: Path, model: type[M]) -> list[M]:
    """Every whole, valid line of a JSONL file as ``model`` (a torn or foreign line is
    skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            out.append(model.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError, UnicodeDecodeError):
            continue
    return out


def read_records(path: Path) -> list[EpisodeRecord]:
    """Every whole, valid record of a JSONL file (a torn or foreign line is skipped): an
    evaluation's ``episodes.jsonl`` or an RL run's ``trajectories.jsonl``."""
    return read_jsonl(path, EpisodeRecord)


def scored_outcomes(run_dir: Path) -> list[tuple[str, str, bool]]:
    """A run folder's scored final episodes as ``(run, snippet id, passed)``: what a solve rate
    over runs is computed from (:func:`rcb_env.task.difficulty.solve_rates`); infrastructure
    failures are left out.

    Raises:
        ConfigError: the folder holds no episode records.
    """
    path = run_dir / RECORDS
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run folder (no {RECORDS})")
    return [
        (str(run_dir), r.snippet_id, bool(r.passed))
        for r in final_records(read_records(path)).values()
        if r.status != EpisodeStatus.INFRA_ERROR and r.passed is not None
    ]


def final_records(records: list[EpisodeRecord]) -> dict[tuple[str, int], EpisodeRecord]:
    """The last record of each (snippet, sample): a re-run supersedes an infra failure."""
    out: dict[tuple[str, int], EpisodeRecord] = {}
    for r in records:
        out[(r.snippet_id, r.sample)] = r
    return out


class RecordLog:
    """Append-only writer, safe across threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd = -1

    def open(self) -> RecordLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            data = self.path.read_bytes()
            cut = data.rfind(b"\n") + 1
            if cut != len(data):  # a torn last line from a killed run
                with self.path.open("r+b") as f:
                    f.truncate(cut)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def append(self, record: BaseModel) -> None:
        line = (record.model_dump_json() + "\n").encode()
        with self._lock:
            os.write(self._fd, line)
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)
