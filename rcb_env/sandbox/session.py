"""A persistent shell inside (or outside) a sandbox, driven over pipes.

Each command is written to a control folder and sourced by the long-lived shell with its output
redirected to files there; the shell then prints an end marker on its own stdout, which carries
nothing else. Shell state (cwd, variables) persists between commands. A command that overruns its
timeout, or that ends the shell, costs the session: it is killed as a whole and started afresh.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rcb_env.errors import SandboxError
from rcb_env.sandbox._io import read_capped
from rcb_env.sandbox.base import ExecResult


class ShellSession:
    """``bash`` started by ``launcher`` (e.g. a bwrap command line, or nothing)."""

    def __init__(
        self,
        launcher: Callable[[], Sequence[str]],
        *,
        control_host: Path,
        control_inside: str,
        output_limit: int = 20_000,
        on_kill: Callable[[], None] | None = None,
        launcher_outside: bool = False,
    ) -> None:
        """``launcher_outside``: nothing inside the sandbox can signal the launcher process (a
        bwrap outside the sandbox's pid namespace, a ``docker exec`` client on the host), so if
        it dies by a signal, the sandbox was killed from outside: an infrastructure failure."""
        self._launcher = launcher
        self._launcher_outside = launcher_outside
        self._control_host = control_host
        self._control_inside = control_inside
        self._output_limit = output_limit
        self._on_kill = on_kill
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._n = 0
        self._token = secrets.token_hex(8)

    def start(self) -> None:
        self._control_host.mkdir(parents=True, exist_ok=True)
        argv = [*self._launcher(), "bash", "--noprofile", "--norc"]
        # The launcher's own complaints (e.g. bwrap's) land here, for the error message.
        launcher_log = self._control_host / "launcher.log"
        try:
            with launcher_log.open("wb") as log:
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,
                )
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox shell ({argv[0]}): {exc}") from exc
        self._buffer = b""
        # A command that runs `exit N` ends the shell; the trap still reports N.
        assert self._proc.stdin is not None
        # It writes to fd 9, a copy of the shell's own stdout: when `exit` runs, the command's
        # redirection of stdout is still in force.
        self._proc.stdin.write(
            f"exec 9>&1; trap 'echo __RCB_EXIT_{self._token} $? >&9' EXIT\n".encode()
        )
        probe = self.run("true", timeout_s=30)
        if probe.exit_code != 0:
            self.kill()
            why = launcher_log.read_text(errors="replace").strip() or probe.stderr.strip()
            raise SandboxError(f"sandbox shell did not come up: {why[:500]}")

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        proc.wait()
        if self._on_kill is not None:
            self._on_kill()

    def run(self, command: str, *, timeout_s: float) -> ExecResult:
        if self._proc is None:
            self.start()
        proc = self._proc
        assert proc is not None
        assert proc.stdin is not None
        assert proc.stdout is not None
        self._n += 1
        n = self._n
        host = self._control_host
        inside = self._control_inside
        (host / f"cmd_{n}.sh").write_text(command + "\n")
        for name in (f"out_{n}", f"err_{n}"):
            (host / name).unlink(missing_ok=True)
        marker = f"__RCB_DONE_{self._token}_{n}"
        line = (
            f". {inside}/cmd_{n}.sh > {inside}/out_{n} 2> {inside}/err_{n} < /dev/null; "
            f"echo {marker} $?\n"
        )
        start = time.monotonic()
        try:
            proc.stdin.write(line.encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._check_killed(proc)
            self.kill()
            return self._result(n, None, start, note="the shell had exited; session restarted")
        deadline = start + timeout_s
        fd = proc.stdout.fileno()
        needle = marker.encode() + b" "
        while True:
            idx = self._buffer.find(needle)
            if idx >= 0:
                rest = self._buffer[idx + len(needle) :]
                nl = rest.find(b"\n")
                if nl >= 0:
                    code = int(rest[:nl].strip() or b"1")
                    self._buffer = rest[nl + 1 :]
                    return self._result(n, code, start)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return self._result(n, None, start, timed_out=True)
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:  # the shell ended (e.g. the command ran `exit`)
                    self._check_killed(proc)
                    exit_marker = f"__RCB_EXIT_{self._token} ".encode()
                    status: int | None = None
                    at = self._buffer.find(exit_marker)
                    if at >= 0:
                        digits = self._buffer[at + len(exit_marker) :].split(b"\n", 1)[0].strip()
                        status = int(digits) if digits.isdigit() else None
                    self.kill()
                    return self._result(
                        n, status, start, note="the command ended the shell; a new one was started"
                    )
                self._buffer += chunk

    def _check_killed(self, proc: subprocess.Popen[bytes]) -> None:
        """Raise SandboxError if the launcher was killed by a signal nobody inside could send."""
        if not self._launcher_outside:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc.returncode is not None and proc.returncode < 0:
            self.kill()
            try:
                name = signal.Signals(-proc.returncode).name
            except ValueError:
                name = f"signal {-proc.returncode}"
            raise SandboxError(f"the sandbox was killed from outside ({name}) during the command")

    def _result(
        self,
        n: int,
        code: int | None,
        start: float,
        *,
        timed_out: bool = False,
        note: str = "",
    ) -> ExecResult:
        out = err = ""
        for name in ("out", "err"):
            path = self._control_host / f"{name}_{n}"
            if path.is_file():
                with path.open("rb") as f:
                    text, _ = read_capped(f, self._output_limit, ())
                if name == "out":
                    out = text
                else:
                    err = text
            path.unlink(missing_ok=True)
        (self._control_host / f"cmd_{n}.sh").unlink(missing_ok=True)
        if note:
            err = f"{err}\n[rcb-env: {note}]".lstrip("\n")
        return ExecResult(
            exit_code=code,
            timed_out=timed_out,
            stdout=out,
            stderr=err,
            duration_s=time.monotonic() - start,
        )
