"""How strong is each snippet's test: its reference's mutants graded like submissions.

A mutant is killed when the test fails it, survives when the test passes it, and is excluded when
its grading failed for infrastructure reasons (never counted as killed). The mutation score of a
snippet is killed / (killed + survived); a paper's and a benchmark's are weighted by the
snippets' line weights. Every graded mutant is appended to a record file as it is graded, so an
interrupted run resumes where it stopped (``settings.json`` beside it must match).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import ValidationError

from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.grading.grader import Grader
from rcb_env.grading.models import GradeResult
from rcb_env.grading.prewarm import Prewarmer
from rcb_env.task.models import Paper, Pset, Snippet
from rcb_env.task.selection import Subset, SubsetEntry
from rcb_env.validation.mutants import Generation, Mutant, diff, generate

SCHEMA = "rcb-env/mutants/1"
RECORD_SCHEMA = "rcb-env/mutant/1"
RECORDS = "mutants.jsonl"
SETTINGS = "settings.json"

MutantStatus = Literal["killed", "survived", "excluded"]


class Case(NamedTuple):
    """One mutant of one snippet, to be graded."""

    paper: Paper
    snippet: Snippet
    mutant: Mutant


Kind = Literal["test gap", "possibly equivalent"]
Classify = Callable[[list[tuple[Paper, Snippet, dict[str, str]]]], dict[tuple[str, str], Kind]]
"""Sorts survivors (per snippet: mutant key -> body) into kinds: (snippet id, key) -> kind."""

GradeAll = Callable[[Sequence[Case], Callable[[Case, GradeResult], None]], None]
"""Grades every case, calling back with each verdict as it comes (in any order, from any
thread)."""


class MutantRecord(Frozen):
    """One graded mutant."""

    schema_version: str = RECORD_SCHEMA
    snippet_id: str
    key: str
    """The mutant's key (hash of its body)."""
    operator: str
    description: str
    line: int
    """Line of the change in the snippet's file."""
    status: MutantStatus
    outcome: str
    kind: str
    detail: str = ""
    duration_s: float = 0.0
    grading_path: str = "cold"
    diff: str
    """The mutant against the reference body."""

    @classmethod
    def of(cls, case: Case, result: GradeResult) -> MutantRecord:
        s, m = case.snippet, case.mutant
        status: MutantStatus = (
            "excluded" if result.is_infra_error else "survived" if result.passed else "killed"
        )
        return cls(
            snippet_id=s.id,
            key=m.key,
            operator=m.operator,
            description=m.description,
            line=s.start_line + m.line,
            status=status,
            outcome=result.outcome.value,
            kind=result.kind.value,
            detail=result.detail[:300],
            duration_s=result.duration_s,
            grading_path=result.grading_path,
            diff=diff(s.reference_body, m.body, name=s.file, start=s.start_line + 1),
        )


class Survivor(Frozen):
    """A mutant the test let through."""

    key: str = ""
    operator: str
    description: str
    line: int
    diff: str
    kind: Kind | None = None
    """``test gap`` (it differs from the reference on inputs the test did not try) or
    ``possibly equivalent`` (it agreed on all of them); None when not classified
    (:mod:`rcb_env.validation.survivors`)."""


class SnippetStrength(Frozen):
    id: str
    paper: str
    weight: int
    candidates: int
    """Distinct mutants the operators made (before the cap)."""
    unparsable: int
    equivalent: int
    """Left out: the reference's syntax tree (or an earlier mutant's)."""
    tried: int
    """Graded: killed + survived + excluded."""
    killed: int
    survived: int
    excluded: int
    """Gradings that failed for infrastructure reasons (not counted)."""
    score: float | None
    """killed / (killed + survived); None when no mutant was graded."""
    survivors: tuple[Survivor, ...] = ()
    error: str | None = None
    """Why no mutant could be made (the reference body does not parse alone)."""
    test_gaps: int | None = None
    """Survivors that differ from the reference on other inputs (when classified)."""
    possibly_equivalent: int | None = None
    """Survivors that agreed with the reference on every other input (when classified)."""
    validation: str | None = None
    """The snippet's validation status (``ok``, ``weak``, ...) when it was validated."""


class GroupStrength(Frozen):
    """A paper's or a benchmark's line-weighted score."""

    id: str
    snippets: int
    scored: int
    """Snippets with a score."""
    weight: int
    """Line weight of the scored snippets."""
    score: float | None
    killed: int
    survived: int


class StrengthReport(Frozen):
    schema_version: str = SCHEMA
    rcb_env_version: str
    root: str
    seed: int
    cap: int | None
    operators: tuple[str, ...]
    snippets: tuple[SnippetStrength, ...]
    papers: tuple[GroupStrength, ...]
    total: GroupStrength
    wall_s: float
    """Seconds this invocation took (a resumed run counts only its own)."""


class Settings(Frozen):
    """What a record folder was made with (a resumption must match)."""

    schema_version: str = SCHEMA
    seed: int
    cap: int | None
    operators: tuple[str, ...]


def plan(
    pset: Pset, *, seed: int, cap: int | None, operators: tuple[str, ...]
) -> tuple[list[Case], dict[str, Generation]]:
    """Every snippet's mutants, and each snippet's generation (the counts left out)."""
    cases: list[Case] = []
    made: dict[str, Generation] = {}
    for p in pset.papers:
        for s in p.snippets:
            g = generate(s.reference_body, seed=f"{seed}:{s.id}", cap=cap, operators=operators)
            made[s.id] = g
            cases += [Case(p, s, m) for m in g.mutants]
    return cases, made


def local_grading(grader_for: Callable[[Paper], Grader], jobs: int) -> GradeAll:
    """Grading on this machine, ``jobs`` at a time, paper by paper (the next paper's warm
    process started while this one's mutants are graded)."""
    from concurrent.futures import ThreadPoolExecutor

    def grade_all(cases: Sequence[Case], done: Callable[[Case, GradeResult], None]) -> None:
        graders: dict[str, Grader] = {}
        lock = threading.Lock()

        def grader(paper: Paper) -> Grader:
            with lock:
                if paper.id not in graders:
                    graders[paper.id] = grader_for(paper)
                return graders[paper.id]

        first = next(iter(cases), None)
        config = grader(first.paper).config if first is not None else None
        prewarmer = (
            Prewarmer(lambda p: grader(p).executor, config, [c.paper for c in cases])
            if config is not None
            else None
        )

        def one(case: Case) -> None:
            if prewarmer is not None:
                prewarmer.starting(case.paper)
            done(case, grader(case.paper).grade(case.paper, case.snippet, case.mutant.body))

        try:
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                for f in [pool.submit(one, c) for c in cases]:
                    f.result()
        finally:
            if prewarmer is not None:
                prewarmer.close()

    return grade_all


def _read(path: Path) -> list[MutantRecord]:
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(MutantRecord.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError, UnicodeDecodeError):
            continue  # a torn last line of a killed run
    return out


def read_records(folder: Path) -> list[tuple[str, str]]:
    """``(snippet id, status)`` of each mutant graded into ``folder`` (a record folder of
    :func:`score_mutants`), the last record of each mutant; empty when there is none."""
    last = {(r.snippet_id, r.key): r.status for r in _read(folder / RECORDS)}
    return [(sid, status) for (sid, _key), status in last.items()]


class _Log:
    """Append-only record file: one whole line per ``write``, fsynced."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            data = path.read_bytes()
            cut = data.rfind(b"\n") + 1
            if cut != len(data):
                with path.open("r+b") as f:
                    f.truncate(cut)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def append(self, record: MutantRecord) -> None:
        with self._lock:
            os.write(self._fd, (record.model_dump_json() + "\n").encode())
            os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def _check_settings(folder: Path, settings: Settings) -> None:
    path = folder / SETTINGS
    if path.exists():
        try:
            old = Settings.model_validate_json(path.read_text())
        except ValidationError as exc:
            raise ConfigError(f"{path} is not a mutants settings file: {exc}") from exc
        if old != settings:
            raise ConfigError(
                f"{folder} holds mutants made with seed {old.seed}, cap {old.cap}, operators "
                f"{', '.join(old.operators)}: resume with the same settings or use another folder"
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(settings.model_dump_json(indent=2))


def score_mutants(
    pset: Pset,
    grade_all: GradeAll,
    *,
    seed: int = 0,
    cap: int | None = 20,
    operators: tuple[str, ...] | None = None,
    out: Path | None = None,
    validation: dict[str, str] | None = None,
    on_done: Callable[[str], None] | None = None,
    on_planned: Callable[[int], None] | None = None,
    classify: Classify | None = None,
) -> StrengthReport:
    """Generate every snippet's mutants (``cap`` each, drawn with ``seed``), grade those not
    already in ``out``'s records with ``grade_all``, and score them. ``validation`` carries each
    snippet's validation status into the report; ``on_planned`` hears how many gradings are
    left to do, ``on_done`` of each as it is done. ``classify`` (e.g. over
    :func:`rcb_env.validation.survivors.classify_all`) sorts the survivors into test gaps and
    possibly equivalent mutants."""
    from rcb_env import __version__
    from rcb_env.validation.mutants import OPERATORS

    started = time.monotonic()
    ops = tuple(operators or OPERATORS.names())
    cases, made = plan(pset, seed=seed, cap=cap, operators=ops)
    records: list[MutantRecord] = []
    log: _Log | None = None
    if out is not None:
        _check_settings(out, Settings(seed=seed, cap=cap, operators=ops))
        records = _read(out / RECORDS)
        log = _Log(out / RECORDS)
    finished = {(r.snippet_id, r.key) for r in records if r.status != "excluded"}
    todo = [c for c in cases if (c.snippet.id, c.mutant.key) not in finished]
    if on_planned is not None:
        on_planned(len(todo))
    lock = threading.Lock()

    def done(case: Case, result: GradeResult) -> None:
        record = MutantRecord.of(case, result)
        with lock:
            records.append(record)
        if log is not None:
            log.append(record)
        if on_done is not None:
            on_done(f"{case.snippet.id} [{record.status}]")

    try:
        grade_all(todo, done)
    finally:
        if log is not None:
            log.close()
    report = build_report(
        pset,
        made,
        records,
        seed=seed,
        cap=cap,
        operators=ops,
        validation=validation or {},
        wall_s=time.monotonic() - started,
        version=__version__,
    )
    if classify is None:
        return report
    bodies = {(s.id, m.key): m.body for s in pset.snippets for m in made[s.id].mutants}
    snippets = {s.id: (p, s) for p in pset.papers for s in p.snippets}
    items = [
        (*snippets[s.id], {v.key: bodies[(s.id, v.key)] for v in s.survivors})
        for s in report.snippets
        if s.survivors
    ]
    kinds = classify(items)
    return report.model_copy(
        update={
            "snippets": tuple(_classified(s, kinds) for s in report.snippets),
            "wall_s": round(time.monotonic() - started, 1),
        }
    )


def _classified(s: SnippetStrength, kinds: dict[tuple[str, str], Kind]) -> SnippetStrength:
    survivors = tuple(v.model_copy(update={"kind": kinds.get((s.id, v.key))}) for v in s.survivors)
    if not any(v.kind for v in survivors):
        return s.model_copy(update={"survivors": survivors})
    return s.model_copy(
        update={
            "survivors": survivors,
            "test_gaps": sum(v.kind == "test gap" for v in survivors),
            "possibly_equivalent": sum(v.kind == "possibly equivalent" for v in survivors),
        }
    )


def build_report(
    pset: Pset,
    made: dict[str, Generation],
    records: list[MutantRecord],
    *,
    seed: int,
    cap: int | None,
    operators: tuple[str, ...],
    validation: dict[str, str],
    wall_s: float,
    version: str,
) -> StrengthReport:
    """Scores from the records (the last record of each mutant counts: a re-run supersedes an
    excluded one); only the mutants of the current generation count."""
    last: dict[tuple[str, str], MutantRecord] = {}
    for r in records:
        last[(r.snippet_id, r.key)] = r
    snippets = []
    for p in pset.papers:
        for s in p.snippets:
            g = made[s.id]
            mine = [last[(s.id, m.key)] for m in g.mutants if (s.id, m.key) in last]
            killed = sum(r.status == "killed" for r in mine)
            survived = [r for r in mine if r.status == "survived"]
            counted = killed + len(survived)
            snippets.append(
                SnippetStrength(
                    id=s.id,
                    paper=p.id,
                    weight=s.weight,
                    candidates=g.candidates,
                    unparsable=g.unparsable,
                    equivalent=g.equivalent,
                    tried=len(mine),
                    killed=killed,
                    survived=len(survived),
                    excluded=len(mine) - counted,
                    score=round(killed / counted, 4) if counted else None,
                    survivors=tuple(
                        Survivor(
                            key=r.key,
                            operator=r.operator,
                            description=r.description,
                            line=r.line,
                            diff=r.diff,
                        )
                        for r in survived
                    ),
                    error=g.error,
                    validation=validation.get(s.id),
                )
            )
    papers = tuple(group(p.id, [s for s in snippets if s.paper == p.id]) for p in pset.papers)
    return StrengthReport(
        rcb_env_version=version,
        root=str(pset.root),
        seed=seed,
        cap=cap,
        operators=operators,
        snippets=tuple(snippets),
        papers=papers,
        total=group(pset.benchmark or pset.root.name, snippets),
        wall_s=round(wall_s, 1),
    )


def group(name: str, snippets: Sequence[SnippetStrength]) -> GroupStrength:
    """The line-weighted score of ``snippets`` (those with a score)."""
    scored = [s for s in snippets if s.score is not None]
    weight = sum(s.weight for s in scored)
    score = round(sum(s.weight * (s.score or 0.0) for s in scored) / weight, 4) if weight else None
    return GroupStrength(
        id=name,
        snippets=len(snippets),
        scored=len(scored),
        weight=weight,
        score=score,
        killed=sum(s.killed for s in snippets),
        survived=sum(s.survived for s in snippets),
    )


def verified_subset(
    report: StrengthReport, *, threshold: float, repeat: int, name: str = "verified"
) -> Subset:
    """The snippets whose validation is ``ok`` (the reference passed all ``repeat`` runs, the
    masked and ``pass`` bodies failed) and whose mutation score is at least ``threshold``."""
    keep = [
        s
        for s in report.snippets
        if s.validation == "ok" and s.score is not None and s.score >= threshold
    ]
    return Subset(
        name=name,
        rcb_env_version=report.rcb_env_version,
        criteria=(
            f"reference passed {repeat} of {repeat} runs; the masked and `pass` bodies failed; "
            f"mutation score >= {threshold} (seed {report.seed}, at most {report.cap} mutants "
            "per snippet)"
        ),
        threshold=threshold,
        seed=report.seed,
        cap=report.cap,
        snippets=tuple(
            SubsetEntry(id=s.id, score=s.score or 0.0, killed=s.killed, survived=s.survived)
            for s in keep
        ),
    )
