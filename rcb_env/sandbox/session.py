"""A persistent shell inside (or outside) a sandbox, driven over pipes.

Each command is written to a control folder and sourced by the long-lived shell with its output
redirected to files there; the shell then prints an end marker on its own stdout, which carries
nothing else. Shell state (cwd, variables) persists between commands. A command that overruns its
timeout, or that ends the shell, costs the session: it is killed as a whole and started afresh.

The control folder is writable inside the sandbox, and the host (root) works in it: a command
file is created afresh (``O_EXCL|O_NOFOLLOW``, whatever stood there removed first), output files
are read only if they are regular files reached without a symbolic link (:mod:`rcb_env.untrusted`),
and the launcher's own messages go to an anonymous file the sandbox cannot reach.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from rcb_env.errors import SandboxError
from rcb_env.execution import ExecResult
from rcb_env.sandbox._io import read_capped
from rcb_env.untrusted import open_beneath

#: What is read of the launcher's messages (bwrap's, docker's) for an error.
_LAUNCHER_LOG_LIMIT = 64 << 10


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
        launcher_env: Mapping[str, str] | None = None,
    ) -> None:
        """``launcher_outside``: nothing inside the sandbox can signal the launcher process (a
        bwrap outside the sandbox's pid namespace, a ``docker exec`` client on the host), so if
        it dies by a signal, the sandbox was killed from outside: an infrastructure failure.
        ``launcher_env``: the launcher's own environment (None: this process's). A launcher
        whose first process stays visible inside the sandbox (bwrap's pid 1 keeps the
        environment it was started with, readable in ``/proc/1/environ``) must be given one
        that holds no secret."""
        self._launcher = launcher
        self._launcher_env = None if launcher_env is None else dict(launcher_env)
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
        # The launcher's own complaints (e.g. bwrap's) land here, for the error message: an
        # anonymous file of the host, out of the sandbox's reach (not in the control folder).
        with tempfile.TemporaryFile() as log:
            try:
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,
                    env=self._launcher_env,
                )
            except OSError as exc:
                raise SandboxError(f"cannot start the sandbox shell ({argv[0]}): {exc}") from exc
            self._probe(log)

    def _probe(self, log: IO[bytes]) -> None:
        """Set up the fresh shell and check that it runs a command; ``log`` has the launcher's
        messages."""
        self._buffer = b""
        # A command that runs `exit N` ends the shell; the trap still reports N.
        assert self._proc is not None
        assert self._proc.stdin is not None
        # It writes to fd 9, a copy of the shell's own stdout: when `exit` runs, the command's
        # redirection of stdout is still in force.
        self._proc.stdin.write(
            f"exec 9>&1; trap 'echo __RCB_EXIT_{self._token} $? >&9' EXIT\n".encode()
        )
        probe = self.run("true", timeout_s=30)
        if probe.exit_code != 0:
            self.kill()
            log.seek(0)
            messages = log.read(_LAUNCHER_LOG_LIMIT).decode(errors="replace")
            why = messages.strip() or probe.stderr.strip()
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
        inside = self._control_inside
        start = time.monotonic()
        try:
            self._write_command(n, command)
        except OSError as exc:
            why = f"the command could not be written to the control folder: {exc}"
            return self._result(n, None, start, note=why)
        marker = f"__RCB_DONE_{self._token}_{n}"
        line = (
            f". {inside}/cmd_{n}.sh > {inside}/out_{n} 2> {inside}/err_{n} < /dev/null; "
            f"echo {marker} $?\n"
        )
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

    def _write_command(self, n: int, command: str) -> None:
        """``cmd_{n}.sh``, created afresh in the control folder (whatever the sandbox put at that
        name, or at ``out_{n}``/``err_{n}``, is removed first, without following it), readable
        inside the sandbox."""
        data = (command + "\n").encode()
        folder = os.open(self._control_host, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in (f"out_{n}", f"err_{n}"):
                _remove(folder, name)
            for attempt in range(3):
                _remove(folder, f"cmd_{n}.sh")
                try:
                    fd = os.open(
                        f"cmd_{n}.sh",
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o644,
                        dir_fd=folder,
                    )
                except FileExistsError:  # planted again meanwhile
                    if attempt == 2:
                        raise
                    continue
                break
        finally:
            os.close(folder)
        try:
            os.fchmod(fd, 0o644)  # readable by the sandbox's user, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def _read_output(self, name: str) -> str:
        """The head and tail of an output file of the control folder; nothing unless it is a
        regular file there (a symbolic link, a FIFO or a folder the command put in its place
        reads as no output)."""
        try:
            with open_beneath(self._control_host, name) as f:
                text, _ = read_capped(f, self._output_limit, ())
        except (OSError, ValueError):
            return ""
        return text

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
        out = self._read_output(f"out_{n}")
        err = self._read_output(f"err_{n}")
        with contextlib.suppress(OSError):
            folder = os.open(self._control_host, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                for name in (f"out_{n}", f"err_{n}", f"cmd_{n}.sh"):
                    with contextlib.suppress(OSError):
                        _remove(folder, name)
            finally:
                os.close(folder)
        if note:
            err = f"{err}\n[rcb-env: {note}]".lstrip("\n")
        return ExecResult(
            exit_code=code,
            timed_out=timed_out,
            stdout=out,
            stderr=err,
            duration_s=time.monotonic() - start,
        )


def _remove(folder: int, name: str) -> None:
    """Remove the entry ``name`` of the folder ``folder`` (a descriptor), whatever it is, without
    following it: a file or link is unlinked; a folder is moved aside under a fresh name (it
    stays in the control folder, which goes with the sandbox)."""
    try:
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        os.rename(name, f".rcb-aside-{secrets.token_hex(8)}", src_dir_fd=folder, dst_dir_fd=folder)
