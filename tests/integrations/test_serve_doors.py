"""``rcb-env serve``'s other doors and its faults, against a real server process (the bundled
``scaled-attention`` paper, bwrap, a token, 2 open episodes, 4 connections): MCP over ``/mcp``
driven by the official ``mcp`` SDK's streamable-HTTP client, HTTP-held episodes over
``POST /reset`` and ``/step`` (plain ``httpx``: OpenEnv 0.3.0 ships no HTTP client), a client
that sends half a frame or never reads its answers, and three times the cap at once."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect as aconnect
from websockets.exceptions import InvalidStatus

from rcb_env.integrations.pull import load_tasks
from rcb_env.tools.actions import tool_specs
from tests.integrations.test_serve import TASK, Served, _start, _ws

pytestmark = pytest.mark.slow

REFERENCE = Path("attention/core_ref.py")


@pytest.fixture(scope="module")
def served(require_bwrap: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("doors")
    answers = tmp / "answers.json"
    answers.write_text(
        json.dumps({s.id: [s.reference_body, s.weight] for s in load_tasks(None).snippets})
    )
    proc, url = _start(tmp / "runs", "scaled-attention")
    yield Served(proc, url, tmp / "runs", answers)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _oracle(served: Served) -> tuple[str, int]:
    body, weight = json.loads(served.answers.read_text())[TASK]
    return body, weight


def _wrong(body: str) -> str:
    return body[: len(body) - len(body.lstrip())] + "pass\n"


# MCP over /mcp ------------------------------------------------------------------------------


async def _mcp(url: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One MCP session with the official client: what it saw."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    out: dict[str, Any] = {"results": []}
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
        init = await s.initialize()
        out["instructions"] = init.instructions
        out["tools"] = {t.name: t.input_schema for t in (await s.list_tools()).tools}
        task = await s.read_resource("rcb://task")
        out["task"] = task.contents[0].text  # type: ignore[union-attr]
        for name, arguments in calls:
            result = await s.call_tool(name, arguments)
            text = "".join(c.text for c in result.content if hasattr(c, "text"))
            out["results"].append({"text": text, "is_error": result.is_error})
    return out


def _mcp_url(served: Served, query: str) -> str:
    return f"{served.url}/mcp?{query}"


def test_mcp_lists_the_tools_and_plays_the_oracle_to_its_weight_and_a_wrong_body_to_zero(
    served: Served,
) -> None:
    body, weight = _oracle(served)
    url = _mcp_url(served, urllib.parse.urlencode({"task_id": TASK}))
    right = anyio.run(_mcp, url, [("submit", {"body": body}), ("list_files", {})])
    wrong = anyio.run(_mcp, url, [("submit", {"body": _wrong(body)})])
    served.settle()
    assert right["tools"] == {t.name: t.parameters for t in tool_specs()}
    assert right["instructions"] == right["task"]
    assert "softmax" in right["task"]
    submitted, after = right["results"]
    assert submitted["is_error"] is False
    assert submitted["text"].endswith(f"[episode ended: submit; reward {weight}]")
    assert after["is_error"] is True  # the episode has ended: nothing runs
    assert "ended" in after["text"]
    assert wrong["results"][0]["text"].endswith("[episode ended: submit; reward 0]")
    mcp = [r for r in served.records() if r.agent.get("door") == "mcp"]
    assert sorted((r.reward, r.passed) for r in mcp if r.reason == "submit") == [
        (0.0, False),
        (float(weight), True),
    ]
    assert all(r.snippet_id == TASK for r in mcp)
    assert served.get("/rcb")["held"] == 0  # the client ended its sessions: forgotten


def test_mcp_reaches_no_hidden_file_and_no_reference(served: Served) -> None:
    url = _mcp_url(served, urllib.parse.urlencode({"task_id": TASK}))
    probes = [
        ("read_file", {"path": str(REFERENCE)}),
        ("read_file", {"path": "paper2code_test.py"}),
        ("read_file", {"path": "../../../../etc/passwd"}),
        ("list_files", {"path": ".."}),
        ("run_command", {"command": "ls -R / 2>/dev/null | grep -c -x core_ref.py || true"}),
        ("submit", {}),
    ]
    seen = anyio.run(_mcp, url, probes)
    served.settle()
    results = seen["results"]
    assert all(r["text"].startswith("error:") for r in results[:4]), results[:4]
    assert results[4]["text"].split()[0] == "0", results[4]["text"][:300]
    body, _weight = _oracle(served)
    shown = json.dumps(seen)
    assert body.strip() not in shown
    assert "root:x:0:0" not in shown


def test_mcp_sessions_count_against_the_cap_and_are_refused_clearly(served: Served) -> None:
    from mcp.shared.exceptions import MCPError

    def refused(url: str) -> str:
        try:
            anyio.run(_mcp, url, [])
        except BaseException as exc:  # an exception group from the client's task group
            found = [exc]
            while found:
                e = found.pop()
                if isinstance(e, MCPError):
                    return str(e)
                found.extend(getattr(e, "exceptions", ()))
            raise
        return "accepted"

    assert "no task 'no/such'" in refused(_mcp_url(served, "task_id=no/such"))
    bare = served.port_url + "/mcp"  # no token
    assert refused(bare) != "accepted"
    with httpx.Client(base_url=served.url, timeout=60) as http:
        held = [
            http.post("/reset", json={"task_id": TASK}).json()["observation"]["episode_id"]
            for _ in range(2)
        ]  # the server's 2 episodes are open
        assert "CAPACITY_REACHED" in refused(_mcp_url(served, "seed=1"))
        for episode_id in held:
            http.post("/step", json={"episode_id": episode_id, "action": {"tool": "submit"}})
        unknown = http.post("/mcp", headers={"Mcp-Session-Id": "nope"}, json={})
        assert unknown.status_code == 404
        not_initialize = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "x"})
        assert not_initialize.status_code == 400
    served.settle()
    assert served.get("/rcb")["open_episodes"] == 0


def test_an_mcp_session_ended_mid_episode_is_recorded_unscored(served: Served) -> None:
    url = _mcp_url(served, urllib.parse.urlencode({"task_id": TASK}))
    calls: list[tuple[str, dict[str, Any]]] = [("list_files", {})]
    anyio.run(_mcp, url, calls)  # then the client ends its session (DELETE)
    served.settle()
    (closed,) = [
        r
        for r in served.records()
        if r.agent.get("door") == "mcp" and r.infra_error and r.infra_error.type == "ClientClosed"
    ]
    assert closed.status == "infra_error"  # unscored: left out of the run's scores


# HTTP-held episodes -------------------------------------------------------------------------


def test_an_http_held_episode_plays_the_oracle_to_its_weight_and_a_wrong_body_to_zero(
    served: Served,
) -> None:
    body, weight = _oracle(served)
    with httpx.Client(base_url=served.url, timeout=120) as http:
        reset = http.post("/reset", json={"task_id": TASK, "episode_id": "held-1"}).json()
        assert (reset["reward"], reset["done"]) == (None, False)
        assert reset["observation"]["episode_id"] == "held-1"
        assert "softmax" in reset["observation"]["text"]
        read = http.post(
            "/step", json={"episode_id": "held-1", "action": {"tool": "list_files"}}
        ).json()
        assert "attention/core.py" in read["observation"]["text"]
        state = http.get("/state", params={"episode_id": "held-1"}).json()
        assert (state["step_count"], state["status"]) == (1, "running")
        action = {"tool": "submit", "body": body}
        right = http.post("/step", json={"episode_id": "held-1", "action": action}).json()
        after = http.post(
            "/step", json={"episode_id": "held-1", "action": {"tool": "list_files"}}
        ).json()
        wrong_id = http.post("/reset", json={"task_id": TASK}).json()["observation"]["episode_id"]
        action = {"tool": "submit", "body": _wrong(body)}
        wrong = http.post("/step", json={"episode_id": wrong_id, "action": action}).json()
    assert (right["reward"], right["done"], right["observation"]["passed"]) == (weight, True, True)
    assert after["done"] is True
    assert "ended" in after["observation"]["text"]
    assert (wrong["reward"], wrong["done"], wrong["observation"]["scored"]) == (0.0, True, True)
    served.settle()
    http_records = {r.episode_id: r for r in served.records() if r.agent.get("door") == "http"}
    assert http_records["held-1"].reward == weight
    assert http_records[wrong_id].reward == 0.0


def test_http_held_episodes_refuse_bad_requests_clearly_and_keep_the_episode(
    served: Served,
) -> None:
    with httpx.Client(base_url=served.url, timeout=60) as http:
        no_id = http.post("/step", json={"action": {"tool": "list_files"}})
        assert no_id.status_code == 400
        assert "episode_id" in no_id.json()["detail"]
        unknown = http.post("/step", json={"episode_id": "never", "action": {}})
        assert (unknown.status_code, unknown.json()["code"]) == (404, "NO_EPISODE")
        bad_json = http.post("/reset", content=b"{not json")
        assert (bad_json.status_code, bad_json.json()["code"]) == (422, "INVALID_JSON")
        extra = http.post("/reset", json={"task_id": TASK, "level": 3})
        assert (extra.status_code, extra.json()["code"]) == (422, "VALIDATION_ERROR")
        no_task = http.post("/reset", json={"task_id": "no/such"})
        assert no_task.status_code == 422
        assert "no task 'no/such'" in no_task.json()["detail"]
        big = http.post("/reset", content=b" " * (5 << 20))
        assert big.status_code == 413
        first = http.post("/reset", json={"task_id": TASK, "episode_id": "held-a"})
        assert first.status_code == 200
        again = http.post("/reset", json={"task_id": TASK, "episode_id": "held-a"})
        assert again.status_code == 409
        second = http.post("/reset", json={"task_id": TASK})
        assert second.status_code == 200
        full = http.post("/reset", json={"task_id": TASK})
        assert (full.status_code, full.json()["code"]) == (503, "CAPACITY_REACHED")
        assert full.headers["Retry-After"]
        not_an_action = http.post("/step", json={"episode_id": "held-a", "action": [1]})
        assert (not_an_action.status_code, not_an_action.json()["code"]) == (
            422,
            "VALIDATION_ERROR",
        )
        bad_tool = http.post("/step", json={"episode_id": "held-a", "action": {"tool": "x"}})
        assert bad_tool.status_code == 200
        assert bad_tool.json()["observation"]["tool_ok"] is False
        ok = http.post("/step", json={"episode_id": "held-a", "action": {"tool": "list_files"}})
        assert ok.json()["observation"]["tool_ok"] is True  # the episode was kept throughout
        assert ok.json()["observation"]["step"] == 2
        for held in ("held-a", second.json()["observation"]["episode_id"]):
            http.post("/step", json={"episode_id": held, "action": {"tool": "submit"}})
    served.settle()


# faults ---------------------------------------------------------------------------------------


def _raw_websocket(served: Served) -> socket.socket:
    """A websocket opened by hand (the handshake answered 101), to send what no library
    would."""
    parts = urllib.parse.urlsplit(served.url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=30)
    sock.sendall(
        (
            f"GET {parts.path}/ws HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101"), answer[:200]
    return sock


def test_half_a_frame_and_unread_answers_block_no_other_session(served: Served) -> None:
    """A client that sent half a websocket frame, one that sent half an HTTP request, and one
    that pipelines hundreds of requests and reads none of the answers: another client is
    served meanwhile, and the slow reader gets every answer, in order, when it reads."""
    half = _raw_websocket(served)
    frame = json.dumps({"type": "state", "id": "half"}).encode()
    half.sendall(bytes([0x81, 0x80 | len(frame)]) + b"\0\0\0\0" + frame[:10])  # masked, cut
    parts = urllib.parse.urlsplit(served.url)
    slowloris = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=30)
    slowloris.sendall(
        f"POST {parts.path}/reset HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{".encode()
    )
    n = 400
    with _ws(served) as slow:
        slow.send(json.dumps({"type": "reset", "data": {"task_id": TASK}, "id": "slow-reset"}))
        for i in range(n):  # each answer is the tool list (a few KB): megabytes unread
            slow.send(json.dumps({"type": "step", "data": {"type": "list_tools"}, "id": f"s{i}"}))
        time.sleep(1)
        waits = []
        with _ws(served) as other:
            for frame_out in (
                {"type": "reset", "data": {"task_id": TASK}},
                {"type": "step", "data": {"tool": "list_files"}},
                {"type": "state"},
                {"type": "step", "data": {"tool": "submit"}},
            ):
                t0 = time.monotonic()
                other.send(json.dumps(frame_out))
                answer = json.loads(other.recv(timeout=60))
                waits.append(time.monotonic() - t0)
                assert answer["type"] in ("observation", "state"), answer
        with httpx.Client(base_url=served.url, timeout=30) as http:
            assert http.get("/health").json() == {"status": "healthy"}
        ids = [json.loads(slow.recv(timeout=60))["id"] for _ in range(n + 1)]
        assert ids == ["slow-reset", *(f"s{i}" for i in range(n))]
    half.close()
    slowloris.close()
    served.settle()
    assert max(waits[:3]) < 10, waits  # not stuck behind the others (a submit grades)


def test_three_times_the_connection_cap_at_once_each_refused_clearly_every_slot_used(
    served: Served,
) -> None:
    """12 clients at once against 4 connections and 2 episodes: 4 are connected and 8 refused
    at the handshake (HTTP 503, CAPACITY_REACHED); of the 4, 2 get an episode and 2 a
    CAPACITY_REACHED answer; nobody waits past the timeout."""
    ws_url = served.url.replace("http://", "ws://") + "/ws"
    deadline = time.monotonic() + 30  # the sockets of the tests before have all gone
    while served.get("/rcb")["connections"] and time.monotonic() < deadline:
        time.sleep(0.1)

    async def one(i: int, holding: list[Any]) -> str:
        try:
            ws = await aconnect(ws_url, open_timeout=30)
        except InvalidStatus as exc:
            body = exc.response.body or b""
            return f"{exc.response.status_code} {json.loads(body)['data']['code']}"
        holding.append(ws)
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK}, "id": f"c{i}"}))
        answer = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
        assert answer["id"] == f"c{i}"
        return str(answer["type"] if answer["type"] != "error" else answer["data"]["code"])

    async def crowd() -> tuple[list[str], dict[str, Any]]:
        holding: list[Any] = []
        try:
            seen = await asyncio.wait_for(
                asyncio.gather(*(one(i, holding) for i in range(12))), timeout=120
            )
            counts = await asyncio.to_thread(served.get, "/rcb")
        finally:
            await asyncio.gather(*(ws.close() for ws in holding))
        return seen, counts

    seen, counts = asyncio.run(crowd())
    assert sorted(seen) == sorted(
        ["503 CAPACITY_REACHED"] * 8 + ["observation"] * 2 + ["CAPACITY_REACHED"] * 2
    ), seen
    assert (counts["open_episodes"], counts["connections"]) == (2, 4)
    served.settle()
    with _ws(served) as ws:  # the slots are given back
        ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"


def test_a_held_episode_left_idle_is_ended_then_forgotten(tmp_path: Path) -> None:
    """The reaper ends a held (HTTP or MCP) episode whose client went quiet, graded as it
    stands; once ended and idle again, the server forgets it and tells its door."""
    from rcb_env.integrations.serve.sessions import EpisodeServer, ServedSession, ServeLimits
    from rcb_env.results.records import RECORDS, read_records
    from rcb_env.runner.episode import EvalConfig
    from rcb_env.sandbox import SandboxConfig

    cfg = EvalConfig(agent="openenv", sandbox=SandboxConfig(backend="local"))
    server = EpisodeServer(load_tasks(None), cfg, tmp_path / "run", ServeLimits(idle_s=5))
    told: list[str] = []

    async def play() -> list[int]:
        session = ServedSession(server, {"door": "http"})
        await session.answer(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
        server.hold("e1", session)
        session.on_forget = lambda: told.append("e1")
        now = time.monotonic()
        held = [len(server.held)]
        await server.reap(now + 1)  # not idle yet
        held.append(len(server.held))
        await server.reap(now + 6)  # idle: its episode ended, the session kept
        held.append(len(server.held))
        await server.reap(now + 12)  # ended and idle again: forgotten
        held.append(len(server.held))
        return held

    try:
        held = asyncio.run(play())
    finally:
        server.close()
    assert held == [1, 1, 1, 0]
    assert told == ["e1"]
    (record,) = read_records(tmp_path / "run" / RECORDS)
    assert (record.reason, record.status) == ("agent_stopped", "truncated")
    assert server.open_episodes == 0


# TRL against a remote server ----------------------------------------------------------------


def _grpo_example() -> Any:
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "examples" / "grpo_tiny.py"
    spec = importlib.util.spec_from_file_location("grpo_tiny", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["grpo_tiny"] = module
    spec.loader.exec_module(module)
    return module


def test_a_grpo_trainer_step_runs_its_rollouts_on_a_remote_server(
    served: Served, tmp_path: Path
) -> None:
    """TRL 1.16's GRPOTrainer has no OpenEnv code of its own (its OpenEnv harness is the async
    trainer's, which needs vLLM): its environment_factory gets rcb-env's remote environment,
    whose episodes run on the server. One real step on CPU with the tiny model."""
    from rcb_env.integrations.trl import RemoteRcbEnvironment, remote_environment_factory

    assert isinstance(remote_environment_factory(served.url)(), RemoteRcbEnvironment)
    made: list[RemoteRcbEnvironment] = []
    rewards: list[float | None] = []

    class Recorded(RemoteRcbEnvironment):
        def get_reward(self) -> float | None:
            value = super().get_reward()
            rewards.append(value)
            return value

    def recorded() -> RemoteRcbEnvironment:
        env = Recorded(served.url)
        made.append(env)
        return env

    before = {r.episode_id for r in served.records()}
    history = _grpo_example().train(
        tmp_path, steps=1, task_ids=[TASK], environment_factory=recorded, generations=2
    )
    for env in made:
        env._close()
    served.settle()
    assert any("loss" in h for h in history)
    assert rewards == [0.0, 0.0]  # graded on the server as the workspace stood: nothing solved
    new = [r for r in served.records() if r.episode_id not in before]
    assert len(new) == 2
    assert {(r.snippet_id, r.status, r.reason) for r in new} == {(TASK, "completed", "submit")}
    assert all("websockets" in str(r.agent.get("user_agent")) for r in new)


def test_a_remote_environment_scores_the_oracle_and_a_lost_server_is_unscored(
    served: Served, tmp_path: Path
) -> None:
    from rcb_env.errors import ConfigError
    from rcb_env.integrations.serve.remote import LOST
    from rcb_env.integrations.trl import RemoteRcbEnvironment
    from rcb_env.rl import shared

    body, weight = _oracle(served)
    env = RemoteRcbEnvironment(served.url)
    try:
        assert "softmax" in env.reset(task_id=TASK)
        env.submit(body=body)
        assert env.get_reward() == weight
        env.reset(task_id=TASK)
        env.submit(body=_wrong(body))
        assert env.get_reward() == 0.0
        with pytest.raises(ConfigError, match="no task 'no/such'"):
            env.reset(task_id="no/such")
    finally:
        env._close()
    proc, url = _start(tmp_path / "runs", "scaled-attention")
    lost = RemoteRcbEnvironment(url, timeout_s=30)
    try:
        assert "softmax" in lost.reset(task_id=TASK)
        proc.kill()  # the server dies mid-episode
        proc.wait()
        before = shared.unscored().get("server", 0)
        text = lost.list_files()
        assert text.startswith(LOST.split("(", 1)[0])
        assert lost.get_reward() is None  # unscored, never 0
        assert shared.unscored().get("server", 0) == before + 1  # counted once
        assert "could not be reached" in lost.reset(task_id=TASK)  # the next start: unscored
        assert lost.get_reward() is None
    finally:
        lost._close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sessions_without_a_socket_are_capped_and_ended_ones_make_room(tmp_path: Path) -> None:
    from rcb_env.integrations.serve.sessions import EpisodeServer, ServedSession, ServeLimits
    from rcb_env.runner.episode import EvalConfig
    from rcb_env.sandbox import SandboxConfig

    cfg = EvalConfig(agent="openenv", sandbox=SandboxConfig(backend="local"))
    limits = ServeLimits(max_episodes=3, max_connections=2)
    server = EpisodeServer(load_tasks(None), cfg, tmp_path / "run", limits)

    async def play() -> list[bool]:
        rooms = []
        sessions = []
        for key in ("a", "b"):
            rooms.append(server.room_to_hold())
            session = ServedSession(server, {"door": "http"})
            await session.answer(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
            server.hold(key, session)
            sessions.append(session)
        rooms.append(server.room_to_hold())  # two running: full
        step = {"type": "step", "data": {"tool": "submit"}}
        await sessions[0].answer(json.dumps(step))
        rooms.append(server.room_to_hold())  # "a" ended: forgotten to make room
        return rooms

    try:
        rooms = asyncio.run(play())
    finally:
        server.close()
    assert rooms == [True, True, False, True]
    assert list(server.held) == ["b"]


def test_sigterm_drains_held_http_and_mcp_episodes_recorded_interrupted(tmp_path: Path) -> None:
    from rcb_env.results.records import RECORDS, read_records

    proc, url = _start(tmp_path / "runs", "scaled-attention")
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            reset = http.post("/reset", json={"task_id": TASK, "episode_id": "held-drained"})
            assert reset.status_code == 200
            mcp = http.post(
                "/mcp",
                params={"task_id": TASK},
                headers={"Accept": "application/json, text/event-stream"},
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "0"},
                    },
                },
            )
            assert mcp.status_code == 200, mcp.text
            assert mcp.headers["mcp-session-id"]
            assert http.get("/rcb").json()["open_episodes"] == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (run,) = (tmp_path / "runs").iterdir()
    records = read_records(run / RECORDS)
    assert sorted(str(r.agent.get("door")) for r in records) == ["http", "mcp"]
    for record in records:
        assert record.status == "infra_error"
        assert record.infra_error is not None
        assert record.infra_error.type == "ServerShutdown"


def test_an_http_client_gone_mid_step_loses_nothing(served: Served) -> None:
    """A client that gives up on its submit before the answer (its connection closed): the
    step runs to its end, the episode is recorded, and a later call reads how it ended."""
    body, weight = _oracle(served)
    with httpx.Client(base_url=served.url, timeout=60) as http:
        reset = http.post("/reset", json={"task_id": TASK, "episode_id": "gave-up"})
        assert reset.status_code == 200
        action = {"tool": "submit", "body": body}
        with pytest.raises(httpx.TimeoutException):
            http.post("/step", json={"episode_id": "gave-up", "action": action}, timeout=0.05)
        served.settle()
        state = http.get("/state", params={"episode_id": "gave-up"}).json()
        after = http.post("/step", json={"episode_id": "gave-up", "action": {"tool": "submit"}})
    assert (state["done"], state["reward"]) == (True, weight)
    assert after.json()["done"] is True
    (record,) = [r for r in served.records() if r.episode_id == "gave-up"]
    assert (record.reason, record.reward) == ("submit", weight)


def test_openenvs_own_mcp_tool_client_plays_an_episode_over_the_websocket(
    served: Served,
) -> None:
    """OpenEnv's MCPToolClient (its default mode: list_tools and call_tool steps over /ws)
    reads rcb-env's answers as its tool list and its tool calls' results."""
    import subprocess

    from tests.integrations.test_serve import OPENENV_PYTHON

    if not OPENENV_PYTHON.exists():
        pytest.skip("no .venv/openenv (scripts/install.sh makes it)")
    body, weight = _oracle(served)
    script = Path(__file__).with_name("openenv_mcp_client.py")
    run = subprocess.run(
        [str(OPENENV_PYTHON), str(script), "ws", served.url, TASK, body],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout)
    served.settle()
    assert seen["reset"] == {"done": False, "reward": None}
    assert seen["tools"] == sorted(t.name for t in tool_specs())
    assert "attention/core.py" in seen["list_files"]
    assert "failed" in seen["malformed"]
    assert (seen["submit"]["done"], seen["submit"]["reward"]) == (True, weight)
    assert seen["submit"]["result"]
    assert "ended" in seen["after_end"]


def test_openenvs_json_rpc_dialect_at_mcp_plays_an_episode_under_the_cap(served: Served) -> None:
    """OpenEnv's own POST /mcp dialect: MCPToolClient's production mode (a drawn task), and the
    same requests by hand (a named task, the oracle scored its weight, the cap, the close)."""
    import subprocess

    from tests.integrations.test_serve import OPENENV_PYTHON

    if not OPENENV_PYTHON.exists():
        pytest.skip("no .venv/openenv (scripts/install.sh makes it)")
    script = Path(__file__).with_name("openenv_mcp_client.py")
    run = subprocess.run(
        [str(OPENENV_PYTHON), str(script), "http", served.url],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout)
    assert seen["tools"] == sorted(t.name for t in tool_specs())
    assert "paper2code_paper.tex" in seen["list_files"]
    assert "ended" in seen["after_end"]
    body, weight = _oracle(served)

    def rpc(http: httpx.Client, method: str, **params: Any) -> dict[str, Any]:
        request = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
        answer: dict[str, Any] = http.post("/mcp", json=request).json()
        assert answer["id"] == 7
        return answer

    with httpx.Client(base_url=served.url, timeout=120) as http:
        created = rpc(http, "openenv/session/create", task_id=TASK)["result"]
        assert created["task_id"] == TASK
        assert "softmax" in created["statement"]
        session = created["session_id"]
        other = rpc(http, "openenv/session/create", task_id=TASK)["result"]["session_id"]
        full = rpc(http, "openenv/session/create", task_id=TASK)  # 2 episodes open: the cap
        assert full["error"]["message"].startswith("CAPACITY_REACHED")
        bad = rpc(http, "tools/call", session_id=session, name="read_file", arguments={})
        assert "error" in bad
        arguments = {"body": body}
        done = rpc(http, "tools/call", session_id=session, name="submit", arguments=arguments)
        assert (done["result"]["reward"], done["result"]["done"]) == (weight, True)
        assert rpc(http, "openenv/session/close", session_id=other)["result"] == {"closed": True}
        gone = rpc(http, "tools/call", session_id=other, name="list_files", arguments={})
        assert gone["error"]["message"].startswith("NO_EPISODE")
    served.settle()
    dialect = [r for r in served.records() if r.agent.get("door") == "openenv-mcp"]
    assert sorted(str(r.reason) for r in dialect) == ["infra_error", "submit", "submit"]
    assert any(r.reward == weight and r.snippet_id == TASK for r in dialect)


def test_http_and_mcp_clients_beyond_the_cap_at_once_each_get_capacity_reached(
    served: Served,
) -> None:
    """Six HTTP resets and six MCP initializes at once against 2 episodes: two start, ten are
    told CAPACITY_REACHED (503), nobody waits past the timeout, the slots are all used."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "crowd", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}

    async def crowd() -> tuple[list[tuple[str, int, str]], dict[str, Any]]:
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:

            async def reset() -> tuple[str, int, str]:
                answer = await http.post("/reset", json={"task_id": TASK})
                key = answer.json()["observation"]["episode_id"] if answer.is_success else ""
                return "http", answer.status_code, key or answer.text

            async def mcp() -> tuple[str, int, str]:
                answer = await http.post(
                    "/mcp", params={"task_id": TASK}, json=initialize, headers=accept
                )
                return "mcp", answer.status_code, answer.headers.get("mcp-session-id", answer.text)

            seen = await asyncio.wait_for(
                asyncio.gather(*(f() for _ in range(6) for f in (reset, mcp))), timeout=120
            )
            counts = (await http.get("/rcb")).json()
            for door, status, key in seen:  # end the two that started
                if status == 200 and door == "http":
                    await http.post("/step", json={"episode_id": key, "action": {"tool": "submit"}})
                elif status == 200:
                    await http.delete("/mcp", headers={"Mcp-Session-Id": key})
        return list(seen), counts

    seen, counts = asyncio.run(crowd())
    started = [s for s in seen if s[1] == 200]
    refused = [s for s in seen if s[1] != 200]
    assert len(started) == 2, seen
    assert len(refused) == 10, seen
    assert all(status == 503 and "CAPACITY_REACHED" in text for _, status, text in refused)
    assert counts["open_episodes"] == 2
    served.settle()
