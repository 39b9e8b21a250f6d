"""Leak audit: can any distinctive line of a snippet's answer be read from inside its sandbox?

For every snippet, the sandbox the agent would get is opened and a scanner runs INSIDE it (so it
sees exactly what the agent can see): the workspace, ``/tmp``, the home folder, the interpreter's
environment (venv and site-packages) and the environment variables, with git objects inflated
wherever a repository lies (loose objects, and pack files with their deltas applied). The answer
never enters the sandbox: the scanner receives only SHA-256 hashes of normalised answer lines and
reports which it found, and where.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import json
import keyword
import shutil
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rcb_env import guest
from rcb_env.sandbox import SandboxFactory
from rcb_env.task import environments as envs
from rcb_env.task.loader import bundled_root, is_hidden, load_pset
from rcb_env.task.models import Paper, Pset, Snippet

#: Shorter lines (``return x``) are too common to mean anything.
MIN_CHARS = 24

SCANNER_SOURCE = guest.source("scanner")


FindingKind = Literal["paper_text", "sibling", "vendored", "environment", "git", "variable"]


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True)

    snippet_id: str
    path: str
    """Where the line was found, as seen from inside the sandbox (``$NAME``: a variable)."""
    line: str
    """The answer line that was found."""
    kind: FindingKind = "sibling"
    """What holds it: the paper's own text, a sibling file or a vendored package of the
    repository, the interpreter's environment, git objects, an environment variable."""
    accepted: str | None = None
    """Why this is the benchmark's design (the overlay's ``audit_accepted``), or None: a leak."""


def _norm(line: str) -> str:
    return " ".join(line.split())


def _hash(line: str) -> str:
    return hashlib.sha256(line.encode()).hexdigest()[:32]


_GENERIC_NAMES = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {"self", "cls"}


def is_generic(line: str) -> bool:
    """A line any Python code could hold: its names are all keywords and builtins, with no
    literal of its own (``raise NotImplementedError``, ``except ZeroDivisionError:``). Such a
    line proves nothing wherever it is found."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    for t in tokens:
        if t.type in (tokenize.NUMBER, tokenize.STRING):
            return False
        if t.type == tokenize.NAME and t.string not in _GENERIC_NAMES:
            return False
    return True


def needles(snippet: Snippet) -> dict[str, str]:
    """hash -> line, for the answer's distinctive lines: long enough, not comments, not made of
    keywords and builtins alone (:func:`is_generic`), and not already in the masked file the
    agent is given anyway."""
    shown = {_norm(line) for line in snippet.masked_text.splitlines()}
    out = {}
    for line in snippet.reference_body.splitlines():
        n = _norm(line)
        if len(n) >= MIN_CHARS and not n.startswith("#") and n not in shown and not is_generic(n):
            out[_hash(n)] = n
    return out


def _scan(
    factory: SandboxFactory, paper: Paper, snippet: Snippet, wanted: dict[str, str], roots: str
) -> list[tuple[str, str]]:
    sandbox = factory.create(paper, snippet)
    try:
        (sandbox.control / "audit-wanted").write_text("\n".join(wanted))
        shutil.copyfile(SCANNER_SOURCE, sandbox.control / "audit.py")
        ctl = sandbox.control_inside
        command = f"python {ctl}/audit.py {MIN_CHARS} {ctl}/audit-wanted {roots}"
        result = sandbox.exec(command, timeout_s=1800)
        hits = []
        for line in result.stdout.splitlines():
            path, _, h = line.rpartition("\t")
            if h in wanted:
                hits.append((path, h))
        return hits
    finally:
        sandbox.close()


def _environment_key(factory: SandboxFactory, paper: Paper) -> str:
    """What a paper's sandboxes share read-only with other papers' (an interpreter, an image)."""
    own = factory.impl.environment_key(paper)
    if own is not None:
        return own
    if factory.config.python is not None:
        return str(factory.config.python)
    return str(envs.python_for(paper))


def classify(paper: Paper, path: str) -> FindingKind:
    """What kind of place a finding's path is (as seen inside the sandbox)."""
    if path.startswith("$"):
        return "variable"
    if "/objects/" in path or path.endswith(".pack"):
        return "git"
    if not path.startswith("./"):
        return "environment"
    rel = path[2:]
    if rel == paper.paper_file:
        return "paper_text"
    own = {str(Path(f.path).parent) for f in paper.annotated_files}
    folder = Path(rel).parent
    while str(folder) not in ("", "."):
        if str(folder) in own:
            break
        if (paper.root / folder / "__init__.py").is_file():
            return "vendored"  # a package of its own inside the repository
        folder = folder.parent
    return "sibling"


def _accepted(paper: Paper, path: str) -> str | None:
    if path.startswith("./"):
        rel, kinds = path[2:], {"paper_text", "sibling", "vendored", "other"}
    elif "/site-packages/" in path:
        rel, kinds = path.split("/site-packages/", 1)[1], {"environment"}
    else:
        return None
    for entry in paper.overlay.audit_accepted:
        if entry.kind in kinds and is_hidden(rel, (entry.path,)):
            return f"{entry.kind}: {entry.reason}"
    return None


def _finding(paper: Paper, snippet_id: str, path: str, line: str) -> Finding:
    return Finding(
        snippet_id=snippet_id,
        path=path,
        line=line,
        kind=classify(paper, path),
        accepted=_accepted(paper, path),
    )


def audit(
    pset: Pset, factory: SandboxFactory, on_done: Callable[[str], None] | None = None
) -> list[Finding]:
    """Every finding for every snippet.

    Read-only content that many snippets share is searched once for all of their answers: the
    interpreter's environment (prefix, site-packages; /tmp and home too) once per environment
    (papers with the same interpreter or image share it), the repository once per paper. In the
    environment, a file holding a single line of a longer answer is an idiom the library shares
    (reported, accepted); a copy of the answer holds several.
    What differs between a paper's snippets, the annotated files as each snippet's workspace
    shows them, is checked per snippet from the template the sandbox is made from.
    """
    findings: list[Finding] = []
    env_roots = '/tmp "$HOME" "$(python -c \'import sys; print(sys.prefix)\')"'
    site = "$(python -c 'import site; print(\" \".join(site.getsitepackages()))')"
    papers = [p for p in pset.papers if p.snippets]
    per_snippet = {s.id: needles(s) for p in papers for s in p.snippets}
    groups: dict[str, list[Paper]] = {}
    for paper in papers:
        groups.setdefault(_environment_key(factory, paper), []).append(paper)
    for members in groups.values():
        union = {h: ln for p in members for s in p.snippets for h, ln in per_snippet[s.id].items()}
        if not union:
            continue
        first = members[0]
        hits = _scan(factory, first, first.snippets[0], union, f"{env_roots} {site}")
        for p in members:
            for s in p.snippets:
                mine = per_snippet[s.id]
                per_file: dict[str, list[str]] = {}
                for path, h in hits:
                    if h in mine:
                        per_file.setdefault(path, []).append(mine[h])
                for path, lines in per_file.items():
                    for line in lines:
                        f = _finding(p, s.id, path, line)
                        if f.kind == "environment" and len(lines) == 1 and len(mine) > 1:
                            # One line of a longer answer in an installed library: a common
                            # idiom (`attn = F.softmax(attn, dim=-1)`), not a copy of the answer.
                            why = (
                                f"environment: an installed library has 1 of the {len(mine)} "
                                "answer lines, an idiom rather than a copy of the answer"
                            )
                            f = f.model_copy(update={"accepted": why})
                        findings.append(f)
    for paper in papers:
        union = {h: ln for s in paper.snippets for h, ln in per_snippet[s.id].items()}
        annotated = {f"./{f.path}" for f in paper.annotated_files}
        if union:
            for path, h in _scan(factory, paper, paper.snippets[0], union, "."):
                if path in annotated:
                    continue  # differs per snippet: checked below
                for s in paper.snippets:
                    if h in per_snippet[s.id]:
                        findings.append(_finding(paper, s.id, path, union[h]))
        for s in paper.snippets:
            template = factory.template(paper, s)
            for rel in sorted(annotated):
                text = (template / rel[2:]).read_text(encoding="utf-8", errors="replace")
                found = {_hash(_norm(line)) for line in text.splitlines()}
                for h in per_snippet[s.id].keys() & found:
                    findings.append(_finding(paper, s.id, rel, per_snippet[s.id][h]))
            if on_done is not None:
                on_done(s.id)
    return findings


def findings_json(findings: list[Finding]) -> str:
    return json.dumps([f.model_dump() for f in findings], indent=2)


#: The bundled positive control: a task whose repository deliberately holds its answer.
CANARY_PSET = "audit-canary"
CANARY_LEAK = "./notes/ema_notebook_export.py"


def canary_root() -> Path:
    return bundled_root() / CANARY_PSET


def control(factory: SandboxFactory) -> list[Finding]:
    """Audit the bundled canary task. The result must name its seeded leak; if it does not,
    this backend hides something from the scanner and a clean audit means nothing."""
    return audit(load_pset(canary_root()), factory)


def audit_with_control(
    pset: Pset, factory: SandboxFactory, on_done: Callable[[str], None] | None = None
) -> tuple[list[Finding], list[Finding]]:
    """:func:`audit` of ``pset`` and the :func:`control`, in one pass: the canary's answers are
    searched for in the same environment scans as the pset's (the bundled canary shares its
    interpreter with the bundled tasks; an environment scan is most of an audit's time), and its
    repository in a sandbox of its own as always. Returns (the pset's findings, the control's)."""
    canary = load_pset(canary_root())
    roots = {p.id: p.root for p in pset.papers}
    if any(roots.get(p.id, p.root) != p.root for p in canary.papers):
        # another paper under a canary paper's id: the two must not be mixed up
        return audit(pset, factory, on_done), control(factory)
    extra = tuple(p for p in canary.papers if p.id not in roots)
    found = audit(pset.model_copy(update={"papers": pset.papers + extra}), factory, on_done)
    ours = {s.id for s in pset.snippets}
    theirs = {s.id for s in canary.snippets}
    return [f for f in found if f.snippet_id in ours], [f for f in found if f.snippet_id in theirs]
