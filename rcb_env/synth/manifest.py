"""A synthesised pset's record (``synth.json`` at its root, beside ``papers.yaml``; the loader
never reads it): where every snippet came from, how hard it is, why every other candidate was
dropped, and which test set it must not be mixed with."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.task.difficulty import parse_range
from rcb_env.task.models import Paper, Pset, task_hash
from rcb_env.task.selection import Subset, make_subset, select_subset

SCHEMA = "rcb-env/synth/1"
MANIFEST = "synth.json"

Level = Literal["easy", "medium", "hard"]
Stage = Literal["propose", "validate", "audit", "mutants"]


class Provenance(Frozen):
    """Where a synthesised snippet came from."""

    paper: str
    file: str
    start: int
    """First line of the region in the source file without markers (1-based)."""
    end: int
    """Last line (inclusive)."""
    source: str
    """The source pset: a benchmark name, or its folder."""
    commit: str | None
    """The source's commit, when it is a catalogued benchmark."""
    file_sha256: str
    """SHA-256 of the source file as published (markers included)."""
    rule: str
    """The proposal rule (:data:`rcb_env.synth.propose.RULES`)."""
    seed: int


class Difficulty(Frozen):
    """What a curriculum sorts on."""

    lines: int
    """The official line weight."""
    distinct_lines: int
    depth: int
    """Nesting depth among the pset's snippets (0: top level)."""
    children: int
    null_passes: bool
    """Whether the masked placeholder or ``pass`` passes the test (never, for a kept one)."""
    mutation_score: float
    """Killed over graded mutants. Grading stops once the verdict is settled (see
    ``mutants_graded``), so for a kept snippet the true score lies between
    ``mutation_score_min`` and this."""
    survived: int
    """Mutants the test let through."""
    level: Level
    mutants: int = 0
    """Mutants made for it (at most the cap)."""
    mutants_graded: int = 0
    """Mutants graded before its verdict was settled."""
    mutation_score_min: float = 0.0
    """Killed over made: the least its full score can be (at or above the threshold)."""


class SynthSnippet(Frozen):
    id: str
    """``<paper>/<name>`` in the synthesised pset."""
    weight: int
    provenance: Provenance
    difficulty: Difficulty


class DroppedCandidate(Frozen):
    id: str
    """``<paper>/<name>`` the candidate had."""
    paper: str
    file: str
    start: int
    end: int
    rule: str
    stage: Stage
    reason: str
    detail: str = ""


class TestSet(Frozen):
    """The evaluation set this training set is kept apart from."""

    source: str
    snippets: dict[str, str]
    """Published snippet id -> its content hash (:func:`rcb_env.task.models.task_hash`)."""
    held_out: tuple[str, ...] = ()
    """Papers left out of synthesis altogether (the by-paper split); empty: none."""


class Manifest(Frozen):
    schema_version: str = SCHEMA
    rcb_env_version: str
    settings: dict[str, object]
    test_set: TestSet
    papers: tuple[str, ...]
    """Papers synthesised from."""
    snippets: tuple[SynthSnippet, ...]
    dropped: tuple[DroppedCandidate, ...]

    def drop_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.dropped:
            out[d.reason] = out.get(d.reason, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def read(root: Path) -> Manifest | None:
    """The manifest of the pset at ``root``, or None (not a synthesised pset)."""
    path = root / MANIFEST
    if not path.is_file():
        return None
    return Manifest.model_validate_json(path.read_text())


def level(lines: int, depth: int, children: int) -> Level:
    """A coarse difficulty: short leaf regions are easy, long or nested ones hard."""
    if lines <= 3 and children == 0:
        return "easy"
    if lines <= 12 and depth + children <= 2:
        return "medium"
    return "hard"


def test_set_mixed(pset: Pset) -> list[str]:
    """What in this selection is a synthesised training set's test set: snippets of the
    selection (outside the training sets) that the training set's manifest names (by id or by
    content hash), or that lie in a paper it holds out. Empty: nothing is mixed."""
    found = manifests(pset)
    if not found:
        return []
    mixed = []
    for paper in pset.papers:
        if paper.root.parent in found:
            continue
        for m in found.values():
            hashes = set(m.test_set.snippets.values())
            for s in paper.snippets:
                if (
                    paper.id in m.test_set.held_out
                    or s.id in m.test_set.snippets
                    or task_hash(s) in hashes
                ):
                    mixed.append(s.id)
    return sorted(set(mixed))


#: The subsets a synthesised pset is chosen by, from its manifest's difficulty records.
LEVEL = "level:"
LINES = "lines:"
MUTATION = "mutation-score:"


def is_synth_subset(name: str) -> bool:
    return name.startswith((LEVEL, LINES, MUTATION))


def manifests(pset: Pset) -> dict[Path, Manifest]:
    """The manifest of each synthesised pset the selection's papers come from."""
    out: dict[Path, Manifest] = {}
    for paper in pset.papers:
        root = paper.root.parent
        if root not in out and (found := read(root)) is not None:
            out[root] = found
    return out


def synth_subset(pset: Pset, name: str) -> Subset:
    """A curriculum's selection of a synthesised pset by its snippets' difficulty records:
    ``level:easy`` (or ``level:easy,medium``; :func:`level`), ``lines:LO:HI`` (line weight in
    [LO, HI]) or ``mutation-score:LO:HI`` (the mutation score, fractions).

    Raises:
        ConfigError: a bad name or range, or no synthesised pset in the selection.
    """
    found = manifests(pset)
    if not found:
        raise ConfigError(
            f"the subset {name!r} chooses by a synthesised pset's difficulty records "
            f"({MANIFEST}): no pset of this selection has one (see `rcb-env synth`)"
        )
    records = [s for m in found.values() for s in m.snippets]
    if name.startswith(LEVEL):
        levels = {x.strip() for x in name.removeprefix(LEVEL).split(",") if x.strip()}
        unknown = levels - {"easy", "medium", "hard"}
        if not levels or unknown:
            raise ConfigError(f"{name!r}: levels are easy, medium and hard (comma-separated)")
        scores = {s.id: float(s.difficulty.lines) for s in records if s.difficulty.level in levels}
        criteria, threshold = f"difficulty level {', '.join(sorted(levels))}", 0.0
    elif name.startswith(LINES):
        low, high = parse_range(name.removeprefix(LINES), unit=False)
        scores = {s.id: float(s.weight) for s in records if low <= s.weight <= high}
        criteria, threshold = f"line weight in [{low:g}, {high:g}]", high
    else:
        low, high = parse_range(name.removeprefix(MUTATION))
        scores = {
            s.id: s.difficulty.mutation_score
            for s in records
            if low <= s.difficulty.mutation_score <= high
        }
        criteria, threshold = f"mutation score in [{low}, {high}]", high
    return make_subset(name, f"{criteria} ({MANIFEST})", scores, threshold)


def select(pset: Pset, name: str) -> Pset:
    """``pset`` narrowed to the synthesised subset ``name`` (:func:`synth_subset`)."""
    return select_subset(pset, synth_subset(pset, name))


def export_metadata(paper: Paper, snippet_id: str) -> dict[str, object]:
    """What an export of a synthesised snippet carries of its record (flat, for a task's
    metadata): its provenance and difficulty, each key prefixed ``synth_``; empty for a
    snippet no manifest names."""
    m = _read_cached(paper.root.parent)
    entry = None if m is None else next((s for s in m.snippets if s.id == snippet_id), None)
    if m is None or entry is None:
        return {}
    p, d = entry.provenance, entry.difficulty
    out: dict[str, object] = {
        "synth_source": p.source,
        "synth_commit": p.commit or "",
        "synth_file": p.file,
        "synth_lines": f"{p.start}-{p.end}",
        "synth_file_sha256": p.file_sha256,
        "synth_rule": p.rule,
        "synth_seed": p.seed,
        "synth_level": d.level,
        "synth_mutation_score": d.mutation_score,
        "synth_test_set": m.test_set.source,
    }
    return out


@functools.lru_cache(maxsize=16)
def _cached(path: Path, mtime_ns: int) -> Manifest | None:
    del mtime_ns
    return read(path)


def _read_cached(root: Path) -> Manifest | None:
    path = root / MANIFEST
    if not path.is_file():
        return None
    return _cached(root, path.stat().st_mtime_ns)
