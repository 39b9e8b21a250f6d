"""The examples in examples/ run as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        ("custom_agent.py", "reward 2.0 of weight 2"),
        ("new_front_door.py", "status completed, reward 2.0 (weight 2)"),
        ("tools_agent_local_server.py", "scaled pass rate 100.00 with 4 model calls"),
        ("rl_group_rollouts.py", "rewards [2.0, 2.0, 2.0, 2.0], complete True"),
        ("trl_environment.py", "get_reward() = 2.0 (line weight 2)"),
        ("skyrl_environment.py", "done True, reward 2.0 (line weight 2)"),
        ("verifiers_environment.py", "rcb_reward 2.0 (line weight 2), errors 0"),
    ],
)
def test_example_runs(script: str, expect: str, require_bwrap: None) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert expect in run.stdout
