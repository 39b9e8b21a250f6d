"""Leak audit: can any distinctive line of a snippet's answer be read from inside its sandbox?

For every snippet, the sandbox the agent would get is opened and a scanner runs INSIDE it (so it
sees exactly what the agent can see): the workspace, ``/tmp``, the home folder, the interpreter's
environment (venv and site-packages) and the environment variables, with git objects inflated
wherever a repository lies (loose objects, and pack files with their deltas applied). The answer
never enters the sandbox: the scanner receives only SHA-256 hashes of normalised answer lines and
reports which it found, and where.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rcb_env.sandbox import SandboxFactory
from rcb_env.task.loader import bundled_root, load_pset
from rcb_env.task.models import Paper, Pset, Snippet

#: Shorter lines (``return x``) are too common to mean anything.
MIN_CHARS = 24

SCANNER_SOURCE = Path(__file__).with_name("_scanner.py")


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True)

    snippet_id: str
    path: str
    """Where the line was found, as seen from inside the sandbox (``$NAME``: a variable)."""
    line: str
    """The answer line that was found."""


def _norm(line: str) -> str:
    return " ".join(line.split())


def _hash(line: str) -> str:
    return hashlib.sha256(line.encode()).hexdigest()[:32]


def needles(snippet: Snippet) -> dict[str, str]:
    """hash -> line, for the answer's distinctive lines: long enough, not comments, and not
    already in the masked file the agent is given anyway."""
    shown = {_norm(line) for line in snippet.masked_text.splitlines()}
    out = {}
    for line in snippet.reference_body.splitlines():
        n = _norm(line)
        if len(n) >= MIN_CHARS and not n.startswith("#") and n not in shown:
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


def audit(
    pset: Pset, factory: SandboxFactory, on_done: Callable[[str], None] | None = None
) -> list[Finding]:
    """Every finding for every snippet. The environment (interpreter, site-packages, /tmp, home,
    variables) is scanned once per paper for all of its snippets' lines; each workspace once."""
    findings: list[Finding] = []
    env_roots = '/tmp "$HOME" "$(python -c \'import sys; print(sys.prefix)\')"'
    site = "$(python -c 'import site; print(\" \".join(site.getsitepackages()))')"
    for paper in pset.papers:
        if not paper.snippets:
            continue
        per_snippet = {s.id: needles(s) for s in paper.snippets}
        union = {h: line for n in per_snippet.values() for h, line in n.items()}
        if union:
            for path, h in _scan(factory, paper, paper.snippets[0], union, f"{env_roots} {site}"):
                for s in paper.snippets:
                    if h in per_snippet[s.id]:
                        findings.append(Finding(snippet_id=s.id, path=path, line=union[h]))
        for s in paper.snippets:
            if per_snippet[s.id]:
                for path, h in _scan(factory, paper, s, per_snippet[s.id], "."):
                    findings.append(Finding(snippet_id=s.id, path=path, line=per_snippet[s.id][h]))
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
