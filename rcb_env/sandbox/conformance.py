"""The conformance suite every sandbox backend passes, shipped in the package so that a backend
written outside rcb-env can run it against itself::

    from rcb_env.sandbox.conformance import check_backend
    report = check_backend(SandboxConfig(backend="mine"))
    assert report.ok, report.render()

Each check opens sandboxes for a bundled snippet (``adamw-warmup``, numpy tests) and asserts a
behaviour the rest of rcb-env relies on: exit codes and streams, a persistent shell, timeouts that
kill the whole process tree, file round trips, hidden files absent, reset, closed sandboxes
refusing work, identical patches. Isolating backends also get: no network, read-only system
paths, hidden files unreachable from anywhere, a non-root user, and the memory limit.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from rcb_env import config as settings
from rcb_env.errors import SandboxError
from rcb_env.sandbox import SandboxFactory
from rcb_env.sandbox.backend import backend_class, resolve_backend
from rcb_env.sandbox.base import Limits, Program, Sandbox, SandboxConfig
from rcb_env.task import bundled_root, load
from rcb_env.task.models import Paper

PAPER = "adamw-warmup"
SNIPPET = "bias correction"


class ConformanceFailure(AssertionError):
    """A backend broke a rule of the contract."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceFailure(message)


def live_processes(marker: str, settle_s: float = 5.0) -> list[int]:
    """Pids of this machine's processes whose command line contains ``marker`` (arguments
    joined by NUL). Waits up to ``settle_s`` for the list to empty: a SIGKILLed process can
    linger for a moment."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if marker in "\x00".join(cmdline):
                found.append(proc.pid)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


@dataclass
class Context:
    """What a check gets: the backend's configuration and the bundled paper."""

    config: SandboxConfig
    paper: Paper
    isolating: bool

    def factory(self, limits: Limits | None = None) -> SandboxFactory:
        cfg = self.config if limits is None else self.config.model_copy(update={"limits": limits})
        return SandboxFactory(cfg)

    @contextmanager
    def sandbox(self, limits: Limits | None = None) -> Iterator[Sandbox]:
        f = self.factory(limits)
        try:
            sb = f.create(self.paper, self.paper.snippet(SNIPPET))
            try:
                yield sb
            finally:
                sb.close()
        finally:
            f.close()


Check = Callable[[Context], None]
CHECKS: dict[str, Check] = {}
ISOLATION_CHECKS: dict[str, Check] = {}


def _check(isolation: bool = False) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        (ISOLATION_CHECKS if isolation else CHECKS)[fn.__name__] = fn
        return fn

    return register


@_check()
def exit_codes_and_streams(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        r = sb.exec("echo out; echo err >&2; false")
        expect((r.exit_code, r.stdout, r.stderr) == (1, "out\n", "err\n"), f"got {r!r}")
        expect(sb.exec("(exit 3)").exit_code == 3, "a subshell's exit status is lost")
        r = sb.exec("exit 4")
        expect(r.exit_code == 4, f"exit 4 gave {r.exit_code}")
        expect("new one was started" in r.stderr, "ending the shell is not reported")
        expect(sb.exec("echo still here").stdout == "still here\n", "no shell after exit")


@_check()
def shell_state_persists(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        sb.exec("export RCB_X=41; cd /tmp; y=1")
        got = sb.exec("echo $((RCB_X + y)); pwd").stdout.split()
        expect(got == ["42", "/tmp"], f"variables or cwd lost between commands: {got}")


@_check()
def timeout_kills_the_whole_process_tree(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        r = sb.exec("sleep 321.5 & (sleep 322.5 &) ; sleep 323.5", timeout_s=1)
        expect(r.timed_out and r.exit_code is None, f"not reported as a timeout: {r!r}")
        for marker in ("321.5", "322.5", "323.5"):
            expect(live_processes(f"sleep\x00{marker}") == [], f"sleep {marker} survived")
        expect(sb.exec("echo ok").stdout == "ok\n", "no shell after a timeout")


@_check()
def file_round_trips(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        text = "naïve = 'ünïcode'\nno final newline"
        sb.write_file("sub/new.py", text)
        expect(sb.exec("cat sub/new.py").stdout == text, "a written file reads differently")
        sb.exec("printf 'a\\nb' > made.txt")
        expect(sb.read_file("made.txt") == "a\nb", "a file made by a command reads differently")
        got = sb.changed_files()
        expect(got == ["made.txt", "sub/new.py"], f"changed files: {got}")


@_check()
def hidden_files_are_absent(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        listing = sb.exec("find . -type f").stdout.split()
        shown = set(sb.list_files())
        for hidden in ctx.paper.hidden_paths:
            expect(f"./{hidden}" not in listing, f"{hidden} is in the workspace")
            expect(hidden not in shown, f"{hidden} is listed")
        expect("optim.py" in shown, "the masked file is missing")


@_check()
def reset_restores_the_pristine_workspace(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        before = sb.read_file("optim.py")
        sb.exec("echo junk >> optim.py; touch extra.txt; (sleep 456.5 &)")
        sb.reset()
        expect(sb.read_file("optim.py") == before, "an edit survived reset")
        expect(sb.changed_files() == [], "changes survived reset")
        expect(live_processes("sleep\x00456.5") == [], "a process survived reset")
        expect(sb.exec("ls extra.txt").exit_code != 0, "a new file survived reset")


@_check()
def patch_extraction(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        text = sb.read_file("optim.py")
        sb.write_file("optim.py", text.replace("import numpy as np", "import numpy as np  # e"))
        sb.exec("printf 'x = 1\\n' > added.py; rm schedule.py")
        diff, changed = sb.diff(), sb.changed_files()
    expect("+import numpy as np  # e" in diff, "the edit is not in the diff")
    expect("+x = 1" in diff and "--- a/schedule.py" in diff, "added/removed files not in diff")
    expect(changed == ["added.py", "optim.py", "schedule.py"], f"changed files: {changed}")


@_check()
def a_closed_sandbox_refuses_commands(ctx: Context) -> None:
    f = ctx.factory()
    try:
        sb = f.create(ctx.paper, ctx.paper.snippets[0])
        sb.close()
        try:
            sb.exec("true")
        except SandboxError as exc:
            expect("closed" in str(exc), f"unclear error: {exc}")
        else:
            raise ConformanceFailure("a closed sandbox ran a command")
    finally:
        f.close()


@_check(isolation=True)
def no_network(ctx: Context) -> None:
    script = (
        "import socket\n"
        "print(open('/proc/net/dev').read().count(':'))\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
        "except OSError as e:\n"
        "    print('blocked', e.errno)\n"
    )
    with ctx.sandbox() as sb:
        sb.write_file("net.py", script)
        out = sb.exec("python net.py").stdout.split()
    expect(out[:1] == ["1"], f"interfaces besides lo: {out}")
    expect(out[1:2] == ["blocked"], f"a connection went out: {out}")


@_check(isolation=True)
def system_paths_are_read_only(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        r = sb.exec("touch /usr/rcb-evil /etc/rcb-evil /rcb-evil 2>&1; echo done")
    expect(r.stdout.count("Read-only file system") == 3, f"writable system path: {r.stdout}")


@_check(isolation=True)
def hidden_files_unreachable_anywhere(ctx: Context) -> None:
    with ctx.sandbox() as sb:
        r = sb.exec(f"find / -name optim_ref.py 2>/dev/null; cat {ctx.paper.root}/optim_ref.py")
        expect(r.stdout == "", f"the reference is reachable: {r.stdout[:200]}")
        expect(sb.exec("id -u").stdout.strip() != "0", "commands run as root")


@_check(isolation=True)
def agent_programs_run_isolated(ctx: Context) -> None:
    """An agent program (:meth:`Sandbox.run_program`, an agent CLI's seat) runs in the
    workspace, writes it and its home, reads a folder bound read-only but cannot write it, and
    has no network. Optional: a backend that does not offer agent programs (the base class's
    ``run_program`` refuses them with a clear error) passes without it; agent CLIs are then
    not available on it."""
    script = (
        "import os, socket, sys\n"
        "print(os.getcwd())\n"
        "open('from-program.txt', 'w').write('made')\n"
        "open(os.path.join(os.environ['HOME'], 'state.txt'), 'w').write(os.environ['RCB_X'])\n"
        "print(open(os.path.join(sys.argv[1], 'given.txt')).read())\n"
        "try:\n"
        "    open(os.path.join(sys.argv[1], 'evil.txt'), 'w')\n"
        "    print('wrote')\n"
        "except OSError:\n"
        "    print('read-only')\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
        "    print('connected')\n"
        "except OSError:\n"
        "    print('blocked')\n"
    )
    given = Path(tempfile.mkdtemp(prefix="rcb-conformance-", dir=settings.scratch_dir()))
    try:
        given.chmod(0o755)
        (given / "given.txt").write_text("given")
        (given / "given.txt").chmod(0o644)
        with ctx.sandbox() as sb:
            if type(sb).run_program is Sandbox.run_program:
                return
            program = Program(
                argv=(sb.program_python, "-I", "-c", script, str(given)),
                env={"RCB_X": "x"},
                read_only=(str(given),),
                timeout_s=60,
            )
            r = sb.run_program(program)
            out = r.stdout.split()
            expect(r.exit_code == 0, f"the program failed: {r.stderr[-500:]}")
            expect(out == [sb.workspace_inside, "given", "read-only", "blocked"], f"{out}")
            expect(sb.read_file("from-program.txt") == "made", "its workspace edit is not there")
            expect((sb.program_home / "state.txt").read_text() == "x", "its home is not there")
            expect(not (given / "evil.txt").exists(), "it wrote a read-only folder")
    finally:
        shutil.rmtree(given, ignore_errors=True)


@_check(isolation=True)
def memory_limit(ctx: Context) -> None:
    with ctx.sandbox(Limits(memory_mb=300)) as sb:
        hog = "b = [bytearray(50 * 2**20) for _ in range(40)]; print('survived')"
        r = sb.exec(f'python -c "{hog}"')
        expect("survived" not in r.stdout and r.exit_code != 0, "2 GB fit in a 300 MB limit")
        expect(sb.exec("echo ok").stdout == "ok\n", "no shell after the limit was hit")


@dataclass(frozen=True)
class CheckResult:
    name: str
    error: str | None
    """None if the check passed."""


@dataclass(frozen=True)
class ConformanceReport:
    backend: str
    results: tuple[CheckResult, ...]

    @property
    def ok(self) -> bool:
        return all(r.error is None for r in self.results)

    def render(self) -> str:
        lines = [f"conformance of backend {self.backend}:"]
        for r in self.results:
            lines.append(f"  {'ok  ' if r.error is None else 'FAIL'} {r.name}")
            if r.error is not None:
                lines.append(f"       {r.error}")
        return "\n".join(lines)


def checks_for(backend: str) -> dict[str, Check]:
    """Every check that applies to the backend (isolation checks only to isolating ones)."""
    isolating = backend_class(resolve_backend(backend)).isolating
    return {**CHECKS, **(ISOLATION_CHECKS if isolating else {})}


def context(config: SandboxConfig) -> Context:
    name = resolve_backend(config.backend)
    paper = load(bundled_root()).paper(PAPER)
    return Context(config=config, paper=paper, isolating=backend_class(name).isolating)


def check_backend(config: SandboxConfig, only: tuple[str, ...] = ()) -> ConformanceReport:
    """Run every applicable check (or ``only`` those) against the configured backend."""
    ctx = context(config)
    results = []
    for name, check in checks_for(config.backend).items():
        if only and name not in only:
            continue
        try:
            check(ctx)
        except (ConformanceFailure, SandboxError, OSError) as exc:
            results.append(CheckResult(name, f"{type(exc).__name__}: {exc}"))
        else:
            results.append(CheckResult(name, None))
    return ConformanceReport(resolve_backend(config.backend), tuple(results))
