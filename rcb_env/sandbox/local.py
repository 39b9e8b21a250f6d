"""Plain subprocesses: no isolation beyond a process group, rlimits and a wall-clock kill."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from rcb_env.errors import SandboxError
from rcb_env.sandbox.base import ExecResult

_CHUNK = 1 << 20


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _read_capped(f: IO[bytes], limit: int, needles: tuple[str, ...]) -> tuple[str, set[str]]:
    """Head and tail of a captured stream, and which needles occur anywhere in it."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    found: set[str] = set()
    raw_needles = [(n, n.encode()) for n in needles]
    overlap = max((len(b) for _, b in raw_needles), default=1) - 1
    prev = b""
    while raw_needles:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        window = prev + chunk
        for n, b in raw_needles:
            if b in window:
                found.add(n)
        prev = window[-overlap:] if overlap else b""
    f.seek(0)
    if size <= limit:
        return f.read().decode("utf-8", "replace"), found
    half = limit // 2
    head = f.read(half)
    f.seek(size - half)
    tail = f.read(half)
    text = (
        head.decode("utf-8", "replace")
        + f"\n[... {size - 2 * half} bytes truncated ...]\n"
        + tail.decode("utf-8", "replace")
    )
    return text, found


class LocalExecutor:
    """Runs commands as plain child processes of this one, in their own session."""

    def __init__(self, *, output_limit: int = 20_000, scratch: Path | None = None) -> None:
        self.output_limit = output_limit
        self.scratch = scratch

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float,
        needles: tuple[str, ...] = (),
    ) -> ExecResult:
        with (
            tempfile.TemporaryFile(dir=self.scratch) as out,
            tempfile.TemporaryFile(dir=self.scratch) as err,
        ):
            start = time.monotonic()
            try:
                proc = subprocess.Popen(
                    list(argv),
                    cwd=cwd,
                    env=dict(env),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                raise SandboxError(f"cannot start {argv[0]}: {exc}") from exc
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                proc.wait()
            finally:
                # Whatever the program left running in its group dies with it.
                _kill_group(proc.pid)
            duration = time.monotonic() - start
            stdout, found_out = _read_capped(out, self.output_limit, needles)
            stderr, found_err = _read_capped(err, self.output_limit, needles)
        code = proc.returncode
        return ExecResult(
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            timed_out=timed_out,
            stdout=stdout,
            stderr=stderr,
            duration_s=duration,
            found=tuple(n for n in needles if n in found_out | found_err),
        )
