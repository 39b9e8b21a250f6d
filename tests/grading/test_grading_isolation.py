"""Nothing crosses grading runs, and no run can make the host wait (issue "Two holes in grading
on the default path").

- Host-side reads of what a run wrote never follow a link, never open a FIFO or device, never
  read without a cap (:mod:`rcb_env.untrusted`).
- A kill the tested code could have sent itself is its failure, never a retry.
- Attacks that leave a marker wherever they can (files in every writable file system, keyrings,
  SysV IPC, a surviving process, inherited descriptors) and pass only where an earlier run's
  marker reaches them: they fail on warm and cold grading, in bwrap and Docker, and through the
  eval front door; a correct body with harmless side effects still passes.
"""

from __future__ import annotations

import os
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rcb_env import config
from rcb_env.grading import FailureKind, Grader, GradingConfig, Outcome
from rcb_env.grading.models import GradeResult
from rcb_env.grading.report import EV_FORGED, read_report
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task import Paper, Snippet, bundled_root, load
from rcb_env.untrusted import NotARegularFile, TooLarge, open_beneath, read_beneath
from rcb_env.validation.hacks import _REPLACE_REPORT, ATTACKS, TARGET

_T = TypeVar("_T")
#: What a grading may take beyond its timeout before it counts as hung (a warm run's answer
#: margin is 120 s; these runs end long before).
_MARGIN_S = 60.0
_I = " " * 8
_CROSSING = [name for name in ATTACKS if "marker" in name]
#: Writes, forks, threads, a subprocess and prints: what honest test code does.
HARMLESS = f"""\
{_I}import os, subprocess, sys, tempfile, threading
{_I}for d in (tempfile.gettempdir(), os.environ.get('HOME', '.'), '.', '/dev/shm'):
{_I}    with open(os.path.join(d, 'cache-' + str(os.getpid())), 'w') as f:
{_I}        f.write('x')
{_I}t = threading.Thread(target=lambda: None)
{_I}t.start()
{_I}t.join()
{_I}subprocess.run([sys.executable, '-c', 'print(1)'], check=True, capture_output=True)
{_I}print('side effects done')
{_I}m_hat = self.m / (1 - self.beta1**self.t)
{_I}v_hat = self.v / (1 - self.beta2**self.t)
"""


def within(seconds: float, call: Callable[[], _T]) -> _T:
    """``call()``, which must return within ``seconds`` (a hang fails the test, not the run)."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # handed back to the test
            box.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"did not return within {seconds} s (hung)"
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


# -- host-side reads -----------------------------------------------------------------------------


def test_untrusted_reads_take_regular_files_only_and_never_wait(tmp_path: Path) -> None:
    (tmp_path / "ok").write_bytes(b"fine")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "inner").write_bytes(b"deep")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "outside").write_bytes(b"secret")
    os.symlink(tmp_path / "outside", tmp_path / "link")
    os.symlink("/dev/zero", tmp_path / "zero")
    os.symlink(tmp_path / "dir", tmp_path / "dirlink")
    (tmp_path / "big").write_bytes(b"x" * 1000)

    assert read_beneath(tmp_path, "ok", 100) == b"fine"
    assert read_beneath(tmp_path, "dir/inner", 100) == b"deep"
    for name, why in (
        ("fifo", "a FIFO"),
        ("link", "a symbolic link"),
        ("zero", "a symbolic link"),
        ("dir", "a folder"),
    ):
        with pytest.raises(NotARegularFile, match=why):
            within(5, lambda n=name: read_beneath(tmp_path, n, 100))  # type: ignore[misc]
    with pytest.raises(NotARegularFile):  # a link on the way, not only at the end
        read_beneath(tmp_path, "dirlink/inner", 100)
    with pytest.raises(TooLarge):
        read_beneath(tmp_path, "big", 999)
    assert len(read_beneath(tmp_path, "big", 1000)) == 1000
    with pytest.raises(FileNotFoundError):
        read_beneath(tmp_path, "missing", 10)
    for bad in ("../ok", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="not a path below"):
            open_beneath(tmp_path, bad)


def test_a_report_that_is_not_a_regular_file_is_tampering_at_once(tmp_path: Path) -> None:
    key = b"k" * 64
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    with (tmp_path / "flood").open("wb") as f:
        f.truncate(65 * 1024 * 1024)  # over the cap, sparse
    for name in ("fifo", "zero", "flood"):
        events = within(5, lambda n=name: read_report(tmp_path, n, key))  # type: ignore[misc]
        assert [e["event"] for e in events] == [EV_FORGED], events
        assert "the report cannot be read" in events[0]["why"]


def _four_spaces(body: str) -> str:
    return textwrap.indent(textwrap.dedent(body), "    ")


def test_a_candidate_that_replaces_its_report_fails_and_the_grading_returns(
    math_pset: Path, grader: Grader
) -> None:
    """The FIFO / endless-link / flood attack against the plain local executor (no sandbox
    user: the run may replace the report); the host read must neither wait nor run away."""
    paper = load(math_pset).papers[0]
    body = _four_spaces(_REPLACE_REPORT)
    r = within(
        grader.config.timeout_s + _MARGIN_S,
        lambda: grader.grade(paper, paper.snippet("variance"), body),
    )
    assert (r.outcome, r.kind) == (Outcome.FAILED, FailureKind.TAMPERING), r.detail
    assert "the report cannot be read" in r.detail


def test_a_kill_the_candidate_could_have_sent_itself_is_not_run_again(
    math_pset: Path, grader: Grader, tmp_path: Path
) -> None:
    """Each attempt counts itself in a file of the host's (the local executor does not
    isolate): one attempt, the candidate's failure (the pristine paper passes)."""
    paper = load(math_pset).papers[0]
    count = tmp_path / "attempts"
    body = _four_spaces(
        f"""\
        import os, signal
        with open({str(count)!r}, 'a') as f:
            f.write('x')
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    r = grader.grade(paper, paper.snippet("variance"), body)
    assert (r.outcome, r.kind) == (Outcome.FAILED, FailureKind.KILLED), r.detail
    assert r.attempts == 1
    assert count.read_text() == "x"
    assert "candidate's failure" in r.detail


# -- the attacks on every path ------------------------------------------------------------------


@pytest.fixture(scope="module")
def target() -> tuple[Paper, Snippet]:
    paper = load(bundled_root()).paper(TARGET[0])
    return paper, paper.snippet(TARGET[1])


def _assert_attacks_fail(grader: Grader, paper: Paper, snippet: Snippet, path: str) -> None:
    timeout = grader.timeout_for(paper)
    results: dict[str, GradeResult] = {}
    for name in [*_CROSSING, next(n for n in ATTACKS if "FIFO" in n)]:
        start = time.monotonic()
        r = within(timeout + _MARGIN_S, lambda b=ATTACKS[name]: grader.grade(paper, snippet, b))  # type: ignore[misc]
        results[name] = r
        assert r.outcome is Outcome.FAILED, (name, r.kind, r.detail)
        assert r.attempts == 1, (name, r.discarded)
        assert r.grading_path.startswith(path), (name, r.grading_path)
        assert time.monotonic() - start < timeout + _MARGIN_S
    for name in _CROSSING:
        if "SIGKILL" not in name:
            # It looked everywhere and found nothing an earlier run left.
            assert "CROSSED []" in results[name].stdout, (name, results[name].stdout[-1500:])
    # A correct body with harmless side effects still passes, on the same path.
    honest = grader.grade(paper, snippet, HARMLESS)
    assert honest.passed, honest.detail
    assert honest.grading_path.startswith(path)


@pytest.fixture(scope="module")
def bwrap_factories() -> Iterator[dict[str, SandboxFactory]]:
    from rcb_env.sandbox.backends import bwrap

    reason = bwrap.probe()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"bwrap must work in CI: {reason}")
        pytest.skip(reason)
    factories = {
        "warm": SandboxFactory(SandboxConfig(backend="bwrap")),
        "cold": SandboxFactory(SandboxConfig(backend="bwrap", warm_grading=False)),
    }
    yield factories
    for f in factories.values():
        f.close()


@pytest.mark.bwrap
@pytest.mark.slow
@pytest.mark.parametrize("path", ["warm", "cold"])
def test_nothing_crosses_runs_in_bwrap(
    path: str, target: tuple[Paper, Snippet], bwrap_factories: dict[str, SandboxFactory]
) -> None:
    paper, snippet = target
    grader = Grader(
        GradingConfig(timeout_s=60, candidate_policy=False),
        executor=bwrap_factories[path].grading_executor(paper),
    )
    _assert_attacks_fail(grader, paper, snippet, path)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["warm", "cold"])
def test_nothing_crosses_runs_in_docker(
    path: str, target: tuple[Paper, Snippet], docker_images: str
) -> None:
    paper, snippet = target
    factory = SandboxFactory(
        SandboxConfig(
            backend="docker",
            options={"docker_base": docker_images},
            warm_grading=path == "warm",
        )
    )
    try:
        grader = Grader(
            GradingConfig(timeout_s=60, candidate_policy=False),
            executor=factory.grading_executor(paper),
        )
        _assert_attacks_fail(grader, paper, snippet, path)
    finally:
        factory.close()


@pytest.mark.bwrap
@pytest.mark.slow
def test_the_attacks_score_zero_through_eval_on_the_default_path(
    target: tuple[Paper, Snippet], tmp_path: Path, require_bwrap: None
) -> None:
    """Submitted by a tools agent (the real OpenAI SDK against the scripted server) through
    ``run_eval`` with the defaults (bwrap, warm grading): reward 0, every episode scored, and
    the run returns."""
    from rcb_agents.models import ModelConfig, RetryPolicy
    from rcb_agents.testing import Reply, ScriptedModelServer

    from rcb_env.results import read_records
    from rcb_env.runner import EvalConfig, run_eval

    paper, snippet = target
    names = [*_CROSSING, next(n for n in ATTACKS if "FIFO" in n)]
    pset = load(bundled_root())
    one = paper.model_copy(update={"snippets": (snippet,)})
    pset = pset.model_copy(update={"papers": (one,)})
    script = [Reply(tool_calls=(("submit", {"body": ATTACKS[n]}),)) for n in names]
    with ScriptedModelServer(script) as server:
        cfg = EvalConfig(
            agent="tools",
            model=ModelConfig(
                spec="openai:gpt-4.1",
                base_url=server.openai_url,
                retry=RetryPolicy(attempts=1, scale=0),
            ),
            grading=GradingConfig(timeout_s=60, candidate_policy=False),
            samples=len(names),
        )
        within(len(names) * (60 + _MARGIN_S), lambda: run_eval(pset, cfg, tmp_path / "run"))
    records = read_records(tmp_path / "run" / "episodes.jsonl")
    assert len(records) == len(names)
    for r in records:
        assert r.status == "completed", r.infra_error
        assert r.reward == 0, r.grade
        assert r.grade is not None
        assert r.grade.grading_path == "warm", r.grade.grading_path


def test_the_suite_holds_the_new_classes() -> None:
    assert len(_CROSSING) >= 4
    assert any("SIGKILL" in n for n in _CROSSING)
    assert any("FIFO" in n for n in ATTACKS)
    assert sys.executable  # the fast tests above grade with this interpreter
    assert config.task_python().name.startswith("python")


_ADD_KEY = (
    "python -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    'r = libc.syscall(248, b"user", b"rcb-episode-key", b"x", 1, -3); '
    'print("ADD_KEY", r, ctypes.get_errno())\''
)


def _episode_shell_cannot_add_keys(factory: SandboxFactory, target: tuple[Paper, Snippet]) -> None:
    paper, snippet = target
    sandbox = factory.create(paper, snippet)
    try:
        result = sandbox.exec(_ADD_KEY)
    finally:
        sandbox.close()
    assert result.exit_code == 0, result
    assert "ADD_KEY -1 1" in result.stdout, result.stdout  # EPERM


@pytest.mark.bwrap
@pytest.mark.slow
def test_an_episodes_shell_cannot_leave_keys_for_the_next_in_bwrap(
    target: tuple[Paper, Snippet], bwrap_factories: dict[str, SandboxFactory]
) -> None:
    _episode_shell_cannot_add_keys(bwrap_factories["warm"], target)


@pytest.mark.slow
def test_an_episodes_shell_cannot_leave_keys_for_the_next_in_docker(
    target: tuple[Paper, Snippet], docker_images: str
) -> None:
    factory = SandboxFactory(
        SandboxConfig(backend="docker", options={"docker_base": docker_images})
    )
    try:
        _episode_shell_cannot_add_keys(factory, target)
    finally:
        factory.close()
