"""A synthesised pset's record (``synth.json`` at its root, beside ``papers.yaml``; the loader
never reads it): where every snippet came from, how hard it is, why every other candidate was
dropped, and which test set it must not be mixed with."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from rcb_env.frozen import Frozen
from rcb_env.task.models import Pset, task_hash

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
    survived: int
    """Mutants the test let through."""
    level: Level


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
    manifests: dict[Path, Manifest] = {}
    for paper in pset.papers:
        root = paper.root.parent
        if root not in manifests and (found := read(root)) is not None:
            manifests[root] = found
    if not manifests:
        return []
    mixed = []
    for paper in pset.papers:
        if paper.root.parent in manifests:
            continue
        for m in manifests.values():
            hashes = set(m.test_set.snippets.values())
            for s in paper.snippets:
                if (
                    paper.id in m.test_set.held_out
                    or s.id in m.test_set.snippets
                    or task_hash(s) in hashes
                ):
                    mixed.append(s.id)
    return sorted(set(mixed))
