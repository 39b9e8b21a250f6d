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
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rcb_env.sandbox import SandboxFactory
from rcb_env.task.loader import bundled_root, load_pset
from rcb_env.task.models import Paper, Pset, Snippet

#: Shorter lines (``return x``) are too common to mean anything.
MIN_CHARS = 24

_SCANNER = r"""
import hashlib, os, re, sys, zlib
wanted = set(open(sys.argv[1]).read().split())
roots = sys.argv[2:]
seen = set()
LOOSE = re.compile(r"/objects/[0-9a-f]{2}/[0-9a-f]{38}$")
def norm(s): return " ".join(s.split())
def check(text, where):
    for line in text.splitlines():
        n = norm(line)
        if len(n) >= MIN_CHARS:
            h = hashlib.sha256(n.encode()).hexdigest()[:32]
            if h in wanted and (where, h) not in seen:
                seen.add((where, h)); print(where + "\t" + h)
def apply_delta(base, delta, inserts_only=False):
    pos = 0
    def varint():
        nonlocal pos
        value = shift = 0
        while True:
            c = delta[pos]; pos += 1
            value |= (c & 0x7F) << shift; shift += 7
            if not c & 0x80:
                return value
    varint(); varint()
    out = bytearray()
    while pos < len(delta):
        op = delta[pos]; pos += 1
        if op & 0x80:
            off = size = 0
            for i in range(4):
                if op & (1 << i):
                    off |= delta[pos] << (8 * i); pos += 1
            for i in range(3):
                if op & (0x10 << i):
                    size |= delta[pos] << (8 * i); pos += 1
            out += b"\n" if inserts_only else base[off:off + (size or 0x10000)]
        elif op:
            out += delta[pos:pos + op]; pos += op
        else:
            raise ValueError("bad delta")
    return bytes(out)
NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
def pack_objects(data):
    # Every object of a git pack, inflated and with deltas applied to their bases (a delta whose
    # base is not in the pack yields the text it inserts). Stops quietly at what it does not
    # understand.
    if data[:4] != b"PACK":
        return
    pos, view = 12, memoryview(data)
    by_offset, by_sha = {}, {}
    for _ in range(int.from_bytes(data[8:12], "big")):
        try:
            start = pos
            c = data[pos]; pos += 1; kind = (c >> 4) & 7
            while c & 0x80:
                c = data[pos]; pos += 1
            base = None
            if kind == 6:
                c = data[pos]; pos += 1; ofs = c & 0x7F
                while c & 0x80:
                    c = data[pos]; pos += 1; ofs = ((ofs + 1) << 7) | (c & 0x7F)
                base = by_offset.get(start - ofs)
            elif kind == 7:
                base = by_offset.get(by_sha.get(bytes(data[pos:pos + 20])))
                pos += 20
            d, out, fed = zlib.decompressobj(), [], pos
            while not d.eof and fed < len(data):
                chunk = view[fed:fed + 65536]
                out.append(d.decompress(chunk)); fed += len(chunk)
            pos = fed - len(d.unused_data)
            body = b"".join(out)
            if kind in (6, 7):
                if base is None:
                    yield apply_delta(b"", body, inserts_only=True)
                    continue
                kind, body = base[0], apply_delta(base[1], body)
        except (IndexError, ValueError, zlib.error):
            return
        by_offset[start] = (kind, body)
        header = NAMES.get(kind, b"blob") + b" %d\0" % len(body)
        by_sha[hashlib.sha1(header + body).digest()] = start
        yield body
def text(data):
    return None if b"\0" in data[:8192] else data.decode("utf-8", "replace")
for key, value in os.environ.items():
    check(value, "$" + key)
for root in roots:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = os.path.join(dirpath, name)
            is_pack = name.endswith(".pack") and dirpath.endswith("/objects/pack")
            try:
                size = os.path.getsize(path)
                if os.path.islink(path) or size > (512_000_000 if is_pack else 8_000_000):
                    continue
                data = open(path, "rb").read()
            except OSError:
                continue
            if is_pack:
                for obj in pack_objects(data):
                    if (t := text(obj)) is not None:
                        check(t, path)
                continue
            if LOOSE.search(path):
                try: data = zlib.decompress(data).partition(b"\0")[2]
                except zlib.error: continue
            if (t := text(data)) is not None:
                check(t, path)
""".replace("MIN_CHARS", str(MIN_CHARS))


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
        (sandbox.control / "audit.py").write_text(_SCANNER)
        ctl = "/.rcb" if sandbox.backend in ("bwrap", "docker") else str(sandbox.control)
        command = f"python {ctl}/audit.py {ctl}/audit-wanted {roots}"
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
