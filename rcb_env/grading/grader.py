"""Grade a candidate body: fresh pristine copy, insert between the markers, run the test file under
rcb-env's runner, and classify the outcome (code wrong vs environment broken)."""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rcb_env import config
from rcb_env.errors import GradingError, SandboxError
from rcb_env.grading.models import FailureKind, GradeResult, Outcome, TestOutcome, TestStatus
from rcb_env.logs import get_logger
from rcb_env.sandbox import scratch as scratch_dirs
from rcb_env.sandbox.base import ExecResult, Executor
from rcb_env.sandbox.local import LocalExecutor
from rcb_env.task import annotations as ann
from rcb_env.task.loader import OVERLAY_FILE
from rcb_env.task.models import Paper, Snippet

log = get_logger(__name__)

#: The official harness fails a run whose stdout or stderr contains any of these.
OFFICIAL_ERROR_WORDS = ("Error:", "Exception:", "Traceback", "failed")
RUNNER_SOURCE = Path(__file__).with_name("_runner.py")
#: How the grading copy's location appears in reported output.
GRADING_DIR = "/grading"
_PASSTHROUGH_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "LANG", "LC_ALL", "TZ")
_SKIP_DECORATORS = {"skip", "skipIf", "skipUnless", "expectedFailure"}
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}
#: Outcomes of a run killed from outside the candidate's control: run again.
_RETRIED = {FailureKind.KILLED, FailureKind.HOST_OOM}


class GradingConfig(BaseModel):
    """How a test file is run. Per-paper overlays may raise the timeout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = 300.0
    """Wall-clock limit per run (the official harness uses 60 s; ours leaves room for load)."""
    memory_mb: int = 6144
    """Address-space limit of the test process (0: none)."""
    file_size_mb: int = 512
    """Largest file the test process may write (0: none)."""
    threads: int = 1
    """OMP/MKL/OpenBLAS threads, so parallel jobs do not oversubscribe the cores."""
    python: Path | None = None
    """Interpreter for the test file; default: :func:`rcb_env.config.task_python`."""
    output_limit: int = 20_000
    """Bytes of stdout/stderr kept (head and tail)."""
    verify_infra: bool = True
    """Before calling a failure infrastructure, check that the pristine paper passes here; if it
    does, the environment is fine and the failure is the candidate's."""
    kill_retries: int = Field(default=2, ge=0)
    """Extra runs after a run was killed from outside (a signal neither rcb-env nor the sandbox's
    limits sent, or the host's OOM killer). Such kills are usually transient; one that repeats
    on every attempt while the pristine paper passes is the candidate's own doing."""


def expected_tests(test_source: str) -> tuple[str, ...]:
    """``Class.method`` of every test the file itself defines, found statically (so the tested
    code cannot change the count). Methods with a skip or expected-failure decorator are left
    out."""
    try:
        tree = ast.parse(test_source)
    except SyntaxError:
        return ()
    classes: dict[str, ast.ClassDef] = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def base_names(c: ast.ClassDef) -> list[str]:
        out = []
        for b in c.bases:
            if isinstance(b, ast.Name):
                out.append(b.id)
            elif isinstance(b, ast.Attribute):
                out.append(b.attr)
        return out

    def is_test_class(c: ast.ClassDef, seen: frozenset[str] = frozenset()) -> bool:
        for b in base_names(c):
            if b.endswith("TestCase"):
                return True
            if b in classes and b not in seen and is_test_class(classes[b], seen | {c.name}):
                return True
        return False

    def class_skipped(c: ast.ClassDef) -> bool:
        return any(_decorator_name(d) in _SKIP_DECORATORS for d in c.decorator_list)

    def methods(c: ast.ClassDef, seen: frozenset[str] = frozenset()) -> dict[str, bool]:
        found: dict[str, bool] = {}
        for b in reversed(base_names(c)):
            if b in classes and b not in seen:
                found.update(methods(classes[b], seen | {c.name}))
        for node in c.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                "test"
            ):
                found[node.name] = any(
                    _decorator_name(d) in _SKIP_DECORATORS for d in node.decorator_list
                )
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        found.pop(t.id, None)
        return found

    out: list[str] = []
    for name, c in classes.items():
        if is_test_class(c) and not class_skipped(c):
            out.extend(f"{name}.{m}" for m, skipped in methods(c).items() if not skipped)
    return tuple(out)


def _decorator_name(d: ast.expr) -> str:
    if isinstance(d, ast.Call):
        d = d.func
    if isinstance(d, ast.Attribute):
        return d.attr
    if isinstance(d, ast.Name):
        return d.id
    return ""


_STATUS_RANK = {
    TestStatus.PASSED: 0,
    TestStatus.EXPECTED_FAILURE: 0,
    TestStatus.SKIPPED: 1,
    TestStatus.MISSING: 2,
    TestStatus.UNEXPECTED_SUCCESS: 3,
    TestStatus.FAILED: 4,
    TestStatus.ERROR: 5,
}


def read_report(path: Path, key: bytes) -> list[dict[str, Any]]:
    """The runner's events, verified. Each line is ``<hmac> <json>`` with a sequence number. A
    torn last line (process killed mid-write) is dropped; a line with a bad signature, or out of
    sequence, is someone else's writing and becomes a ``forged`` event."""
    events: list[dict[str, Any]] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return events
    lines = raw.split(b"\n")
    expected = 1
    for i, line in enumerate(lines):
        if not line:
            continue
        mac, _, body = line.partition(b" ")
        good = hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).hexdigest().encode())
        event: Any = None
        if good:
            try:
                event = json.loads(body)
            except json.JSONDecodeError:
                event = None
        if not good or not isinstance(event, dict) or event.get("seq") != expected:
            if i == len(lines) - 1 and not raw.endswith(b"\n"):
                break  # torn by a kill
            events.append({"event": "forged", "line": line[:200].decode("utf-8", "replace")})
            continue
        expected += 1
        events.append(event)
    return events


def classify(
    events: list[dict[str, Any]],
    run: ExecResult,
    expected: tuple[str, ...],
) -> tuple[Outcome, FailureKind, str, tuple[TestOutcome, ...]]:
    """Decide the verdict from the runner's events, the process's end and the static test list."""
    statuses: dict[str, tuple[TestStatus, str]] = {}
    import_failures: list[str] = []
    script_error: dict[str, Any] | None = None
    started = done = False
    tampering: list[str] = []
    for e in events:
        kind = e.get("event")
        if kind == "forged":
            tampering.append("a report line not written by the runner")
        elif kind == "tamper":
            tampering.append(f"{', '.join(e.get('what', []))[:300]} changed ({e.get('where')})")
        elif kind == "start":
            started = True
        elif kind == "done":
            done = True
        elif kind == "test":
            try:
                status = TestStatus(str(e.get("status")))
            except ValueError:
                continue
            name = str(e.get("id"))
            previous = statuses.get(name)
            if previous is None or _STATUS_RANK[status] >= _STATUS_RANK[previous[0]]:
                statuses[name] = (status, str(e.get("message", ""))[-2000:])
            if e.get("exc_type") in _IMPORT_ERRORS:
                import_failures.append(str(e.get("import_name") or e.get("message", ""))[:200])
        elif kind == "script_error":
            script_error = e
            if e.get("exc_type") in _IMPORT_ERRORS:
                import_failures.append(str(e.get("import_name") or e.get("message", ""))[:200])
    for name in expected:
        statuses.setdefault(name, (TestStatus.MISSING, ""))
    tests = tuple(TestOutcome(name=n, status=s, message=m) for n, (s, m) in statuses.items())

    if tampering:
        return Outcome.FAILED, FailureKind.TAMPERING, f"tampering: {tampering[0]}", tests
    if run.timed_out:
        return Outcome.FAILED, FailureKind.TIMEOUT, "killed at the wall-clock limit", tests
    if not started:
        return (
            Outcome.INFRA_ERROR,
            FailureKind.RUNNER_CRASH,
            f"the runner did not start (exit {run.exit_code}, signal {run.signal}): "
            f"{run.stderr.strip()[-300:]}",
            tests,
        )
    if run.oom_killed:
        return (
            Outcome.FAILED,
            FailureKind.MEMORY_LIMIT,
            "the sandbox's memory limit was reached; the kernel killed the test process",
            tests,
        )
    if run.host_oom:
        return (
            Outcome.INFRA_ERROR,
            FailureKind.HOST_OOM,
            "killed by the kernel's OOM killer although the sandbox's memory limit was not "
            "reached: memory ran out outside the sandbox",
            tests,
        )
    # Sandboxes report a killed child as exit status 128 + signal (bwrap, docker).
    killed_by = run.signal
    if killed_by is None and not done and run.exit_code is not None and 128 < run.exit_code < 160:
        killed_by = run.exit_code - 128
    if killed_by is not None:
        if killed_by == signal.SIGXCPU:
            return Outcome.FAILED, FailureKind.TIMEOUT, "CPU-time limit exceeded", tests
        if killed_by == signal.SIGXFSZ:
            return Outcome.FAILED, FailureKind.EARLY_EXIT, "file-size limit exceeded", tests
        return (
            Outcome.INFRA_ERROR,
            FailureKind.KILLED,
            f"test process killed by {_signal_name(killed_by)}, which neither rcb-env nor the "
            "sandbox's limits sent",
            tests,
        )
    if import_failures:
        return (
            Outcome.INFRA_ERROR,
            FailureKind.MISSING_DEPENDENCY,
            f"import failed: {import_failures[0]}",
            tests,
        )
    if script_error is not None:
        msg = str(script_error.get("message", "")).strip().splitlines()
        return (
            Outcome.FAILED,
            FailureKind.LOAD_ERROR,
            f"{script_error.get('exc_type')} before the tests finished: {msg[-1] if msg else ''}",
            tests,
        )
    if not done:
        return (
            Outcome.FAILED,
            FailureKind.EARLY_EXIT,
            "process exited before the tests finished",
            tests,
        )
    bad = [
        t
        for t in tests
        if t.status in (TestStatus.FAILED, TestStatus.ERROR, TestStatus.UNEXPECTED_SUCCESS)
    ]
    if bad:
        return (
            Outcome.FAILED,
            FailureKind.TEST_FAILURE,
            f"{len(bad)} of {len(tests)} tests failed: " + ", ".join(t.name for t in bad[:5]),
            tests,
        )
    unpassed = [
        n
        for n in expected
        if statuses[n][0] not in (TestStatus.PASSED, TestStatus.EXPECTED_FAILURE)
    ]
    if unpassed:
        return (
            Outcome.FAILED,
            FailureKind.MISSING_TESTS,
            f"{len(unpassed)} defined tests did not pass: " + ", ".join(unpassed[:5]),
            tests,
        )
    if run.exit_code != 0:
        return Outcome.FAILED, FailureKind.NONZERO_EXIT, f"exit status {run.exit_code}", tests
    return Outcome.PASSED, FailureKind.NONE, f"{len(tests)} tests passed", tests


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return f"signal {number}"


def _copy_ignore(_directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in {".git", "__pycache__", OVERLAY_FILE}}


class Grader:
    """Grades candidate bodies. Thread-safe: every call works in its own fresh copy."""

    def __init__(
        self,
        config_: GradingConfig | None = None,
        *,
        executor: Executor | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.config = config_ or GradingConfig()
        self.scratch = scratch or config.scratch_dir()
        self.executor: Executor = executor or LocalExecutor(
            output_limit=self.config.output_limit, scratch=self.scratch
        )
        # An executor that brings its own interpreter (a container image) decides; else ours.
        own = getattr(self.executor, "interpreter", None)
        self.python = Path(own) if own else (self.config.python or config.task_python())
        self._expected: dict[str, tuple[str, ...]] = {}
        self._health: dict[str, GradeResult] = {}
        self._lock = threading.Lock()

    def expected(self, paper: Paper) -> tuple[str, ...]:
        with self._lock:
            if paper.id not in self._expected:
                source = (paper.root / paper.test_file).read_text(
                    encoding="utf-8", errors="replace"
                )
                self._expected[paper.id] = expected_tests(source)
            return self._expected[paper.id]

    def timeout_for(self, paper: Paper) -> float:
        return paper.overlay.timeout_s or self.config.timeout_s

    def grade(self, paper: Paper, snippet: Snippet, body: str) -> GradeResult:
        """Insert ``body`` between the snippet's markers in a fresh copy and run the tests.

        A run killed from outside is run again (``kill_retries``). An infrastructure verdict on
        a body other than the reference is checked against the pristine paper: if the pristine
        paper passes here, the environment is fine and the failure is the candidate's.

        Raises:
            GradingError: the copy could not be prepared (disk full, pristine tree unreadable).
        """
        result = self._attempts(paper, snippet, body)
        verify = (
            result.is_infra_error
            and self.config.verify_infra
            and body != snippet.reference_body
            and result.kind is not FailureKind.HOST_OOM  # no candidate can cause that
        )
        if verify:
            if result.kind is FailureKind.KILLED:
                # The kill repeated; was it the environment? Ask it now, not from the cache.
                first = paper.snippets[0]
                health = self._attempts(paper, first, first.reference_body)
            else:
                health = self.pristine_health(paper)
            if health.passed:
                every = f", on all {result.attempts} attempts" if result.attempts > 1 else ""
                result = result.model_copy(
                    update={
                        "outcome": Outcome.FAILED,
                        "detail": f"{result.detail}{every} (the pristine paper passes in this "
                        "environment, so this is the candidate's failure)",
                    }
                )
        log.debug("graded", snippet=snippet.id, outcome=result.outcome, kind=result.kind)
        return result

    def pristine_health(self, paper: Paper) -> GradeResult:
        """Grade the untouched paper once (cached): does its reference pass in this environment?"""
        with self._lock:
            cached = self._health.get(paper.id)
        if cached is not None:
            return cached
        first = paper.snippets[0]
        result = self._attempts(paper, first, first.reference_body)
        with self._lock:
            self._health[paper.id] = result
        return result

    def _attempts(self, paper: Paper, snippet: Snippet, body: str) -> GradeResult:
        """Run the tests; run them again while they are killed from outside, up to the limit."""
        discarded: list[str] = []
        while True:
            result = self._run(paper, snippet, body)
            if result.kind not in _RETRIED or len(discarded) >= self.config.kill_retries:
                break
            discarded.append(f"attempt {len(discarded) + 1}: {result.detail}")
            log.warning(
                "grading run killed from outside; running it again",
                snippet=snippet.id,
                detail=result.detail,
            )
        if not discarded:
            return result
        return result.model_copy(
            update={"attempts": len(discarded) + 1, "discarded": tuple(discarded)}
        )

    def _run(self, paper: Paper, snippet: Snippet, body: str) -> GradeResult:
        expected = self.expected(paper)
        workdir = scratch_dirs.make("rcb-grade-", self.scratch)
        try:
            folder = workdir / paper.slug
            try:
                shutil.copytree(paper.root, folder, ignore=_copy_ignore, symlinks=True)
                original = paper.file_text(snippet.file)
                inserted = ann.insert(original, snippet.span, body)
                (folder / snippet.file).write_bytes(inserted.encode())
                rcb = workdir / "_rcb"
                rcb.mkdir()
                shutil.copyfile(RUNNER_SOURCE, rcb / "runner.py")
                key = secrets.token_hex(32).encode()
                (rcb / "key").write_bytes(key)
                (workdir / "home").mkdir()
                (workdir / "tmp").mkdir()
            except OSError as exc:
                raise GradingError(f"cannot prepare a grading copy of {paper.id}: {exc}") from exc
            report = rcb / "report.jsonl"
            mb = 1024 * 1024
            timeout = self.timeout_for(paper)
            argv = [
                str(self.python),
                str(rcb / "runner.py"),
                paper.test_file,
                str(report),
                str(rcb / "key"),
                str(self.config.memory_mb * mb),
                str(self.config.file_size_mb * mb),
                str(int(timeout) + 5),
                snippet.file,
            ]
            try:
                run = self.executor.run(
                    argv,
                    cwd=folder,
                    env=self._env(workdir),
                    timeout_s=timeout,
                    needles=OFFICIAL_ERROR_WORDS,
                    writable=workdir,
                )
            except SandboxError as exc:
                return GradeResult(
                    snippet_id=snippet.id,
                    outcome=Outcome.INFRA_ERROR,
                    kind=FailureKind.SANDBOX,
                    detail=str(exc),
                    official_pass=False,
                )
            outcome, kind, detail, tests = classify(read_report(report, key), run, expected)
            # The copy's random location means nothing to a reader and would make identical
            # runs differ: report it as /grading.
            where = str(workdir)

            def stable(text: str) -> str:
                return text.replace(where, GRADING_DIR)

            tests = tuple(t.model_copy(update={"message": stable(t.message)}) for t in tests)
            return GradeResult(
                snippet_id=snippet.id,
                outcome=outcome,
                kind=kind,
                detail=stable(detail),
                official_pass=run.exit_code == 0 and not run.timed_out and not run.found,
                tests=tests,
                exit_code=run.exit_code,
                timed_out=run.timed_out,
                duration_s=round(run.duration_s, 4),
                stdout=stable(run.stdout),
                stderr=stable(run.stderr),
            )
        finally:
            scratch_dirs.discard(workdir)

    def _env(self, workdir: Path) -> Mapping[str, str]:
        threads = str(self.config.threads)
        path = os.pathsep.join([str(Path(self.python).parent), os.environ.get("PATH", os.defpath)])
        env = {
            "PATH": path,
            "HOME": str(workdir / "home"),
            "TMPDIR": str(workdir / "tmp"),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "Agg",
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
        }
        env.update({k: os.environ[k] for k in _PASSTHROUGH_ENV if k in os.environ})
        return env
