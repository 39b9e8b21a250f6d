"""The leak audit's scanner. It runs INSIDE a sandbox, under the task's interpreter, so it uses
the standard library only; :mod:`rcb_env.validation.audit` copies this file in and runs it as

    python _scanner.py MIN_CHARS WANTED_FILE ROOT...

``WANTED_FILE`` holds SHA-256 prefixes of normalised answer lines (the answer itself never
enters the sandbox). Every readable text under the roots, every environment variable, and every
git object (loose, or in a pack with its deltas applied) is checked line by line; each hit is
printed as ``<where>\\t<hash>``.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import zlib
from collections.abc import Iterator

LOOSE = re.compile(r"/objects/[0-9a-f]{2}/[0-9a-f]{38}$")
#: Git's object type numbers in a pack (6 and 7 are deltas).
TYPE_NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
OFS_DELTA, REF_DELTA = 6, 7
MAX_FILE = 8_000_000
MAX_PACK = 512_000_000


def norm(line: str) -> str:
    return " ".join(line.split())


class Scanner:
    def __init__(self, wanted: set[str], min_chars: int) -> None:
        self.wanted = {bytes.fromhex(h) for h in wanted}
        self.min_chars = min_chars
        self.seen: set[tuple[str, bytes]] = set()

    def check(self, text: str, where: str) -> None:
        # A line shorter than MIN_CHARS is shorter normalised, and a line repeated in a text is
        # checked once: an environment has millions of lines, most of them short or repeated.
        short = self.min_chars
        sha256 = hashlib.sha256
        for line in dict.fromkeys(ln for ln in text.splitlines() if len(ln) >= short):
            n = norm(line)
            if len(n) < short:
                continue
            h = sha256(n.encode()).digest()[:16]
            if h in self.wanted and (where, h) not in self.seen:
                self.seen.add((where, h))
                print(f"{where}\t{h.hex()}")


def apply_delta(base: bytes, delta: bytes, *, inserts_only: bool = False) -> bytes:
    """Git's delta format: copy ranges of ``base`` and insert literal bytes. With
    ``inserts_only`` (the base is not available) copies become line breaks."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            c = delta[pos]
            pos += 1
            value |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                return value

    varint()  # size of the base
    varint()  # size of the result
    out = bytearray()
    while pos < len(delta):
        op = delta[pos]
        pos += 1
        if op & 0x80:
            offset = size = 0
            for i in range(4):
                if op & (1 << i):
                    offset |= delta[pos] << (8 * i)
                    pos += 1
            for i in range(3):
                if op & (0x10 << i):
                    size |= delta[pos] << (8 * i)
                    pos += 1
            out += b"\n" if inserts_only else base[offset : offset + (size or 0x10000)]
        elif op:
            out += delta[pos : pos + op]
            pos += op
        else:
            raise ValueError("bad delta opcode")
    return bytes(out)


def _inflate(data: bytes, view: memoryview, pos: int) -> tuple[bytes, int]:
    """The zlib stream starting at ``pos``, and the position just after it."""
    d, out, fed = zlib.decompressobj(), [], pos
    while not d.eof and fed < len(data):
        chunk = view[fed : fed + 65536]
        out.append(d.decompress(chunk))
        fed += len(chunk)
    return b"".join(out), fed - len(d.unused_data)


def pack_objects(data: bytes) -> Iterator[bytes]:
    """Every object of a git pack, inflated, with deltas applied to their bases (a delta whose
    base is not in the pack yields the text it inserts). Stops quietly at what it does not
    understand."""
    if data[:4] != b"PACK":
        return
    pos, view = 12, memoryview(data)
    by_offset: dict[int, tuple[int, bytes]] = {}
    by_sha: dict[bytes, int] = {}
    for _ in range(int.from_bytes(data[8:12], "big")):
        try:
            start = pos
            c = data[pos]
            pos += 1
            kind = (c >> 4) & 7
            while c & 0x80:
                c = data[pos]
                pos += 1
            base: tuple[int, bytes] | None = None
            if kind == OFS_DELTA:
                c = data[pos]
                pos += 1
                back = c & 0x7F
                while c & 0x80:
                    c = data[pos]
                    pos += 1
                    back = ((back + 1) << 7) | (c & 0x7F)
                base = by_offset.get(start - back)
            elif kind == REF_DELTA:
                base_at = by_sha.get(bytes(data[pos : pos + 20]))
                base = by_offset.get(base_at) if base_at is not None else None
                pos += 20
            body, pos = _inflate(data, view, pos)
            if kind in (OFS_DELTA, REF_DELTA):
                if base is None:
                    yield apply_delta(b"", body, inserts_only=True)
                    continue
                kind, body = base[0], apply_delta(base[1], body)
        except (IndexError, ValueError, zlib.error):
            return
        by_offset[start] = (kind, body)
        header = TYPE_NAMES.get(kind, b"blob") + b" %d\0" % len(body)
        by_sha[hashlib.sha1(header + body).digest()] = start
        yield body


def as_text(data: bytes) -> str | None:
    return None if b"\0" in data[:8192] else data.decode("utf-8", "replace")


def scan_file(scanner: Scanner, path: str, dirpath: str, name: str) -> None:
    is_pack = name.endswith(".pack") and dirpath.endswith("/objects/pack")
    try:
        if os.path.islink(path) or os.path.getsize(path) > (MAX_PACK if is_pack else MAX_FILE):
            return
        with open(path, "rb") as f:
            head = f.read(8192)
            if b"\0" in head and not is_pack and not LOOSE.search(path):
                return  # binary: nothing to read as text (shared libraries, weights)
            data = head + f.read()
    except OSError:
        return
    if is_pack:
        for obj in pack_objects(data):
            text = as_text(obj)
            if text is not None:
                scanner.check(text, path)
        return
    if LOOSE.search(path):
        try:
            data = zlib.decompress(data).partition(b"\0")[2]
        except zlib.error:
            return
    text = as_text(data)
    if text is not None:
        scanner.check(text, path)


def main(argv: list[str]) -> None:
    min_chars, wanted_file, roots = int(argv[1]), argv[2], argv[3:]
    with open(wanted_file) as f:
        scanner = Scanner(set(f.read().split()), min_chars)
    for key, value in os.environ.items():
        scanner.check(value, "$" + key)
    for root in roots:
        if os.path.isfile(root):
            scan_file(scanner, root, os.path.dirname(root), os.path.basename(root))
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                scan_file(scanner, os.path.join(dirpath, name), dirpath, name)


if __name__ == "__main__":
    main(sys.argv)
