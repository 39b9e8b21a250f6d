"""The documentation as a reader meets it: the site builds with --strict, the README stays short
and links only to pages that exist, and every code block marked as offline runs.

A block is marked by an HTML comment on the line before its fence (see docs/development.md):
``<!-- offline -->``, or ``<!-- offline bwrap -->`` when it runs bubblewrap sandboxes. In a
``bash`` block every line is a command (the block runs as one script); in a ``console`` block
only the lines after a ``$`` prompt are; a ``python`` block runs as a script. Each block runs in
a fresh temporary folder, with ``rcb-env`` and ``.venv/bin/...`` resolved to this checkout's
virtual environment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
#: The virtual environment's bin folder (the one running these tests).
BIN = Path(sys.executable).parent
MAX_README_LINES = 200
#: Seconds one block may take (the slowest, a whole oracle run, takes about ten).
BLOCK_TIMEOUT_S = 120

_MARKER = re.compile(r"^<!--\s*offline(?P<tags>(?:\s+[a-z]+)*)\s*-->\s*$")
_FENCE = re.compile(r"^```(?P<lang>[A-Za-z]*)\s*$")
_LANGS = ("bash", "console", "python")
_TAGS = frozenset({"bwrap"})
# a Markdown link's target: [text](target)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    """One marked code block: where it is, its language, its text and its tags."""

    where: str
    lang: str
    code: str
    tags: frozenset[str]

    def script(self) -> str:
        """The block as a script to run: commands with this checkout's binaries."""
        if self.lang == "python":
            return self.code
        lines = self.code.splitlines()
        if self.lang == "console":
            lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
        commands = [_venv(ln) for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
        return "\n".join(commands) + "\n"


def _venv(command: str) -> str:
    """``.venv/bin/X`` and a leading ``rcb-env`` as this checkout's binaries."""
    command = re.sub(r"(?<![\w./-])\.venv/bin/", f"{BIN}/", command)
    return re.sub(r"^rcb-env(?=\s|$)", str(BIN / "rcb-env"), command)


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _parse(page: Path) -> tuple[list[Block], list[str]]:
    """The page's marked blocks, and the problems with its markers."""
    blocks: list[Block] = []
    problems: list[str] = []
    lines = page.read_text().splitlines()
    rel = page.relative_to(REPO)
    for i, line in enumerate(lines):
        marker = _MARKER.match(line)
        if marker is None:
            continue
        where = f"{rel}:{i + 1}"
        tags = frozenset(marker["tags"].split())
        fence = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if fence is None or fence["lang"] not in _LANGS:
            problems.append(f"{where}: the marker is not followed by a {'/'.join(_LANGS)} block")
            continue
        if not tags <= _TAGS:
            problems.append(f"{where}: unknown tags {sorted(tags - _TAGS)}")
            continue
        try:
            end = lines.index("```", i + 2)
        except ValueError:
            problems.append(f"{where}: the block is not closed")
            continue
        code = "\n".join(lines[i + 2 : end]) + "\n"
        blocks.append(Block(where=where, lang=fence["lang"], code=code, tags=tags))
    return blocks, problems


def _collect() -> tuple[list[Block], list[str]]:
    """Every marked block of the README and the docs (identical blocks once)."""
    seen: set[tuple[str, str]] = set()
    blocks: list[Block] = []
    problems: list[str] = []
    for page in _pages():
        found, wrong = _parse(page)
        problems += wrong
        for block in found:
            if (block.lang, block.code) not in seen:
                seen.add((block.lang, block.code))
                blocks.append(block)
    return blocks, problems


BLOCKS, MARKER_PROBLEMS = _collect()


def _param(block: Block) -> object:
    marks = [pytest.mark.slow]
    if "bwrap" in block.tags:
        marks.append(pytest.mark.bwrap)
    return pytest.param(block, marks=marks, id=block.where)


def test_offline_blocks_are_found_and_well_marked() -> None:
    assert not MARKER_PROBLEMS, MARKER_PROBLEMS
    assert len(BLOCKS) >= 5, [b.where for b in BLOCKS]
    scripts = "".join(b.script() for b in BLOCKS)
    for command in ("rcb-env --help", "rcb-env tasks", "rcb-env eval", "rcb-env summary"):
        assert command in scripts, f"no offline block runs {command!r}"
    assert any(b.where.startswith("README.md") for b in BLOCKS), "the README's tour is not run"


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_offline_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if "bwrap" in block.tags:
        request.getfixturevalue("require_bwrap")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    if block.lang == "python":
        argv = [str(BIN / "python"), "-c", block.script()]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", block.script()]
    try:
        done = subprocess.run(
            argv,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT_S} s:\n{block.code}")
    assert done.returncode == 0, (
        f"{block.where} exited {done.returncode}:\n{block.code}\n"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )


def test_readme_is_short_and_links_only_to_docs_pages_that_exist() -> None:
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    top = "\n".join(lines[:25])
    assert "\nbash scripts/install.sh && .venv/bin/rcb-env eval --agent oracle --jobs 2\n" in top
    assert "\nmake test\n" in top
    targets = _LINK.findall(text)
    assert targets, "the README links to no docs page"
    for target in targets:
        assert not re.match(r"[a-z]+:", target), f"README links outside the docs: {target}"
        path = target.split("#", 1)[0]
        assert path.startswith("docs/"), f"README links outside the docs: {target}"
        assert path.endswith(".md"), f"README links to a file that is no docs page: {target}"
        assert (REPO / path).is_file(), f"README links to a missing page: {target}"


@pytest.mark.slow
def test_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert (site / "index.html").is_file()
    assert (site / "glossary" / "index.html").is_file()
    assert "rcb_env.episode.RcbEnv" in (site / "api" / "episode" / "index.html").read_text()
