"""The one module that reads environment variables. Everything else receives settings objects.

Variables (all optional):

- ``RCB_ENV_HOME``: rcb-env's machine-wide folder (task interpreter, caches); default
  ``/opt/rcb-env``.
- ``RCB_TASK_PYTHON``: the interpreter that runs the tasks' test files (overrides the task venv).
- ``RCB_SCRATCH_DIR``: where workspaces and grading copies are made (default: ``/dev/shm``).
- ``RCB_DOCKER_BASE``: the base image of the per-paper Docker images.
- ``RCB_SETTINGS_FILE``: the settings file (default ``$RCB_ENV_HOME/settings.json``).
- ``RCB_DOCKERD_RUN``: the folder of the engine ``scripts/with-dockerd.sh start`` keeps running
  (default ``/run/rcb-env-dockerd``).
- ``RCB_RAY_TEMP_DIR``: the session folder of a local Ray this process starts.
- ``RCB_ENV_GRADING_WORKERS``: how many gradings of a process may run at once (RL; default:
  twice the cores, at least 2).
- ``RCB_HARBOR_PYTHON``: the interpreter of a Harbor installation (default: the one
  ``scripts/install.sh`` makes beside rcb-env's venv).

Choices remembered across commands (``rcb-env images build --base`` records the base image,
``--wheels`` the folder of wheels for offline builds) live in the settings file; a variable above
overrides the file.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Where the installer puts the task interpreter (a venv outside any home folder, so that an
#: unprivileged sandbox user can read it).
DEFAULT_HOME = Path("/opt/rcb-env")
DEFAULT_DOCKER_BASE = "python:3.11-slim"


class Settings(BaseSettings):
    """rcb-env's settings from the environment (read afresh by each accessor below, so a change
    of a variable takes effect at once)."""

    model_config = SettingsConfigDict(env_prefix="RCB_", extra="ignore", frozen=True)

    env_home: Path = DEFAULT_HOME
    """``RCB_ENV_HOME``."""
    task_python: Path | None = None
    """``RCB_TASK_PYTHON``."""
    scratch_dir: Path | None = None
    """``RCB_SCRATCH_DIR``."""
    docker_base: str = DEFAULT_DOCKER_BASE
    """``RCB_DOCKER_BASE``."""
    settings_file: Path | None = None
    """``RCB_SETTINGS_FILE``."""
    dockerd_run: Path = Path("/run/rcb-env-dockerd")
    """``RCB_DOCKERD_RUN``."""
    ray_temp_dir: Path | None = None
    """``RCB_RAY_TEMP_DIR``."""
    harbor_python: Path | None = None
    """``RCB_HARBOR_PYTHON``."""
    published_results: Path | None = None
    """``RCB_PUBLISHED_RESULTS``: the paper's results file (ResearchCodeBench's
    ``overall_stats.json``) the difficulty subsets (``--subset hard``) are computed from."""
    env_grading_workers: int | None = Field(default=None, ge=1)
    """``RCB_ENV_GRADING_WORKERS``: how many gradings of a process may run at once (RL)."""


def settings() -> Settings:
    return Settings()


def rcb_home() -> Path:
    """Root of rcb-env's machine-wide installation (task venv, sandbox user state)."""
    return settings().env_home


def task_python() -> Path:
    """Interpreter that runs the tasks' test files.

    ``RCB_TASK_PYTHON`` wins; else the installer's task venv; else the current interpreter.
    """
    current = settings()
    if current.task_python is not None and str(current.task_python):
        return current.task_python
    venv_python = current.env_home / "task-venv" / "bin" / "python"
    if venv_python.exists():
        return venv_python
    return Path(sys.executable)


def scratch_dir() -> Path:
    """Parent folder for per-grading copies: tmpfs when the machine has it (copies on the main
    disk are slow to make and slower to delete under load)."""
    explicit = settings().scratch_dir
    if explicit is not None and str(explicit):
        return explicit
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


def settings_file() -> Path:
    """The file of remembered choices (JSON object; written by :func:`remember`)."""
    explicit = settings().settings_file
    return explicit if explicit is not None and str(explicit) else rcb_home() / "settings.json"


def remembered() -> dict[str, str]:
    """The choices in :func:`settings_file` ({} when there is none or it is unreadable)."""
    try:
        data = json.loads(settings_file().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def remember(key: str, value: str) -> None:
    """Record a choice in :func:`settings_file` (atomically; other keys kept)."""
    path = settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = remembered()
    data[key] = value
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def docker_base() -> str:
    """The base image of the per-paper images: ``RCB_DOCKER_BASE``, else the one remembered by
    ``rcb-env images build --base``, else ``python:3.11-slim``."""
    current = settings()
    if "docker_base" in current.model_fields_set:
        return current.docker_base
    return remembered().get("docker_base", current.docker_base)


def docker_wheels() -> Path | None:
    """The folder of wheels for offline image builds remembered by ``rcb-env images build
    --wheels`` (None: images are built with pip reaching an index)."""
    folder = remembered().get("docker_wheels")
    return Path(folder) if folder else None
