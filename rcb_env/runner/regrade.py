"""Grade a stored run again: every episode's final candidate graded by the current grader
against the current tasks, each in a fresh pristine copy (warm or cold, on any backend, here
``jobs`` at a time or as Ray jobs), written to a new run folder that ``summary``, ``compare`` and
``report`` read as any run, with where it comes from in its manifest
(:class:`~rcb_env.results.regrade.Provenance`: the stored run, the grader's versions, each
snippet's content and test file then and now). What changed, and why:
:func:`rcb_env.results.regrade.verdict_changes`.

The candidate of an episode is its stored body when the snippet is unchanged (what was graded
then). A snippet that changed since (re-masked, its region moved) gets the stored patch applied
to its current masked file and the body read back by its task source; when the patch does not
apply, the stored body. An episode that failed for infrastructure reasons has no candidate: it
is copied as it is (excluded from the rates and counted, as in the stored run) and listed as
not graded again.

A killed regrading resumes (``resume``): a regrading with a record is never graded again; one
that failed for infrastructure reasons is.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rcb_env.episode.env import infra_error_of, reward_of
from rcb_env.episode.outcome import EpisodeStatus, StopReason
from rcb_env.errors import ConfigError, InfraError, infra_error
from rcb_env.grading.grader import Grader
from rcb_env.grading.models import GradeResult
from rcb_env.grading.prewarm import Prewarmer
from rcb_env.grading.provenance import grader_version, hash_of_tests
from rcb_env.logs import get_logger
from rcb_env.results.ledger import episode_key
from rcb_env.results.records import (
    RECORDS,
    RUN_FILE,
    EpisodeRecord,
    RecordLog,
    final_records,
    read_records,
    write_json_atomic,
)
from rcb_env.results.regrade import REGRADE, Provenance, TaskChange
from rcb_env.results.summary import Totals
from rcb_env.runner.episode import EvalConfig
from rcb_env.runner.eval import manifest, runnable
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task.models import Paper, Pset, Snippet, task_hash
from rcb_env.task.source import source_for

__all__ = ["Regrading", "patched_file", "regrade_run", "stored_run"]

log = get_logger(__name__)

STORED_BODY = "the stored body"
PATCHED = "the stored patch applied to the changed snippet's masked file"
UNPATCHED = "the stored body (the stored patch does not apply to the changed snippet)"


@dataclass(frozen=True)
class Regrading:
    """One episode of the stored run to grade again: its task now, its stored record, and the
    candidate body with how it was found."""

    paper: Paper
    snippet: Snippet
    old: EpisodeRecord
    body: str
    how: str

    @property
    def key(self) -> str:
        return episode_key(self.old.snippet_id, self.old.sample)


@dataclass(frozen=True)
class StoredRun:
    """A stored run as a regrading reads it: its manifest and its final records."""

    path: Path
    manifest: dict[str, Any]
    finals: dict[tuple[str, int], EpisodeRecord]

    @property
    def config(self) -> EvalConfig:
        return EvalConfig.model_validate(self.manifest["config"])


def stored_run(path: Path) -> StoredRun:
    """The run folder ``path`` as a regrading reads it.

    Raises:
        ConfigError: it is no run folder (no ``run.json`` with its configuration, or no
            records).
    """
    manifest_path = path / RUN_FILE
    if not manifest_path.is_file() or not (path / RECORDS).is_file():
        raise ConfigError(f"{path} is not a run folder (it needs run.json and episodes.jsonl)")
    try:
        data = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{manifest_path} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or "config" not in data or "run_id" not in data:
        raise ConfigError(f"{path}/run.json records no run configuration: cannot regrade it")
    try:  # checked now, not midway through a regrading
        EvalConfig.model_validate(data["config"])
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(
            f"{path}/run.json: a configuration this version cannot read: {problems}"
        ) from None
    return StoredRun(path.resolve(), data, final_records(read_records(path / RECORDS)))


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def patched_file(patch: str, path: str, text: str) -> str | None:
    """``text`` (the file ``path`` as an episode's workspace started) with the hunks of
    ``patch`` (a unified diff, ``a/`` the masked original, ``b/`` the workspace) for ``path``
    applied, each where its old lines stand; None when the patch has none for the file or one
    does not apply."""
    lines = patch.splitlines(keepends=True)
    hunks: list[tuple[list[str], list[str]]] = []
    mine, i = False, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            mine = lines[i + 1].rstrip("\n") == f"+++ b/{path}"
            i += 2
            continue
        head = _HUNK.match(line) if mine else None
        i += 1
        if head is None:
            continue
        want_old = int(head.group(1) if head.group(1) is not None else 1)
        want_new = int(head.group(2) if head.group(2) is not None else 1)
        old: list[str] = []
        new: list[str] = []
        while i < len(lines) and (len(old) < want_old or len(new) < want_new):
            tag, rest = lines[i][:1], lines[i][1:]
            if tag not in (" ", "-", "+"):
                break
            if tag != "+":
                old.append(rest)
            if tag != "-":
                new.append(rest)
            i += 1
        hunks.append((old, new))
    if not hunks:
        return None
    source = text.splitlines(keepends=True)
    out: list[str] = []
    at = 0
    for old, new in hunks:
        found = next(
            (j for j in range(at, len(source) - len(old) + 1) if source[j : j + len(old)] == old),
            None,
        )
        if found is None:
            return None
        out += source[at:found] + new
        at = found + len(old)
    return "".join(out + source[at:])


def _candidate(old: EpisodeRecord, paper: Paper, snippet: Snippet) -> tuple[str, str] | None:
    """The body to grade for ``old`` against the snippet as it is now, and how it was found
    (None: the record has no candidate)."""
    if old.body is None:
        return None
    if old.task_hash == task_hash(snippet):
        return old.body, STORED_BODY
    edited = patched_file(old.patch, snippet.file, snippet.masked_text)
    if edited is None:
        return old.body, UNPATCHED
    body, _outside = source_for(paper).extract_body(paper, snippet, edited)
    return body, PATCHED


def _plan(
    stored: StoredRun, pset: Pset, cfg: EvalConfig, here: bool
) -> tuple[list[Regrading], list[EpisodeRecord], dict[str, str]]:
    """What to grade again, the stored records to copy as they are (infrastructure failures:
    no candidate), and what is left out with why."""
    ready, totals = runnable(pset, cfg, here=here)
    cannot = {
        (u.paper, u.snippet): u.reason for u in totals.unavailable
    }  # snippet None: the whole paper
    papers = {p.id: p for p in pset.papers}
    todo: list[Regrading] = []
    copies: list[EpisodeRecord] = []
    left_out: dict[str, str] = {}
    ready_ids = {s.id for s in ready.snippets}
    for (snippet_id, sample), old in sorted(stored.finals.items()):
        key = episode_key(snippet_id, sample)
        if old.status is EpisodeStatus.INFRA_ERROR:
            copies.append(old)
            continue
        paper = papers.get(old.paper_id)
        name = snippet_id.split("/", 1)[1]
        snippet = next((s for s in paper.snippets if s.name == name), None) if paper else None
        if paper is None or snippet is None:
            left_out[key] = f"not in the task set graded against ({pset.root})"
            continue
        if snippet_id not in ready_ids:
            why = cannot.get((paper.id, snippet.name)) or cannot.get((paper.id, None))
            left_out[key] = f"cannot run here: {why or 'unavailable'}"
            continue
        found = _candidate(old, paper, snippet)
        if found is None:
            left_out[key] = "the stored record has no graded body"
            continue
        todo.append(Regrading(paper, snippet, old, *found))
    return todo, copies, left_out


def _provenance(
    stored: StoredRun, pset: Pset, cfg: EvalConfig, todo: list[Regrading], left: dict[str, str]
) -> Provenance:
    tests_then = stored.manifest.get("test_hashes") or {}
    tasks = {
        item.snippet.id: TaskChange(
            old=item.old.task_hash,
            new=task_hash(item.snippet),
            test_old=tests_then.get(item.snippet.id),
            test_new=hash_of_tests(item.paper, item.snippet),
        )
        for item in todo
    }
    return Provenance(
        of=str(stored.path),
        run_id=str(stored.manifest["run_id"]),
        against=pset.benchmark or str(pset.root),
        grader_old=stored.manifest.get("grader"),
        grader_new=grader_version(),
        grading_old=stored.config.grading.model_dump(mode="json"),
        grading_new=cfg.grading.model_dump(mode="json"),
        tasks=tasks,
        left_out=left,
        bodies={item.key: item.how for item in todo if item.how != STORED_BODY},
    )


def _open(
    stored: StoredRun,
    pset: Pset,
    cfg: EvalConfig,
    run_dir: Path,
    plan: tuple[list[Regrading], list[EpisodeRecord], dict[str, str]],
    resume: bool,
) -> None:
    """The regraded run's manifest written, or a resumed one's checked.

    Raises:
        ConfigError: the folder holds a run and ``resume`` is not set, or it regraded another
            run.
    """
    path = run_dir / RUN_FILE
    if path.exists():
        if not resume:
            raise ConfigError(f"{run_dir} already holds a run; pass --resume to continue it")
        held = json.loads(path.read_text()).get(REGRADE) or {}
        if held.get("run_id") != stored.manifest["run_id"]:
            raise ConfigError(
                f"cannot resume {run_dir}: it is not a regrading of {stored.path} "
                f"(it regraded {held.get('of', 'nothing')})"
            )
        return
    todo, _copies, left = plan
    graded = {item.snippet.id for item in todo}
    selection = pset.model_copy(
        update={
            "papers": tuple(
                p.model_copy(update={"snippets": tuple(s for s in p.snippets if s.id in graded)})
                for p in pset.papers
                if any(s.id in graded for s in p.snippets)
            )
        }
    )
    old_totals = stored.manifest.get("benchmark")
    totals = Totals.model_validate(old_totals) if old_totals else runnable(pset, cfg)[1]
    data = manifest(run_dir.name, cfg, selection, totals)
    data[REGRADE] = _provenance(stored, pset, cfg, todo, left).model_dump(mode="json")
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)


def _record(item: Regrading, grade: GradeResult | None, error: InfraError | None,
            run_id: str, cfg: EvalConfig) -> EpisodeRecord:  # fmt: skip
    """The stored record with its grading redone (its steps, tokens and cost as they were)."""
    common: dict[str, Any] = {
        "run_id": run_id,
        "weight": item.snippet.weight,
        "task_hash": task_hash(item.snippet),
        "config": cfg.model_dump(mode="json", exclude={"agent"}),
        "body": item.body,
        "grade": grade,
        "node": None,
        "attempt": 1,
    }
    if grade is not None and grade.is_infra_error:
        error = infra_error_of(grade)
    if error is not None:
        return item.old.model_copy(
            update={
                **common,
                "status": EpisodeStatus.INFRA_ERROR,
                "reason": StopReason.INFRA_ERROR,
                "reward": 0.0,
                "passed": None,
                "infra_error": error,
            }
        )
    assert grade is not None
    return item.old.model_copy(
        update={
            **common,
            "reward": reward_of(grade, item.snippet, cfg.env.reward),
            "passed": grade.passed,
            "infra_error": None,
        }
    )


Keep = Callable[[Regrading, GradeResult | None, InfraError | None], None]


def _grade_here(items: list[Regrading], cfg: EvalConfig, jobs: int, keep: Keep) -> None:
    """Each candidate graded on this machine, ``jobs`` at a time, in sandboxes of
    ``cfg.sandbox`` (one grader per paper)."""
    factory = SandboxFactory(cfg.sandbox)
    # the next paper's warm process starts while this one's candidates are graded (as in eval)
    prewarmer = Prewarmer(factory.grading_executor, cfg.grading, [i.paper for i in items])
    graders: dict[str, Grader] = {}
    lock = threading.Lock()

    def grader_for(paper: Paper) -> Grader:
        with lock:
            if paper.id not in graders:
                graders[paper.id] = Grader(cfg.grading, executor=factory.grading_executor(paper))
            return graders[paper.id]

    def one(item: Regrading) -> None:
        prewarmer.starting(item.paper)
        try:
            grade = grader_for(item.paper).grade(item.paper, item.snippet, item.body)
        except Exception as exc:
            error = infra_error(exc, "grading")
            if error is None:
                raise
            keep(item, None, error)
            return
        keep(item, grade, None)

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for future in [pool.submit(one, item) for item in items]:
                future.result()
    finally:
        prewarmer.close()
        factory.close()


def _grade_on_ray(
    items: list[Regrading], pset: Pset, cfg: EvalConfig, address: str, jobs: int, warm: bool,
    keep: Keep,
) -> None:  # fmt: skip
    """Each candidate graded as a Ray job (:class:`~rcb_env.runner.jobs.RegradeJob`) on the
    cluster at ``address``; a job that fails for good is an infrastructure failure."""
    from rcb_env.dispatch.ray import RayDispatcher, TaskRef, ship_tasks
    from rcb_env.runner.jobs import RegradeJob

    if pset.parts:
        raise ConfigError("regrade --ray: one task set at a time (not a combined selection)")
    where = pset.benchmark or str(pset.root)
    by_key = {item.key: item for item in items}
    with RayDispatcher(address, jobs=jobs, warm=warm) as dispatcher:
        tree = ship_tasks(pset)
        shipped = [tree] if tree is not None else None
        work = [
            RegradeJob(
                TaskRef(where, shipped, i.paper.id, i.snippet.name, task_hash(i.snippet)),
                i.old.sample,
                i.body,
                cfg.sandbox,
                cfg.grading,
            )
            for i in items
        ]

        def on_done(job: RegradeJob, data: dict[str, Any]) -> None:
            keep(by_key[job.key], GradeResult.model_validate(data), None)

        def on_failure(job: RegradeJob, why: str) -> None:
            keep(by_key[job.key], None, InfraError(stage="sandbox", type="ray", message=why))

        dispatcher.run(work, on_done, on_failure)


def regrade_run(
    stored: StoredRun,
    pset: Pset,
    run_dir: Path,
    *,
    sandbox: SandboxConfig,
    jobs: int = 1,
    ray: str | None = None,
    warm: bool = False,
    resume: bool = False,
    on_plan: Callable[[int], None] | None = None,
    on_graded: Callable[[EpisodeRecord], None] | None = None,
) -> Path:
    """Grade every final candidate of ``stored`` again against ``pset`` (the task set as it is
    now), in sandboxes of ``sandbox`` (its backend, warm or cold), here ``jobs`` at a time or
    on the Ray cluster at ``ray`` (``warm``: long-lived workers); the records go to
    ``run_dir`` (a new run folder; ``resume``: one this regrading started, whose finished
    regradings are kept). The grading settings are the stored run's. Returns ``run_dir``.

    Raises:
        ConfigError: ``run_dir`` holds another run (or any run, without ``resume``).
    """
    cfg = stored.config.model_copy(update={"sandbox": sandbox})
    plan = _plan(stored, pset, cfg, here=ray is None)
    _open(stored, pset, cfg, run_dir, plan, resume)
    todo, copies, _left = plan
    done = final_records(read_records(run_dir / RECORDS))
    run_id = str(json.loads((run_dir / RUN_FILE).read_text())["run_id"])

    def pending(old: EpisodeRecord) -> bool:
        """Not yet in the regraded run, or failed there for infrastructure reasons (a stored
        infrastructure failure is copied once)."""
        now = done.get((old.snippet_id, old.sample))
        if now is None:
            return True
        return (
            now.status is EpisodeStatus.INFRA_ERROR and old.status is not EpisodeStatus.INFRA_ERROR
        )

    todo = [item for item in todo if pending(item.old)]
    if on_plan is not None:
        on_plan(len(todo))
    writer = RecordLog(run_dir / RECORDS).open()
    try:
        for old in copies:
            if pending(old):
                writer.append(old.model_copy(update={"run_id": run_id}))

        def keep(item: Regrading, grade: GradeResult | None, error: InfraError | None) -> None:
            record = _record(item, grade, error, run_id, cfg)
            writer.append(record)
            log.info("regraded", task_id=item.snippet.id, sample=item.old.sample,
                     old=item.old.passed, new=record.passed)  # fmt: skip
            if on_graded is not None:
                on_graded(record)

        if ray is None:
            _grade_here(todo, cfg, jobs, keep)
        else:
            _grade_on_ray(todo, pset, cfg, ray, jobs, warm, keep)
    finally:
        writer.close()
    return run_dir
