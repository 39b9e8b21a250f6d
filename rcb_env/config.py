"""The one module that reads environment variables. Everything else receives settings objects."""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: Where the installer puts the task interpreter (a venv outside any home folder, so that an
#: unprivileged sandbox user can read it). Override with ``RCB_ENV_HOME``.
DEFAULT_HOME = Path("/opt/rcb-env")


def rcb_home() -> Path:
    """Root of rcb-env's machine-wide installation (task venv, sandbox user state)."""
    return Path(os.environ.get("RCB_ENV_HOME", str(DEFAULT_HOME)))


def task_python() -> Path:
    """Interpreter that runs the tasks' test files.

    ``RCB_TASK_PYTHON`` wins; else the installer's task venv; else the current interpreter.
    """
    explicit = os.environ.get("RCB_TASK_PYTHON")
    if explicit:
        return Path(explicit)
    venv_python = rcb_home() / "task-venv" / "bin" / "python"
    if venv_python.exists():
        return venv_python
    return Path(sys.executable)


def scratch_dir() -> Path:
    """Parent folder for per-grading copies: tmpfs when the machine has it (copies on the main
    disk are slow to make and slower to delete under load)."""
    explicit = os.environ.get("RCB_SCRATCH_DIR")
    if explicit:
        return Path(explicit)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    import tempfile

    return Path(tempfile.gettempdir())
