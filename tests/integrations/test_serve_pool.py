"""Several ``rcb-env serve`` processes behind one trainer's :class:`ServerPool`: two real servers
on 127.0.0.1 (bwrap, the bundled tasks), one killed by its pid mid-run and started again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from rcb_env.errors import ConfigError
from rcb_env.integrations.pull import load_tasks
from rcb_env.integrations.serve.pool import (
    NoServer,
    PooledSession,
    ServerPool,
    ServerRefused,
    StepResult,
)
from rcb_env.results.ledger import EVENTS
from rcb_env.results.records import RECORDS, read_records

TASK = "scaled-attention/softmax"
TOKEN = "pool-token-8d2f-61aa"


def _serve(run_dir: Path, port: int = 0) -> tuple[subprocess.Popen[str], str]:
    """``rcb-env serve`` of one bundled paper on bwrap with a token; its base URL."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rcb_env", "serve", "--sandbox", "bwrap"),
            *("--port", str(port), "--token", TOKEN, "--run-dir", str(run_dir)),
            *("--max-episodes", "4", "--drain-s", "2", "--paper", "scaled-attention"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if "base URL " in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # never blocks it
            return proc, line.split("base URL ", 1)[1].strip()
    proc.kill()
    raise AssertionError(f"rcb-env serve did not start (exit {proc.wait()})")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _name(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def _running(result: StepResult) -> bool:
    return result.observation["status"] == "running" and result.reward is None


READ = {"tool": "read_file", "path": "attention/core.py"}


def _kill_mid_run(
    pool: ServerPool,
    proc: subprocess.Popen[str],
    name: str,
    on_it: list[PooledSession],
    others: list[PooledSession],
) -> None:
    in_flight: list[StepResult] = []
    slow = threading.Thread(
        target=lambda: in_flight.append(
            on_it[0].step({"tool": "run_command", "command": "sleep 20"})
        )
    )
    slow.start()
    time.sleep(1.0)  # the command runs there
    proc.kill()
    proc.wait()
    slow.join(timeout=30)
    idle = on_it[1].step(READ)
    for lost in [*in_flight, idle]:
        assert lost.done is True
        assert lost.reward is None  # never 0
        assert lost.observation["status"] == "infra_error"
        assert lost.observation["scored"] is False
        assert name in lost.observation["text"]
    assert len(in_flight) == 1
    assert in_flight[0].observation["task_id"] == TASK
    assert on_it[0].step(READ) is in_flight[0]  # the episode stays ended
    assert on_it[0].state()["done"] is True
    for s in others:  # the other server goes on serving its episodes
        answer = s.step(READ)
        assert _running(answer)
        assert answer.observation["tool_ok"] is True


def test_episodes_spread_over_two_servers_a_killed_one_costs_only_its_episodes_unscored(
    require_bwrap: None, tmp_path: Path
) -> None:
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_proc, a_url = _serve(a_dir)
    b_proc, b_url = _serve(b_dir)
    procs = [a_proc, b_proc]
    a, b = _name(a_url), _name(b_url)
    # the token both ways: in the URL's path (A) and as a Bearer header (B)
    b_bare = b_url.removesuffix("/" + TOKEN)
    try:
        pool = ServerPool([a_url, (b_bare, TOKEN)], retry_s=1.0, wait_s=20, message_timeout_s=60)
        assert {s["server"]: s["capacity"] for s in pool.status()} == {a: 4, b: 4}

        # 1. four episodes: spread two and two
        sessions = [pool.session() for _ in range(4)]
        for s in sessions:
            assert _running(s.reset(task_id=TASK))
        on = {s.server for s in sessions}
        assert on == {a, b}
        assert sorted(x["open"] for x in pool.status()) == [2, 2]
        on_a = [s for s in sessions if s.server == a]
        on_b = [s for s in sessions if s.server == b]

        # 2. A killed by its pid while one of its episodes runs a command: its two episodes
        # come back unscored, B's go on
        _kill_mid_run(pool, a_proc, a, on_a, on_b)
        status = {x["server"]: x for x in pool.status()}
        assert status[a]["up"] is False
        assert status[a]["unscored"] == 2
        assert status[b]["unscored"] == 0

        # 3. later episodes all go to the live one (the sessions that were on A move)
        for s in sessions:
            s.close()
        later = [pool.session() for _ in range(4)]
        for s in later:
            assert _running(s.reset(task_id=TASK))
        assert {s.server for s in later} == {b}
        for s in later:
            s.close()

        # 4. A started again on its port (and run folder): used again
        port = urllib.parse.urlsplit(a_url).port
        assert port is not None
        a_proc, _ = _serve(a_dir, port)
        procs.append(a_proc)
        time.sleep(1.2)  # past retry_s: the pool probes it at the next reset
        again = [pool.session() for _ in range(2)]
        for s in again:
            assert _running(s.reset(task_id=TASK))
        assert a in {s.server for s in again}
        on_a_again = next(s for s in again if s.server == a)
        body = load_tasks(None).paper("scaled-attention").snippet("softmax").reference_body
        graded = on_a_again.step({"tool": "submit", "body": body})
        assert (graded.done, graded.reward, graded.observation["scored"]) == (True, 3.0, True)
        for s in again:
            s.close()
        assert {x["server"]: x["up"] for x in pool.status()} == {a: True, b: True}
    finally:
        for proc in procs:
            _stop(proc)

    # A's side: the episodes it was killed with are counted interrupted by its restart, the
    # one it served after it is recorded and scored
    events = [json.loads(line) for line in (a_dir / EVENTS).read_text().splitlines()]
    assert sum(e["event"] == "interrupted" for e in events) == 2
    assert [r.reward for r in read_records(a_dir / RECORDS) if r.reason == "submit"] == [3.0]


def test_a_pool_with_no_server_up_says_so_and_bad_urls_or_tokens_are_refused(
    require_bwrap: None, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="at least one"):
        ServerPool([])
    with pytest.raises(ConfigError, match="http"):
        ServerPool(["127.0.0.1:8000"])
    # nothing listens on this port: the pool starts, a reset waits wait_s and says why
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    pool = ServerPool([f"http://127.0.0.1:{free}"], retry_s=0.2, wait_s=0.5)
    assert pool.status()[0]["up"] is False
    with pytest.raises(NoServer, match=f"127.0.0.1:{free} \\(unreachable"):
        pool.session().reset(task_id=TASK)

    proc, url = _serve(tmp_path / "run")
    try:
        with pytest.raises(ServerRefused, match="token"):
            ServerPool([url.removesuffix("/" + TOKEN)])
        with ServerPool([url]).session() as session:
            with pytest.raises(ServerRefused, match="NO_EPISODE"):
                session.step(READ)
            with pytest.raises(ServerRefused, match="VALIDATION_ERROR"):
                session.reset(task_id="no/such")
            assert _running(session.reset(task_id=TASK))
    finally:
        _stop(proc)


def test_the_pool_needs_no_server_side_package() -> None:
    """A trainer's machine: rcb-env and websockets, not uvicorn or starlette (the server's), nor
    Docker's SDK or Ray."""
    blocked = ("uvicorn", "starlette", "docker", "ray", "openenv")
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from rcb_env.integrations.serve.pool import ServerPool\n"
        "print('imported')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert run.stdout.strip() == "imported", run.stderr[-2000:]
