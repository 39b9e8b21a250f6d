"""``rcb-env synth``: training snippets proposed from the papers' own code, verified as strictly
as the test set, and written as a pset of their own.

The stages, each the project's own part:

1. coverage (:mod:`rcb_env.synth.coverage`) and proposal (:mod:`rcb_env.synth.propose`), per
   paper: regions the test executes, none touching the test set;
2. every candidate marked at once in a candidate pset (``<out>/.work/candidates``, the
   benchmark's format), loaded by the ordinary loader;
3. :func:`rcb_env.validation.validate.validate` (the reference passes every repeat, the masked
   placeholder and ``pass`` fail), the leak audit (:mod:`rcb_env.validation.audit`) and the
   mutation score (:func:`rcb_env.validation.strength.score_mutants`, its records resumed);
4. the kept candidates written to ``<out>`` as a pset, with ``synth.json``
   (:mod:`rcb_env.synth.manifest`).

Every candidate's final verdict is appended to ``<out>/.work/ledger.jsonl`` as it is reached,
and graded mutants to ``<out>/.work/mutants``: a killed run, run again with the same settings,
neither re-verifies a decided candidate nor re-grades a graded mutant. An infrastructure
failure (a reference that cannot run here, a sandbox that would not start) is never a verdict:
the candidate stays undecided and is tried again on the next run.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from ruamel.yaml import YAML

from rcb_env.catalog import BENCHMARKS
from rcb_env.errors import ConfigError, InfrastructureError
from rcb_env.frozen import Frozen
from rcb_env.grading.grader import GradingConfig
from rcb_env.grading.models import GradeResult
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.synth import coverage
from rcb_env.synth.manifest import (
    MANIFEST,
    Difficulty,
    DroppedCandidate,
    Manifest,
    Provenance,
    Stage,
    SynthSnippet,
    TestSet,
    level,
)
from rcb_env.synth.propose import Dropped, Published, Region, Rules, distinctive, mark, propose
from rcb_env.task import annotations as ann
from rcb_env.task import loader
from rcb_env.task.models import Paper, Pset, task_hash
from rcb_env.task.selection import VERIFIED_THRESHOLD, select_snippets
from rcb_env.validation.dispatcher import Dispatcher
from rcb_env.validation.mutants import Generation
from rcb_env.validation.progress import Meter, quiet
from rcb_env.validation.strength import Case, GradeAll, plan, read_records, score_mutants
from rcb_env.validation.validate import Status, validate
from rcb_env.verdicts import Outcome

WORK = ".work"
LEDGER = "ledger.jsonl"
LOCK = "lock"
SETTINGS = "settings.json"
#: The tracer slows the test down; the coverage run gets this many grading timeouts.
COVERAGE_TIMEOUTS = 3
#: The least timeout of a mutant's test run (seconds).
MUTANT_TIMEOUT_MIN_S = 30.0
REFERENCES = "references.json"


class SynthPlan(Frozen):
    """What ``rcb-env synth`` does (its options by their names)."""

    sandbox: SandboxConfig = SandboxConfig()
    seed: int = 0
    """Seeds the proposal's runs of lines, the per-paper sample and the mutants."""
    jobs: int = Field(default=1, ge=1)
    repeat: int = Field(default=3, ge=1)
    """Runs of each paper's reference (flakiness)."""
    cap: int = Field(default=20, ge=1)
    """Mutants per candidate."""
    threshold: float = Field(default=VERIFIED_THRESHOLD, ge=0, le=1)
    """The least mutation score of a kept snippet (default: the Verified subset's)."""
    max_lines: int = Field(default=80, ge=1)
    limit: int | None = Field(default=None, ge=1)
    """At most this many candidates per paper (a seeded sample), or all."""
    timeout: float | None = None
    holdout: tuple[str, ...] = ()
    """Papers left out of synthesis (the by-paper split): the test set is theirs alone."""
    min_mutants: int = Field(default=3, ge=1)
    """The fewest mutants a kept snippet has: a score of one or two mutants (``self.eps =
    eps`` has one) does not measure how well the test tells right from wrong."""
    mutant_timeout: float = Field(default=10.0, ge=1)
    """A mutant's test run is stopped (the mutant killed) after this many times the paper's
    slowest reference run, at least :data:`MUTANT_TIMEOUT_MIN_S` and at most the paper's own
    timeout (a mutated loop bound that never ends is killed in seconds, not the paper's five
    minutes)."""

    def grading(self) -> GradingConfig:
        return GradingConfig() if self.timeout is None else GradingConfig(timeout_s=self.timeout)

    def settings(self) -> dict[str, Any]:
        """What decides the verdicts (a resumed run must match it)."""
        return self.model_dump(mode="json", exclude={"sandbox", "jobs", "timeout"})


class Verdict(Frozen):
    """One candidate's verdict at a stage (a ledger line): kept or dropped (final), or None:
    it passed ``stage`` and goes on (a resumed run starts it at the next stage)."""

    id: str
    kept: bool | None
    stage: Stage
    reason: str = ""
    detail: str = ""
    score: float | None = None
    survived: int = 0
    killed: int = 0
    made: int = 0


@dataclass
class SynthResult:
    """What a run did: the manifest written, and this invocation's own work."""

    manifest: Manifest
    out: Path
    candidates: int
    decided_now: int
    """Candidates this invocation gave a verdict (a resumed run: only the rest)."""
    undecided: list[str] = field(default_factory=list)
    """Candidates (and papers) left for the next run (infrastructure failures)."""
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    stage_s: dict[str, float] = field(default_factory=dict)


class _Ledger:
    """Append-only verdicts, one fsynced line each; a torn last line (a kill) is ignored."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.verdicts: dict[str, Verdict] = {}
        if path.exists():
            for line in path.read_bytes().splitlines():
                try:
                    v = Verdict.model_validate_json(line)
                except ValidationError:
                    continue
                self.verdicts[v.id] = v
        self._lock = threading.Lock()

    def add(self, verdict: Verdict) -> None:
        with self._lock:
            self.verdicts[verdict.id] = verdict
            with self.path.open("ab") as f:
                f.write((verdict.model_dump_json() + "\n").encode())
                f.flush()
                os.fsync(f.fileno())


def _source_name(pset: Pset) -> tuple[str, str | None]:
    if pset.benchmark is not None and pset.benchmark in BENCHMARKS:
        return pset.benchmark, BENCHMARKS[pset.benchmark].commit
    return str(pset.root), None


def _overlay(pset: Pset) -> Path | None:
    """The pset-level overlay the source was loaded with (it carries the environments)."""
    if pset.benchmark is not None and pset.benchmark in BENCHMARKS:
        return BENCHMARKS[pset.benchmark].overlay_path()
    own = pset.root / loader.OVERLAY_FILE
    return own if own.is_file() else None


def _check_settings(work: Path, settings: dict[str, Any]) -> None:
    path = work / SETTINGS
    if path.exists():
        old = json.loads(path.read_text())
        if old != settings:
            raise ConfigError(
                f"{work.parent} was synthesised with other settings ({old}): run again with "
                "the same ones, or into another folder"
            )
        return
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2, sort_keys=True))


def published_in(text: str, file: str, code: frozenset[str]) -> tuple[Published, str]:
    """The published snippets of one annotated file (its ``text`` with markers) as the
    proposal sees them: their body lines in the marker-free text, which is returned too."""
    spans = ann.parse_spans(text, file)
    markers = sorted(i for s in spans for i in (s.start, s.end))

    def moved(i: int) -> int:  # 0-based index in the original -> 1-based without markers
        return i + 1 - sum(1 for m in markers if m < i)

    ranges = [(moved(s.start + 1), moved(s.end - 1)) for s in spans if s.end - s.start > 1]
    return Published(tuple(ranges), code), ann.strip_markers(text)


def proposals(
    paper: Paper, executed: dict[str, set[int]], rules: Rules
) -> tuple[list[Region], list[Dropped]]:
    """Every candidate of ``paper`` and every region dropped before anything runs."""
    code = frozenset().union(*(distinctive(s.reference_body.splitlines()) for s in paper.snippets))
    regions: list[Region] = []
    dropped: list[Dropped] = []
    for path, original in coverage.code_files(paper).items():
        published, text = published_in(original, path, code)
        try:
            kept, out = propose(path, text, executed.get(path, set()), published, rules)
        except SyntaxError:
            continue  # not Python this interpreter reads (a Python 2 file, a template)
        regions += kept
        dropped += out
    return regions, dropped


def sample(regions: list[Region], limit: int | None, seed: int, paper: str) -> list[Region]:
    """At most ``limit`` of ``regions`` (seeded; any subset of nested regions still nests)."""
    if limit is None or len(regions) <= limit:
        return regions
    chosen = random.Random(f"{seed}:{paper}:sample").sample(regions, limit)
    return sorted(chosen, key=lambda r: (r.file, r.start, -r.end))


def write_pset(source: Pset, papers: dict[str, list[Region]], dest: Path) -> None:
    """``dest`` as a pset: each paper's folder copied, its annotated files without the
    published markers and with a marker pair around each of its ``regions``; ``papers.yaml``
    and the pset-level overlay beside them."""
    dest.mkdir(parents=True, exist_ok=True)
    entries = []
    for paper_id, regions in papers.items():
        paper = source.paper(paper_id)
        target = dest / paper_id
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(
            paper.root, target, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__")
        )
        annotated = [f.path for f in paper.annotated_files]
        files = coverage.code_files(paper)
        for path in sorted({*annotated, *(r.file for r in regions)}):
            mine = [r for r in regions if r.file == path]
            code = files[path] if path in files else paper.file_text(path)
            (target / path).write_bytes(mark(ann.strip_markers(code), mine).encode())
        listed = tuple(dict.fromkeys([*annotated, *sorted({r.file for r in regions})]))
        meta = paper.meta.model_copy(update={"annotated_file_paths": listed})
        entries.append(meta.model_dump(mode="json"))
    text = io.StringIO()
    YAML(typ="safe", pure=True).dump(entries, text)
    (dest / loader.PAPERS_YAML).write_text(text.getvalue())
    overlay = _overlay(source)
    if overlay is not None:
        shutil.copyfile(overlay, dest / loader.OVERLAY_FILE)


#: The stage each stage follows.
_BEFORE: dict[Stage, Stage] = {"validate": "propose", "audit": "validate", "mutants": "audit"}
Check = Callable[[Pset, SandboxFactory, Meter], list[str]]
"""A stage of the checks: the candidates that pass it (the others' verdicts in the ledger)."""


class _Synthesis:
    """One run of :func:`synthesize`: its state and its stages."""

    def __init__(self, source: Pset, plan: SynthPlan, out: Path, dispatcher: Dispatcher) -> None:
        unknown = set(plan.holdout) - {p.id for p in source.papers}
        unknown -= {f.paper for f in source.failures}
        if unknown:
            raise ConfigError(f"--holdout: no paper named {', '.join(sorted(unknown))}")
        self.source, self.plan, self.dispatcher = source, plan, dispatcher
        self.out = out.resolve()
        self.work = self.out / WORK
        _check_settings(self.work, plan.settings())
        self.ledger = _Ledger(self.work / LEDGER)
        self.name, self.commit = _source_name(source)
        self.grading = plan.grading()
        self.regions: dict[str, list[Region]] = {}
        self.dropped: list[DroppedCandidate] = []
        self.undecided: list[str] = []
        self.notes: list[str] = []
        self.stage_s: dict[str, float] = {}

    def coverage(self, paper: Paper, factory: SandboxFactory) -> dict[str, set[int]] | None:
        """The lines the paper's test executes (measured once, kept in the work folder), or
        None when the probe could not run (the paper stays undecided)."""
        cached = self.work / "coverage" / f"{paper.id}.json"
        if cached.is_file():
            return {k: set(v) for k, v in json.loads(cached.read_text()).items()}
        timeout = COVERAGE_TIMEOUTS * max(self.grading.timeout_s, paper.overlay.timeout_s or 0)
        try:
            executor = factory.grading_executor(paper)
            found = coverage.measure(paper, executor, scratch=factory.scratch, timeout_s=timeout)
        except InfrastructureError as exc:
            self.undecided.append(paper.id)
            self.notes.append(f"{paper.id}: coverage could not run: {exc}")
            return None
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps({k: sorted(v) for k, v in found.items()}))
        return found

    def propose(self, factory: SandboxFactory, meter: Meter) -> None:
        rules = Rules(seed=self.plan.seed, max_lines=self.plan.max_lines)
        papers = [p for p in self.source.papers if p.id not in self.plan.holdout]
        with meter("coverage", len(papers)) as bar:
            for p in papers:
                executed = self.coverage(p, factory)
                bar.advance(p.id)
                if executed is None:
                    continue
                found, static = proposals(p, executed, rules)
                chosen = sample(found, self.plan.limit, self.plan.seed, p.id)
                if chosen:
                    self.regions[p.id] = chosen
                self.dropped += [_dropped(f"{p.id}/{d.region.name}", d.region, d) for d in static]

    def drop(self, snippet_id: str, stage: Stage, reason: str, detail: str = "") -> None:
        self.ledger.add(
            Verdict(id=snippet_id, kept=False, stage=stage, reason=reason, detail=detail)
        )

    def validate(self, candidates: Pset, factory: SandboxFactory, meter: Meter) -> list[str]:
        """The candidates whose reference passes every repeat and whose masked and ``pass``
        bodies fail (the rest dropped, or undecided on an infrastructure failure)."""
        with meter("validating", None) as bar:
            report = validate(
                candidates,
                self.grading,
                executor_for=factory.grading_executor,
                jobs=self.plan.jobs,
                repeat=self.plan.repeat,
                on_done=bar.advance,
                scratch=factory.scratch,
            )
        sound: list[str] = []
        for pr in report.papers:
            if pr.reference and all(r.outcome is Outcome.PASSED for r in pr.reference):
                self._reference_s(pr.id, max(r.duration_s for r in pr.reference))
            for sr in pr.snippet_reports:
                if sr.status is Status.OK:
                    sound.append(sr.id)
                elif sr.status is Status.ENVIRONMENT:
                    self.undecided.append(sr.id)  # infrastructure: tried again next run
                elif sr.status is Status.WEAK:
                    which = [
                        w
                        for w, r in (("masked", sr.masked), ("pass", sr.mutant))
                        if r.outcome is Outcome.PASSED
                    ]
                    what = " and ".join(which) or "unreached"
                    self.drop(sr.id, "validate", "null_passes", f"the {what} body passes")
                else:
                    detail = "; ".join(r.detail[:120] for r in pr.reference if r.detail)
                    self.drop(sr.id, "validate", sr.status.value, detail)
        return sound

    def _reference_s(self, paper_id: str, seconds: float | None = None) -> float | None:
        """The paper's slowest passing reference run (seconds), recorded by ``validate`` in the
        work folder (a resumed run reads it); ``seconds``: record it."""
        path = self.work / REFERENCES
        known: dict[str, float] = json.loads(path.read_text()) if path.is_file() else {}
        if seconds is not None:
            known[paper_id] = round(seconds, 3)
            path.write_text(json.dumps(known, indent=2, sort_keys=True))
        return known.get(paper_id)

    def _mutant_timeouts(self, candidates: Pset) -> Pset:
        """``candidates`` with each paper's timeout cut to ``mutant_timeout`` times its slowest
        reference run (at least :data:`MUTANT_TIMEOUT_MIN_S`, at most its own timeout), as
        ``validate`` recorded it before any candidate of the paper passed (a paper without a
        record keeps its own timeout)."""
        papers = []
        for p in candidates.papers:
            ref = self._reference_s(p.id)
            own = p.overlay.timeout_s or self.grading.timeout_s
            if ref is None:
                papers.append(p)
                continue
            cut = mutant_timeout(ref, own, self.plan.mutant_timeout)
            overlay = p.overlay.model_copy(update={"timeout_s": cut})
            papers.append(p.model_copy(update={"overlay": overlay}))
        return candidates.model_copy(update={"papers": tuple(papers)})

    def audit(self, candidates: Pset, factory: SandboxFactory, meter: Meter) -> list[str]:
        """The candidates whose answer the leak audit finds nowhere the solver can read."""
        with self.dispatcher.session(slots=self.plan.jobs):
            findings, _ = self.dispatcher.audit(candidates, factory, False, meter)
        leaks: dict[str, str] = {}
        for f in findings:
            if f.accepted is None:
                leaks.setdefault(f.snippet_id, f"{f.path}: {f.line}")
        clean = []
        for s in candidates.snippets:
            if s.id in leaks:
                self.drop(s.id, "audit", "leak", leaks[s.id])
            else:
                clean.append(s.id)
        return clean

    def score(self, candidates: Pset, factory: SandboxFactory, meter: Meter) -> None:
        """Each candidate's mutation score against the threshold: the final verdicts. Its
        mutants are graded in rounds (:func:`settled_rounds`), none once its verdict is
        settled; each mutant's test run is stopped after ``mutant_timeout`` times the paper's
        reference run (:meth:`_mutant_timeouts`)."""
        plan = self.plan
        generations = plan_mutants(candidates, plan.seed, plan.cap)
        made = {sid: len(g.mutants) for sid, g in generations.items()}
        for sid, n in made.items():
            if n == 0:
                why = generations[sid].error or "no mutant could be made"
                self.drop(sid, "mutants", "no_mutants", why)
            elif n < plan.min_mutants:
                self.drop(sid, "mutants", "few_mutants", f"{n} < {plan.min_mutants} mutants")
        rest = tuple(s.id for s in candidates.snippets if made[s.id] >= plan.min_mutants)
        if not rest:
            return
        candidates = self._mutant_timeouts(select_snippets(candidates, rest))
        records = self.work / "mutants"
        with self.dispatcher.session(slots=plan.jobs):
            grade_all = self.dispatcher.grade_mutants(candidates, factory, self.grading, plan.jobs)
            with meter("mutants", None) as bar:
                strength = score_mutants(
                    candidates,
                    settled_rounds(grade_all, made, plan.threshold, read_records(records)),
                    seed=plan.seed,
                    cap=plan.cap,
                    out=records,
                    on_done=bar.advance,
                    on_planned=bar.planned,
                )
        for st in strength.snippets:
            m = made.get(st.id, 0)
            verdict = settled(st.killed, st.survived, m, plan.threshold)
            if verdict is None:
                self.undecided.append(st.id)  # mutants whose grading failed: the next run
            elif not verdict:
                bound = (m - st.survived) / m
                self.drop(
                    st.id,
                    "mutants",
                    "mutation_score",
                    f"at most {bound:.2f} < {plan.threshold} ({st.survived} of {m} mutants "
                    f"survived, {st.killed + st.survived} graded)",
                )
            else:
                kept = Verdict(
                    id=st.id,
                    kept=True,
                    stage="mutants",
                    score=st.score,
                    survived=st.survived,
                    killed=st.killed,
                    made=m,
                )
                self.ledger.add(kept)

    def verify(self, factory: SandboxFactory, meter: Meter) -> int:
        """Every undecided candidate through the checks, in order, one paper after another (a
        run stopped part way has finished the papers before); how many were pending."""
        root = self.work / "candidates"
        write_pset(self.source, self.regions, root)
        candidates = loader.load_pset(root)
        if candidates.failures:
            raise ConfigError(
                "the candidate pset does not load: "
                + "; ".join(f"{f.paper}: {f.message}" for f in candidates.failures)
            )
        before = dict(self.ledger.verdicts)  # as the last run left it
        pending = tuple(
            s.id for s in candidates.snippets if s.id not in before or before[s.id].kept is None
        )
        for paper in candidates.papers:
            mine = tuple(i for i in pending if i.partition("/")[0] == paper.id)
            if mine:
                self._checks(candidates, mine, before, factory, meter)
        return len(pending)

    def _checks(
        self,
        candidates: Pset,
        pending: tuple[str, ...],
        before: dict[str, Verdict],
        factory: SandboxFactory,
        meter: Meter,
    ) -> None:
        """``pending`` (of one paper) through the checks, each from the stage it reached."""

        def reached(stage: Stage) -> tuple[str, ...]:
            """What a killed run had taken up to ``stage`` (passed the one before it)."""
            if stage == "validate":
                return tuple(i for i in pending if i not in before)
            return tuple(i for i in pending if i in before and before[i].stage == _BEFORE[stage])

        def timed(stage: str, started: float) -> None:
            took = time.monotonic() - started
            self.stage_s[stage] = round(self.stage_s.get(stage, 0.0) + took, 1)

        carried: tuple[str, ...] = ()
        checks: tuple[tuple[Stage, Check], ...] = (
            ("validate", self.validate),
            ("audit", self.audit),
        )
        for name, check in checks:
            ids = carried + reached(name)
            t = time.monotonic()
            passed = check(select_snippets(candidates, ids), factory, meter) if ids else []
            for i in passed:
                self.ledger.add(Verdict(id=i, kept=None, stage=name))
            carried = tuple(passed)
            timed(name, t)
        ids = carried + reached("mutants")
        t = time.monotonic()
        if ids:
            self.score(select_snippets(candidates, ids), factory, meter)
        timed("mutants", t)

    def finish(self) -> Manifest:
        """The kept candidates written to ``out`` as a pset, and its manifest."""
        from rcb_env import __version__

        ids = {f"{p}/{r.name}": r for p, rs in self.regions.items() for r in rs}
        kept = {i: v for i, v in self.ledger.verdicts.items() if v.kept is True and i in ids}
        per_paper: dict[str, list[Region]] = {}
        for sid in kept:
            per_paper.setdefault(sid.partition("/")[0], []).append(ids[sid])
        for sid in kept:  # the check in the command: nothing kept touches the test set
            apart(self.source.paper(sid.partition("/")[0]), ids[sid])
        for child in self.out.iterdir():
            if child.is_dir() and child.name != WORK and child.name not in per_paper:
                shutil.rmtree(child)  # a paper an earlier run wrote and this one keeps nothing of
        write_pset(self.source, per_paper, self.out)
        final = loader.load_pset(self.out)
        snippets = [self._entry(final, sid, ids[sid], v) for sid, v in sorted(kept.items())]
        for sid, v in sorted(self.ledger.verdicts.items()):
            if v.kept is False and sid in ids:
                self.dropped.append(_dropped(sid, ids[sid], v))
        manifest = Manifest(
            rcb_env_version=__version__,
            settings=self.plan.settings(),
            test_set=TestSet(
                source=self.name,
                snippets={s.id: task_hash(s) for s in self.source.snippets},
                held_out=tuple(sorted(self.plan.holdout)),
            ),
            papers=tuple(sorted(self.regions)),
            snippets=tuple(snippets),
            dropped=tuple(self.dropped),
        )
        (self.out / MANIFEST).write_text(manifest.model_dump_json(indent=2))
        return manifest

    def _entry(self, final: Pset, sid: str, r: Region, v: Verdict) -> SynthSnippet:
        paper_id = sid.partition("/")[0]
        s = final.paper(paper_id).snippet(r.name)
        original = coverage.code_files(self.source.paper(paper_id))[r.file]
        children = len(s.children)
        return SynthSnippet(
            id=sid,
            weight=s.weight,
            provenance=Provenance(
                paper=paper_id,
                file=r.file,
                start=r.start,
                end=r.end,
                source=self.name,
                commit=self.commit,
                file_sha256=hashlib.sha256(original.encode()).hexdigest(),
                rule=r.rule,
                seed=self.plan.seed,
            ),
            difficulty=Difficulty(
                lines=s.weight,
                distinct_lines=s.distinct_lines,
                depth=s.depth,
                children=children,
                null_passes=False,
                mutation_score=v.score or 0.0,
                survived=v.survived,
                level=level(s.weight, s.depth, children),
                mutants=v.made,
                mutants_graded=v.killed + v.survived,
                mutation_score_min=round(v.killed / v.made, 4) if v.made else 0.0,
            ),
        )


def plan_mutants(pset: Pset, seed: int, cap: int) -> dict[str, Generation]:
    """Each snippet's generation, as :func:`rcb_env.validation.strength.score_mutants` makes
    it (the same seed, cap and operators)."""
    from rcb_env.validation.mutants import OPERATORS

    return plan(pset, seed=seed, cap=cap, operators=tuple(OPERATORS.names()))[1]


def mutant_timeout(reference_s: float, own_s: float, factor: float) -> float:
    """Seconds a mutant's test run may take: ``factor`` times the reference run, at least
    :data:`MUTANT_TIMEOUT_MIN_S`, at most the paper's own timeout ``own_s``."""
    return min(own_s, max(MUTANT_TIMEOUT_MIN_S, factor * reference_s))


def settled(killed: int, survived: int, made: int, threshold: float) -> bool | None:
    """A candidate's verdict once no further mutant can change it: True (kept: the score is
    at or above ``threshold`` even if every other mutant survives), False (dropped: below it
    even if every other mutant is killed), or None (not yet)."""
    if made and killed >= threshold * made - 1e-9:
        return True
    if made - survived < threshold * made - 1e-9:
        return False
    return None


def settled_rounds(
    grade_all: GradeAll,
    made: dict[str, int],
    threshold: float,
    earlier: Iterable[tuple[str, str]] = (),
) -> GradeAll:
    """``grade_all`` in rounds that stop grading a snippet's mutants once its verdict is
    :func:`settled`. Each round grades, per unsettled snippet, as many of its next mutants as
    could settle it (the fewer of: the kills that would keep it, the survivors that would drop
    it), all snippets' together (the dispatcher's parallelism and warm processes as before).
    ``earlier``: ``(snippet id, status)`` of mutants graded by an earlier run, counted first.
    A killed or survived mutant counts; an excluded one (an infrastructure failure) counts for
    nothing and is tried again by the next run."""
    from math import ceil

    def run(todo: Sequence[Case], done: Callable[[Case, GradeResult], None]) -> None:
        tally: dict[str, list[int]] = {sid: [0, 0] for sid in made}
        for sid, status in earlier:
            if sid in tally and status in ("killed", "survived"):
                tally[sid][status == "survived"] += 1
        queue: dict[str, list[Case]] = {}
        for case in todo:
            queue.setdefault(case.snippet.id, []).append(case)
        lock = threading.Lock()

        def heard(case: Case, result: GradeResult) -> None:
            with lock:
                if not result.is_infra_error:
                    tally[case.snippet.id][result.passed] += 1
            done(case, result)

        while True:
            batch: list[Case] = []
            for sid, pending in queue.items():
                killed, survived = tally[sid]
                m = made.get(sid, 0)
                if not pending or settled(killed, survived, m, threshold) is not None:
                    pending.clear()
                    continue
                to_keep = ceil(threshold * m - 1e-9) - killed
                to_drop = m - survived - ceil(threshold * m - 1e-9) + 1
                n = max(1, min(to_keep, to_drop))
                batch += pending[:n]
                del pending[:n]
            if not batch:
                return
            grade_all(batch, heard)

    return run


def apart(paper: Paper, region: Region) -> None:
    """Refuse a region that touches ``paper``'s published snippets (their lines, either
    direction, or their code), checked again on the source before anything is written.

    Raises:
        TouchesTestSetError: it does.
    """
    code = frozenset().union(*(distinctive(s.reference_body.splitlines()) for s in paper.snippets))
    published, text = published_in(coverage.code_files(paper)[region.file], region.file, code)
    clash = published.clash(region)
    lines = text.splitlines()[region.start - 1 : region.end]
    repeated = published.repeats(lines)
    if clash is not None or repeated is not None:
        why = clash[1] if clash is not None else f"repeats {repeated!r}"
        raise TouchesTestSetError(f"{paper.id}/{region.name} touches the test set: {why}")


class TouchesTestSetError(ConfigError):
    """A synthesised snippet would touch the test set (a bug in the proposal: nothing is
    written)."""


def _dropped(sid: str, r: Region, why: Dropped | Verdict) -> DroppedCandidate:
    stage: Stage = "propose" if isinstance(why, Dropped) else why.stage
    return DroppedCandidate(
        id=sid,
        paper=sid.partition("/")[0],
        file=r.file,
        start=r.start,
        end=r.end,
        rule=r.rule,
        stage=stage,
        reason=why.reason,
        detail=why.detail,
    )


@contextmanager
def _only_run(work: Path) -> Iterator[None]:
    """Hold the work folder for this run alone (a lock the kernel drops when the process
    ends, killed or not).

    Raises:
        ConfigError: another run holds it.
    """
    work.mkdir(parents=True, exist_ok=True)
    path = work / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() or "?"
            raise ConfigError(
                f"another rcb-env synth (pid {holder}) is writing {work.parent}: wait for it, "
                "or stop it and run again to resume"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)


def synthesize(
    source: Pset, plan: SynthPlan, out: Path, dispatcher: Dispatcher, meter: Meter = quiet
) -> SynthResult:
    """Propose, verify and write a training pset from ``source``'s papers into ``out``.

    Raises:
        ConfigError: ``out`` holds a run with other settings, or ``plan`` holds out a paper
            ``source`` does not have.
        TouchesTestSetError: a kept snippet touches the test set (nothing is written).
    """
    started = time.monotonic()
    with _only_run(out.resolve() / WORK):
        run = _Synthesis(source, plan, out, dispatcher)
        factory = SandboxFactory(plan.sandbox)
        try:
            t = time.monotonic()
            run.propose(factory, meter)
            run.stage_s["coverage+propose"] = round(time.monotonic() - t, 1)
            pending = run.verify(factory, meter)
        finally:
            factory.close()
        manifest = run.finish()
    undecided = sorted(set(run.undecided))
    return SynthResult(
        manifest=manifest,
        out=run.out,
        candidates=sum(len(v) for v in run.regions.values()),
        decided_now=pending - sum("/" in u for u in undecided),
        undecided=undecided,
        notes=run.notes,
        wall_s=round(time.monotonic() - started, 1),
        stage_s=run.stage_s,
    )
