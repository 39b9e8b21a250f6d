"""Start and stop an ``rcb-env serve`` process for the serve benchmark and acceptance run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPENENV_PYTHON = ROOT / ".venv" / "openenv" / "bin" / "python"
"""OpenEnv's own client lives here (scripts/install.sh, step 7)."""
CLIENT = ROOT / "tests" / "integrations" / "openenv_client.py"


def start(*args: str, timeout_s: float = 120) -> tuple[subprocess.Popen[str], str]:
    """``rcb-env serve <args> --port 0``; the process and its base URL once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rcb_env", "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        sys.stderr.write(line)
        if "base URL " in line:
            return proc, line.split("base URL ", 1)[1].strip()
    proc.kill()
    raise RuntimeError(f"rcb-env serve did not start (exit {proc.wait()})")


def stop(proc: subprocess.Popen[str]) -> int:
    """SIGTERM (the server drains), its exit code."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
