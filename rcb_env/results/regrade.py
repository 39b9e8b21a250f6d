"""What a regrading changed: a regraded run (:mod:`rcb_env.runner.regrade`) beside the stored run
it graded again, verdict by verdict, each changed verdict with why (the snippet's test file
changed, the snippet was re-masked or its region moved, the grader or its settings changed, or
none of these: unexplained), and what was not graded again (an infrastructure failure has no
patch to grade; a snippet the task set no longer has)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field

from rcb_env.episode.outcome import EpisodeStatus
from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.results.ledger import episode_key
from rcb_env.results.records import RECORDS, RUN_FILE, EpisodeRecord, final_records, read_records

__all__ = [
    "REGRADE",
    "Change",
    "Provenance",
    "TaskChange",
    "VerdictChanges",
    "provenance",
    "verdict",
    "verdict_changes",
]

#: The entry of a regraded run's manifest that says where it comes from (:class:`Provenance`).
REGRADE = "regrade"

TEST_CHANGED = "the snippet's test file changed"
REMASKED = "the snippet changed (re-masked: its region, reference or masked file differ)"
GRADER_CHANGED = "the grader changed"
SETTINGS_CHANGED = "the grading settings changed"
UNEXPLAINED = "unexplained (same test file, snippet, grader and settings)"
UNRECORDED = (
    "unexplained: the stored run did not record its test files' hashes (an earlier version), "
    "so a changed test cannot be told apart"
)
NO_PATCH = "an infrastructure failure in the stored run: no patch to grade again"
INFRA_NOW = "an infrastructure failure while grading again"


class TaskChange(Frozen):
    """One snippet's content as the stored run had it and as it was graded against now."""

    old: str
    """The snippet's content hash in the stored run's record."""
    new: str
    """Its hash in the task set graded against."""
    test_old: str | None
    """The hash of its test file when the stored run ran (None: not recorded)."""
    test_new: str
    """The hash of its test file now."""


class Provenance(Frozen):
    """Where a regraded run comes from: written in its manifest under :data:`REGRADE`."""

    of: str
    """The stored run's folder."""
    run_id: str
    """The stored run's id."""
    against: str
    """The task set graded against (a folder or a benchmark's name)."""
    grader_old: str | None
    """The grader's version of the stored run (None: not recorded, an earlier version)."""
    grader_new: str
    """The grader's version that graded again."""
    grading_old: dict[str, Any]
    """The stored run's grading settings."""
    grading_new: dict[str, Any]
    """The grading settings of the regrading."""
    tasks: dict[str, TaskChange]
    """Each snippet graded again: its content and test file, then and now."""
    left_out: dict[str, str] = Field(default_factory=dict)
    """Episodes (``<snippet>#<sample>``) not graded again, with why."""
    bodies: dict[str, str] = Field(default_factory=dict)
    """Episodes whose candidate was not the stored body as is, with how it was found."""


class Change(Frozen):
    """One episode's verdict, stored and regraded."""

    snippet_id: str
    sample: int
    old: str
    """``passed``, ``failed`` or ``infra_error`` in the stored run."""
    new: str | None
    """The same after grading again (None: not graded again)."""
    reasons: tuple[str, ...]
    """Why it changed, or why it was not graded again."""


class VerdictChanges(Frozen):
    """A regrading's outcome beside the stored run's."""

    old_run: str
    run: str
    regraded: int
    """Episodes graded again (with a record in the regraded run)."""
    unchanged: int
    """Of those, the ones whose verdict is the stored one."""
    changed: tuple[Change, ...]
    """The verdicts that changed, with why."""
    not_regraded: tuple[Change, ...]
    """What was not graded again, with why."""


def verdict(record: EpisodeRecord) -> str:
    """An episode's verdict in one word: ``passed``, ``failed`` or ``infra_error``."""
    if record.status is EpisodeStatus.INFRA_ERROR or record.passed is None:
        return "infra_error"
    return "passed" if record.passed else "failed"


def provenance(run_dir: Path) -> Provenance:
    """The provenance of a regraded run.

    Raises:
        ConfigError: ``run_dir`` is no regraded run.
    """
    manifest = run_dir / RUN_FILE
    data = json.loads(manifest.read_text()) if manifest.is_file() else {}
    if REGRADE not in data:
        raise ConfigError(f"{run_dir} is not a regraded run (its run.json has no {REGRADE!r})")
    return Provenance.model_validate(data[REGRADE])


def _why(old: EpisodeRecord, new: EpisodeRecord, prov: Provenance) -> tuple[str, ...]:
    if verdict(new) == "infra_error":
        cause = new.infra_error.message if new.infra_error else "unknown"
        return (f"{INFRA_NOW}: {cause[:300]}",)
    task = prov.tasks.get(old.snippet_id)
    reasons: list[str] = []
    if task is not None and task.test_old is not None and task.test_old != task.test_new:
        reasons.append(TEST_CHANGED)
    if task is not None and task.old != task.new:
        reasons.append(REMASKED)
    if prov.grader_old is not None and prov.grader_old != prov.grader_new:
        reasons.append(f"{GRADER_CHANGED} ({prov.grader_old} -> {prov.grader_new})")
    if prov.grading_old != prov.grading_new:
        reasons.append(SETTINGS_CHANGED)
    how = prov.bodies.get(episode_key(old.snippet_id, old.sample))
    if reasons:
        return (*reasons, how) if how else tuple(reasons)
    if task is not None and task.test_old is None:
        return (UNRECORDED,)
    return (UNEXPLAINED,)


def verdict_changes(run_dir: Path) -> VerdictChanges:
    """The regraded run ``run_dir`` against the stored run it names, episode by episode.

    Raises:
        ConfigError: ``run_dir`` is no regraded run, or its stored run is gone.
    """
    prov = provenance(run_dir)
    old_dir = Path(prov.of)
    if not (old_dir / RECORDS).is_file():
        raise ConfigError(f"the stored run {old_dir} that {run_dir} regraded has no records")
    old = final_records(read_records(old_dir / RECORDS))
    new = final_records(read_records(run_dir / RECORDS))
    changed, not_regraded, unchanged, regraded = [], [], 0, 0
    for (snippet_id, sample), before in sorted(old.items()):
        key = episode_key(snippet_id, sample)
        after = new.get((snippet_id, sample))
        was = verdict(before)
        if was == "infra_error":
            not_regraded.append(Change(snippet_id=snippet_id, sample=sample, old=was, new=None,
                                       reasons=(NO_PATCH,)))  # fmt: skip
            continue
        if after is None:
            why = prov.left_out.get(key, "not graded yet (resume the regrading)")
            not_regraded.append(Change(snippet_id=snippet_id, sample=sample, old=was, new=None,
                                       reasons=(why,)))  # fmt: skip
            continue
        regraded += 1
        now = verdict(after)
        if now == was:
            unchanged += 1
            continue
        changed.append(Change(snippet_id=snippet_id, sample=sample, old=was, new=now,
                              reasons=_why(before, after, prov)))  # fmt: skip
    return VerdictChanges(
        old_run=str(old_dir),
        run=str(run_dir),
        regraded=regraded,
        unchanged=unchanged,
        changed=tuple(changed),
        not_regraded=tuple(not_regraded),
    )
