"""scripts/with-dockerd.sh start/stop: one private engine for a whole session, found by later
commands (the script's and rcb-env's own Docker client) without DOCKER_HOST; never a second
engine on the same data root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "with-dockerd.sh"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_started_engine_serves_later_commands_until_stopped() -> None:
    if os.getuid() != 0 or shutil.which("dockerd") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must be able to start dockerd (root, docker.io installed)")
        pytest.skip("starting dockerd needs root and dockerd")
    if os.path.exists("/var/run/docker.sock"):
        pytest.skip("a system engine answers here: the session engine would never be asked")
    # short: a unix socket's path is limited to 107 bytes
    top = Path(tempfile.mkdtemp(prefix="rcbd", dir="/tmp"))
    run = top / "run"
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    env |= {"RCB_DOCKERD_RUN": str(run), "RCB_DOCKER_DATA": str(top / "data")}

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    try:
        assert script("status").returncode == 1
        started = script("start")
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"export DOCKER_HOST=unix://{run}/docker.sock"
        pid = int((run / "dockerd.pid").read_text())
        assert _alive(pid)
        assert script("start").returncode == 0  # already started: the same engine
        assert int((run / "dockerd.pid").read_text()) == pid

        # a command through the script gets that engine (no second one is started)
        got = script(sys.executable, "-c", "import os; print(os.environ['DOCKER_HOST'])")
        assert got.returncode == 0, got.stderr
        assert got.stdout.strip() == f"unix://{run}/docker.sock"
        assert "private engine" not in got.stderr

        # rcb-env's client finds it without DOCKER_HOST, and passes it on to `docker` commands
        probe = (
            "import os, subprocess\n"
            "from rcb_env.sandbox.backends.docker.engine import client\n"
            "c = client()\n"
            "print(c.version()['ApiVersion'])\n"
            "subprocess.run(['docker', 'info'], check=True, capture_output=True)\n"
            "print(os.environ['DOCKER_HOST'])\n"
        )
        found = subprocess.run(
            [sys.executable, "-c", probe],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert found.returncode == 0, found.stderr
        assert found.stdout.splitlines()[-1] == f"unix://{run}/docker.sock"

        # a second engine on the same data root would break this one: a command that would
        # start one (another session folder, so this engine is not found) waits for the data
        # root, then gives up with a message; this engine is untouched
        other = {**env, "RCB_DOCKERD_RUN": str(top / "other"), "RCB_DOCKERD_WAIT_S": "1"}
        for args in (["start"], ["true"]):
            second = subprocess.run(
                ["bash", str(SCRIPT), *args],
                check=False,
                env=other,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert second.returncode == 1, second.stderr
            assert "another command's private engine uses" in second.stderr
            assert "giving up" in second.stderr
            assert _alive(pid)
        assert script("status").returncode == 0

        stopped = script("stop")
        assert stopped.returncode == 0
        assert not _alive(pid)
        assert not run.exists()
        assert script("status").returncode == 1
    finally:
        script("stop")
        shutil.rmtree(top, ignore_errors=True)
