"""Shared fixtures: synthetic psets written to tmp folders, graded with the current interpreter."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _worker_temp() -> Path | None:
    """Each xdist worker (``make test`` runs two) gets a temporary folder of its own, for itself
    and every process it starts: a test that checks what a run left on the host (the attack
    suite's host check) then sees its own worker's files only. Mode 1777 like /tmp, so the
    sandbox user reaches the scratch folders made in it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix=f"rcb-{worker}-"))
    folder.chmod(0o1777)
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None
    return folder


_SHARED_TEMP = Path(tempfile.gettempdir())
_WORKER_TEMP = _worker_temp()
# Tables read by the CLI tests come out the same width under every runner (xdist's workers
# inherit COLUMNS=80); set before the CLI's consoles are made.
os.environ["COLUMNS"] = "160"

import pytest  # noqa: E402
from ruamel.yaml import YAML  # noqa: E402

from rcb_env import config  # noqa: E402
from rcb_env.grading.grader import Grader, GradingConfig  # noqa: E402
from rcb_env.sandbox import SandboxConfig  # noqa: E402
from rcb_env.sandbox.backends import bwrap  # noqa: E402
from rcb_env.sandbox.backends.local import LocalExecutor  # noqa: E402
from rcb_env.sandbox.conformance import live_processes  # noqa: E402

__all__ = ["live_processes"]

# A tiny paper whose tests need only the standard library.
MATH_CODE = '''\
"""Tiny maths library."""


def mean(xs):
    # <paper2code name="mean">
    # <paper2code name="total">
    total = 0.0
    for x in xs:
        total += x
    # </paper2code name="total">
    return total / len(xs)
    # </paper2code name="mean">


def variance(xs):
    # <paper2code name="variance">
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)
    # </paper2code name="variance">
'''

MATH_TEST = """\
import unittest

from stats import mean, variance
from stats_ref import mean as mean_ref, variance as variance_ref


class TestStats(unittest.TestCase):
    def test_mean(self):
        self.assertAlmostEqual(mean([1, 2, 3, 4]), mean_ref([1, 2, 3, 4]))

    def test_variance(self):
        self.assertAlmostEqual(variance([1, 2, 3, 4]), variance_ref([1, 2, 3, 4]))


if __name__ == "__main__":
    unittest.main()
"""


def strip_markers(code: str) -> str:
    return "".join(line for line in code.splitlines(keepends=True) if "paper2code" not in line)


def write_paper(
    root: Path,
    paper_id: str,
    files: dict[str, str],
    *,
    annotated: Any = "stats.py",
    context: Any = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a paper folder; return its papers.yaml entry."""
    folder = root / paper_id
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if rel.endswith(".tex") else text)
    entry: dict[str, Any] = {
        "id": paper_id,
        "title": f"Paper {paper_id}",
        "first_commit_date": "2025-02-01",
        "annotated_file_paths": annotated,
        "context_file_paths": context,
    }
    entry.update(meta or {})
    return entry


def math_files(code: str = MATH_CODE, test: str = MATH_TEST) -> dict[str, str]:
    return {
        "paper2code_paper.tex": "\\section{Means} The mean is the sum over the count.\n",
        "paper2code_test.py": test,
        "stats.py": code,
        "stats_ref.py": strip_markers(code),
    }


def write_pset(root: Path, entries: list[dict[str, Any]]) -> Path:
    (root / "papers.yaml").write_text(_dump(entries))
    return root


@pytest.fixture
def math_pset(tmp_path: Path) -> Path:
    """A one-paper pset (3 snippets, stdlib tests)."""
    return write_pset(tmp_path, [write_paper(tmp_path, "maths", math_files())])


@pytest.fixture
def grader(tmp_path: Path) -> Grader:
    """Grades with this interpreter (stdlib tests need nothing else), scratch in tmp_path; the
    candidate policy off, so that a body runs and meets the run-time guards (the policy's own
    tests: tests/grading/test_reward_integrity.py)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = GradingConfig(python=Path(sys.executable), timeout_s=30, candidate_policy=False)
    return local_grader(config, scratch=scratch)


def local_grader(config: GradingConfig | None = None, *, scratch: Path | None = None) -> Grader:
    """A grader whose runs go to the local backend's executor (no isolation: for tests of the
    grading rules, whose bodies are ours)."""
    config = config or GradingConfig()
    executor = LocalExecutor(output_limit=config.output_limit, scratch=scratch)
    return Grader(config, executor=executor, scratch=scratch)


#: Fixtures that put a test in a tier: asking for one marks the test (marks per test, from what
#: it really uses; a test that needs neither runs everywhere, in the fast tier).
_TIER_FIXTURES = {"require_bwrap": "bwrap", "docker_images": "docker"}


_HOST_LOCK = _SHARED_TEMP / "rcb-tests-host.lock"
"""Shared by the workers of every run on this machine."""
_HOST_GATE = _SHARED_TEMP / "rcb-tests-host.gate"
"""Taken around every wait for the host lock, so that a waiting exclusive test goes first."""


@pytest.fixture(autouse=True)
def _alone_when_exclusive(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``exclusive`` checks what a run left on the whole host (the sandbox user's
    processes, /dev/shm, containers): it takes the host lock exclusively, every other test
    shares it, so under xdist no other test runs meanwhile.

    flock gives a shared lock to whoever asks while an exclusive one is waiting, so with other
    workers starting test after test the exclusive test could wait for minutes (it did: 166 s).
    Every test therefore takes the gate while it waits for the host lock: an exclusive test
    holds the gate until the tests under way have ended, and no new one starts meanwhile."""
    if _WORKER_TEMP is None:
        yield
        return
    exclusive = request.node.get_closest_marker("exclusive") is not None
    with host_lock(exclusive):
        yield


@contextlib.contextmanager
def host_lock(
    exclusive: bool, lock_path: Path = _HOST_LOCK, gate_path: Path = _HOST_GATE
) -> Iterator[None]:
    """The host lock, shared or exclusive, taken through the gate (see above)."""
    import fcntl

    with open(lock_path, "a") as lock, open(gate_path, "a") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


#: Tests that share one exclusive resource run on one xdist worker, one after another (``make
#: test`` runs the tests not marked exclusive with ``pytest -n 3 --dist loadgroup``): the Docker
#: engine and the images the session builds; Ray (a cluster per test, on Ray's fixed ports);
#: the report's runs (a module fixture of 15-20 s, made once, not on every worker); the agent
#: CLIs' runs (a module fixture per CLI); the served episodes (one server for the module).
_GROUPS = {
    "docker": "docker",
    "test_ray.py": "ray",
    "test_report.py": "report",
    "test_agent_clis.py": "agent-clis",
    "test_serve.py": "serve",
}
#: Files of long tests (tens of seconds each): handed out first, after the groups, so that no
#: worker is left with one of them while the others sit idle at the end of a run.
_LONG = frozenset(
    {
        "test_warm.py",
        "test_reward_integrity.py",
        "test_published.py",
        "test_lmr.py",
        "test_serve_pool.py",
        "test_docs.py",
        "test_cpu_share.py",
        "test_runner.py",
        "test_audit.py",
    }
)


def _order(item: pytest.Item) -> int:
    """Groups first, then long tests, then the rest (a stable sort: the same order on every
    worker, as xdist requires)."""
    if item.get_closest_marker("xdist_group") is not None:
        return 0
    return 1 if item.path.name in _LONG else 2


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, mark in _TIER_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(getattr(pytest.mark, mark))
        if item.get_closest_marker("docker") is not None:
            item.add_marker(pytest.mark.xdist_group(_GROUPS["docker"]))
        elif item.path.name in _GROUPS:
            item.add_marker(pytest.mark.xdist_group(_GROUPS[item.path.name]))
    items.sort(key=_order)


@pytest.fixture(scope="session")
def require_bwrap() -> None:
    """bwrap tests skip on a machine without it, but FAIL in CI (which installs it)."""
    reason = bwrap.probe()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"bwrap must work in CI: {reason}")
        pytest.skip(reason)


@pytest.fixture
def bwrap_config(require_bwrap: None) -> SandboxConfig:
    return SandboxConfig(backend="bwrap", python=config.task_python())


@pytest.fixture
def task_grading() -> GradingConfig:
    """Grading with the task interpreter (readable by the sandbox user); the candidate policy
    off, so that a body runs and meets the run-time guards and the sandbox's limits."""
    return GradingConfig(python=config.task_python(), timeout_s=60, candidate_policy=False)


DOCKER_BASE = os.environ.get("RCB_DOCKER_BASE", "rcb-env/debian-python:bookworm")
REPO = Path(__file__).resolve().parent.parent


def _must_have(what: str, reason: str) -> None:
    if os.environ.get("CI") or os.environ.get("RCB_REQUIRE_DOCKER"):
        pytest.fail(f"{what} is required here: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_images() -> str:
    """A Docker engine and the bundled numpy papers' images (built offline from wheels on a
    Debian base made with mmdebstrap, unless RCB_DOCKER_BASE names another base). Skips without
    an engine on a developer's machine; FAILS in CI."""
    import subprocess

    from rcb_env.sandbox.backends.docker import engine as docker
    from rcb_env.sandbox.backends.docker import images
    from rcb_env.task import bundled_root, load

    reason = docker.probe()
    if reason is not None:
        _must_have("a Docker engine", reason)
    engine = docker.client()
    if DOCKER_BASE == "rcb-env/debian-python:bookworm" and not images.image_exists(
        engine, DOCKER_BASE
    ):
        subprocess.run(["bash", str(REPO / "sandbox" / "build-base.sh"), DOCKER_BASE], check=True)
    wheels = config.rcb_home() / "cache" / "wheels"
    cfg = images.ImageConfig(base=DOCKER_BASE, wheels=wheels)
    pset = load(bundled_root())
    for paper_id in NUMPY_PAPERS:
        images.build(engine, pset.paper(paper_id), cfg)
    return DOCKER_BASE


NUMPY_PAPERS = ("adamw-warmup", "scaled-attention")


def _dump(data: Any) -> str:
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(data, out)
    return out.getvalue()


#: What a test run may leave in the checkout: tools' caches (and Python's bytecode).
_CACHES = (
    ".venv/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    ".grimp_cache/",
    ".import_linter_cache/",
)


def _tree_state() -> set[str] | None:
    """The checkout's changed, untracked and ignored entries (caches aside), or None outside a
    git checkout."""
    import subprocess

    run = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        return None
    entries = set()
    for line in run.stdout.splitlines():
        path = line[3:].strip('"')  # git quotes a path with spaces
        if path.startswith(_CACHES) or "__pycache__/" in path or path.endswith(".pyc"):
            continue
        entries.add(line)
    return entries


_before: list[set[str] | None] = []


def _is_worker(session: pytest.Session) -> bool:
    """An xdist worker (the controller alone checks the checkout, before and after all of them)."""
    return hasattr(session.config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _is_worker(session):
        _before.append(_tree_state())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test writes into the checkout: a run that left anything there fails."""
    if _is_worker(session):
        if _WORKER_TEMP is not None:
            shutil.rmtree(_WORKER_TEMP, ignore_errors=True)
        return
    before = _before[0] if _before else None
    after = _tree_state()
    if before is None or after is None:
        return
    left = sorted(after - before)
    if left:
        sys.stderr.write(
            "\nthe test run changed the checkout (every test works in its own temporary "
            "folder):\n" + "".join(f"  {entry}\n" for entry in left)
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
