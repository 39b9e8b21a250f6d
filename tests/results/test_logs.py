"""Library logging is silent by default and structured once the CLI configures it."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from rcb_env import logs


@pytest.fixture
def pristine_logging() -> Iterator[None]:
    """The ``rcb_env`` logger as importing the package leaves it, restored afterwards."""
    logger = logging.getLogger("rcb_env")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers, logger.level, logger.propagate = saved[0], saved[1], saved[2]


def test_library_warnings_are_silent_until_configured() -> None:
    """In a plain interpreter (pytest installs logging handlers of its own, which would hide the
    problem): WARNING and ERROR events are what Python's last-resort handler prints on stderr
    when the library has no handler."""
    script = (
        "from rcb_env import logs\n"
        "logs.get_logger('rcb_env.sandbox').warning('sandbox failed', x=1)\n"
        "logs.get_logger('rcb_env.grading').error('grading failed')\n"
        "print('ran')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout == "ran\n"
    assert run.stderr == ""


def test_configured_json_lines_carry_bound_fields(
    capsys: pytest.CaptureFixture[str], pristine_logging: None
) -> None:
    logs.configure(json=True, level="debug")
    logs.get_logger("rcb_env.test", task_id="p/s").info("graded", outcome="passed")
    line = capsys.readouterr().err.strip().splitlines()[-1]
    event = json.loads(line)
    assert event["event"] == "graded"
    assert event["task_id"] == "p/s"
    assert event["outcome"] == "passed"
    assert event["level"] == "info"
