"""Library logging is silent by default and structured once the CLI configures it."""

from __future__ import annotations

import json
import logging

import pytest

from rcb_env import logs


def test_library_events_are_silent_until_configured(capsys: pytest.CaptureFixture[str]) -> None:
    logging.getLogger("rcb_env").handlers = []
    logs.get_logger("rcb_env.test").debug("quiet", x=1)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ""


def test_configured_json_lines_carry_bound_fields(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(json=True, level="debug")
    try:
        logs.get_logger("rcb_env.test", task_id="p/s").info("graded", outcome="passed")
        line = capsys.readouterr().err.strip().splitlines()[-1]
        event = json.loads(line)
        assert event["event"] == "graded"
        assert event["task_id"] == "p/s"
        assert event["outcome"] == "passed"
        assert event["level"] == "info"
    finally:
        logging.getLogger("rcb_env").handlers = []
        logging.getLogger("rcb_env").setLevel(logging.NOTSET)
