"""``rcb-env serve`` driven by OpenEnv's own client (openenv-core 0.3.0 from ``.venv/openenv``,
unchanged) and by raw websocket frames: one server for the module (the bundled tasks, bwrap,
a token on 127.0.0.1, 2 open episodes, 4 connections), stopped with SIGTERM at the end."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from rcb_env.integrations.pull import load_tasks
from rcb_env.integrations.serve.protocol import schema
from rcb_env.integrations.serve.sessions import EpisodeServer, ServeLimits
from rcb_env.results.ledger import EVENTS, RunLedger, eval_ledger
from rcb_env.results.records import RECORDS, EpisodeRecord, read_records
from rcb_env.results.summary import summarize_run
from rcb_env.runner.episode import EvalConfig
from rcb_env.sandbox import Sandbox, SandboxConfig, SandboxFactory
from rcb_env.task.models import Paper, Snippet

ROOT = Path(__file__).resolve().parents[2]
OPENENV_PYTHON = ROOT / ".venv" / "openenv" / "bin" / "python"
CLIENT = Path(__file__).with_name("openenv_client.py")
TOKEN = "test-token-5f1c-0b8e"
TASK = "scaled-attention/softmax"
FAKE_KEY = "sk-rcb-serve-test-0d9e4c"


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    """The base URL with the token's path prefix."""
    runs: Path
    answers: Path

    @property
    def port_url(self) -> str:
        return self.url.removesuffix("/" + TOKEN)

    @property
    def run_dir(self) -> Path:
        (folder,) = self.runs.iterdir()
        return folder

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def records(self) -> list[Any]:
        return read_records(self.run_dir / RECORDS)

    def settle(self) -> None:
        """Wait until the server holds no open episode."""
        deadline = time.monotonic() + 20
        while self.get("/rcb")["open_episodes"] and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.fixture(scope="module")
def served(require_bwrap: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if not OPENENV_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail("scripts/install.sh makes .venv/openenv")
        pytest.skip("no .venv/openenv (scripts/install.sh makes it)")
    tmp = tmp_path_factory.mktemp("serve")
    answers = tmp / "answers.json"
    answers.write_text(
        json.dumps({s.id: [s.reference_body, s.weight] for s in load_tasks(None).snippets})
    )
    proc, url = _start(tmp / "runs", "scaled-attention")
    yield Served(proc, url, tmp / "runs", answers)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _start(runs: Path, paper: str) -> tuple[subprocess.Popen[str], str]:
    """``rcb-env serve`` of one bundled paper on bwrap, a free port, the token; its base URL."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rcb_env", "serve", "--sandbox", "bwrap", "--port", "0"),
            *("--token", TOKEN, "--runs-dir", str(runs), "--max-episodes", "2"),
            *("--max-connections", "4", "--drain-s", "3", "--paper", paper),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENAI_API_KEY": FAKE_KEY},  # a key the server holds: never served
    )
    assert proc.stderr is not None
    url = ""
    deadline = time.monotonic() + 60
    while not url and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if "base URL " in line:
            url = line.split("base URL ", 1)[1].strip()
    assert url, f"the server did not start (exit {proc.poll()})"
    return proc, url


@pytest.fixture(scope="module")
def stock(served: Served) -> dict[str, Any]:
    """The scenarios of the stock client, played once."""
    run = subprocess.run(
        [str(OPENENV_PYTHON), str(CLIENT), "tests", served.url, str(served.answers)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    served.settle()
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def test_the_stock_client_plays_an_episode_oracle_scores_its_weight_wrong_body_zero(
    stock: dict[str, Any],
) -> None:
    reset = stock["reset"]
    assert reset["done"] is False
    assert reset["reward"] is None
    obs = reset["observation"]
    assert obs["task_id"] == TASK
    assert obs["status"] == "running"
    assert obs["weight"] == 3
    assert "softmax" in obs["text"].lower()
    oracle = stock["oracle"]
    assert oracle["done"] is True
    assert oracle["reward"] == 3.0
    assert oracle["observation"]["passed"] is True
    assert oracle["observation"]["scored"] is True
    assert stock["state_after"]["done"] is True
    assert stock["state_after"]["reward"] == 3.0
    after = stock["step_after_end"]
    assert after["done"] is True
    assert "ended" in after["observation"]["text"]
    wrong = stock["wrong"]
    assert wrong["done"] is True
    assert wrong["reward"] == 0.0
    assert wrong["observation"]["scored"] is True
    assert wrong["observation"]["passed"] is False
    # a seeded draw is the same task each time
    first, again = stock["seeded"]
    assert first == again


def test_bad_actions_and_refused_resets_keep_the_session(stock: dict[str, Any]) -> None:
    bad = stock["bad_action"]
    assert bad["observation"]["tool_ok"] is False
    assert "unknown tool" in bad["observation"]["text"]
    assert bad["done"] is False
    assert "VALIDATION_ERROR" in stock["unknown_task"]
    assert "no task 'no/such'" in stock["unknown_task"]
    assert "VALIDATION_ERROR" in stock["unknown_reset_key"]
    assert stock["after_refusals"]["observation"]["tool_ok"] is True
    assert "attention/core.py" in stock["after_refusals"]["observation"]["text"]
    names = {t["name"] for t in stock["list_tools"]["observation"]["tools"]}
    assert {"submit", "read_file", "run_tests"} <= names


def test_capacity_is_refused_clearly_and_a_slot_that_frees_is_given(
    stock: dict[str, Any],
) -> None:
    assert "CAPACITY_REACHED" in stock["capacity"]
    assert stock["capacity_retry"] == "running"
    assert "HTTP 503" in stock["connections"]
    assert stock["connections_after"] == "accepted"


def test_the_token_is_required_and_the_stock_client_carries_it(stock: dict[str, Any]) -> None:
    assert "HTTP 403" in stock["no_token"]
    assert "HTTP 403" in stock["wrong_token"]
    assert stock["user_info"] == "running"


def test_http_routes_schema_from_the_typed_actions_and_no_reference_anywhere(
    served: Served, stock: dict[str, Any]
) -> None:
    assert served.get("/health") == {"status": "healthy"}
    assert served.get("/schema") == json.loads(json.dumps(schema()))
    meta = served.get("/metadata")
    assert set(meta) == {
        "name",
        "description",
        "readme_content",
        "version",
        "author",
        "documentation_url",
    }
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(served.port_url + "/health", timeout=10)
    assert denied.value.code == 403
    request = urllib.request.Request(
        served.port_url + "/health", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.headers["X-Request-Id"]
    answers = json.loads(served.answers.read_text())
    shown = json.dumps([stock, *(served.get(p) for p in ("/schema", "/metadata", "/rcb"))])
    for body, _weight in answers.values():
        assert body.strip() not in shown


def _ws(served: Served) -> Any:
    return connect(served.url.replace("http://", "ws://") + "/ws", open_timeout=10)


def test_no_path_outside_the_workspace_no_hidden_file_and_no_key_is_served(served: Served) -> None:
    """An agent's careless or hostile requests over /ws: paths out of the workspace, the hidden
    reference and test files, the server's environment. Each is an error observation or an
    answer without them; the session goes on."""
    steps = [
        {"tool": "read_file", "path": "../../../../etc/passwd"},
        {"tool": "read_file", "path": "/etc/passwd"},
        {"tool": "read_file", "path": "attention/core_ref.py"},
        {"tool": "read_file", "path": "paper2code_test.py"},
        {"tool": "list_files", "path": ".."},
        {"tool": "run_command", "command": "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"},
        {"tool": "run_command", "command": "ls -R / 2>/dev/null | grep -c -x core_ref.py || true"},
    ]
    with _ws(served) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        seen = []
        for step in steps:
            ws.send(json.dumps({"type": "step", "data": step}))
            answer = json.loads(ws.recv(timeout=60))
            assert answer["type"] == "observation", (step, answer)
            seen.append(answer["data"]["observation"])
        ws.send(json.dumps({"type": "step", "data": {"tool": "submit"}}))
        assert json.loads(ws.recv(timeout=120))["data"]["done"] is True
    served.settle()
    assert all(o["text"].startswith("error:") for o in seen[:5]), [o["text"][:200] for o in seen]
    text = "\n".join(o["text"] for o in seen)
    assert "root:x:0:0" not in text
    assert FAKE_KEY not in text
    assert seen[-1]["text"].split()[0] == "0", seen[-1]["text"][:300]


def test_malformed_and_out_of_order_frames_are_answered_in_order_and_keep_the_session(
    served: Served,
) -> None:
    sent = [
        "{not json",
        "[1, 2]",
        json.dumps({"type": "frobnicate", "id": "u1"}),
        json.dumps({"type": "step", "data": {"tool": "list_files"}, "id": "before-reset"}),
        json.dumps({"type": "step", "id": "no-data"}),
        json.dumps({"type": "reset", "data": {"task_id": TASK}, "id": "r1"}),
        json.dumps({"type": "step", "data": {"tool": "read_file"}, "id": "s1"}),
        json.dumps({"type": "state", "id": "st"}),
    ]
    with _ws(served) as ws:
        for frame in sent:  # pipelined: all sent before any answer is read
            ws.send(frame)
        ws.send(b'{"type": "state", "id": "binary"}')
        answers = [json.loads(ws.recv(timeout=30)) for _ in range(len(sent) + 1)]
    codes = [a["data"].get("code") if a["type"] == "error" else a["type"] for a in answers]
    assert codes == [
        "INVALID_JSON",
        "VALIDATION_ERROR",
        "UNKNOWN_TYPE",
        "NO_EPISODE",
        "VALIDATION_ERROR",
        "observation",
        "observation",
        "state",
        "state",
    ]
    ids = [a["id"] for a in answers]
    assert ids[2:] == ["u1", "before-reset", "no-data", "r1", "s1", "st", "binary"]
    assert ids[0].endswith("-1")
    assert ids[1].endswith("-2")
    step = answers[6]["data"]
    assert step["observation"]["tool_ok"] is False
    assert step["done"] is False


def test_frames_that_are_no_frames_each_get_an_error_and_the_session_goes_on(
    served: Served,
) -> None:
    odd = [
        "null",
        '"reset"',
        "[" * 100_000,  # deeper than the JSON parser goes
        json.dumps({"type": "reset", "data": {"seed": -1}}),
        json.dumps({"type": "reset", "data": {"task_id": 5}}),
        json.dumps({"type": "reset", "data": []}),
        json.dumps({"type": 7}),
        json.dumps({"data": {"tool": "submit"}}),
        b"\xff\xfe not utf-8",
    ]
    with _ws(served) as ws:
        for frame in odd:
            ws.send(frame)
        answers = [json.loads(ws.recv(timeout=30)) for _ in odd]
        ws.send(json.dumps({"type": "state", "id": "still-here"}))
        last = json.loads(ws.recv(timeout=30))
    assert [a["type"] for a in answers] == ["error"] * len(odd)
    assert all(a["data"]["code"] and a["data"]["message"] for a in answers)
    assert last["id"] == "still-here"
    assert last["type"] == "state"


def test_a_frame_over_the_size_cap_is_refused_and_the_server_keeps_serving(
    served: Served,
) -> None:
    from websockets.exceptions import ConnectionClosed

    frame = json.dumps({"type": "step", "data": {"tool": "submit", "body": "x" * (5 << 20)}})

    def too_big() -> None:
        with _ws(served) as ws:
            ws.send(frame)  # the server may close while it is still being sent
            ws.recv(timeout=30)

    with pytest.raises(ConnectionClosed) as closed:
        too_big()
    # closed with 1009 (message too big), or cut while the frame was still being sent
    if closed.value.rcvd is not None:
        assert closed.value.rcvd.code == 1009
    with _ws(served) as ws:  # the next client is served
        ws.send(json.dumps({"type": "state", "id": "next"}))
        assert json.loads(ws.recv(timeout=30))["id"] == "next"


def test_a_client_gone_mid_episode_is_recorded_unscored_and_the_run_reads_as_an_eval_run(
    served: Served, stock: dict[str, Any]
) -> None:
    with _ws(served) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK, "episode_id": "gone-1"}}))
        reset = json.loads(ws.recv(timeout=30))
        assert reset["data"]["observation"]["episode_id"] == "gone-1"
    served.settle()
    gone = [r for r in served.records() if r.episode_id == "gone-1"]
    assert len(gone) == 1
    assert gone[0].status == "infra_error"
    assert gone[0].infra_error is not None
    assert gone[0].infra_error.type == "ClientDisconnected"
    closed = [r for r in served.records() if r.infra_error and r.infra_error.type == "ClientClosed"]
    assert closed  # the stock client's close() mid-episode
    assert all(r.status == "infra_error" for r in closed)
    (oracle,) = [r for r in served.records() if r.reason == "submit" and r.reward == 3.0]
    # the token data a client sent in a step's metadata is kept with the step it belongs to
    assert {
        "prompt_ids": [1, 2, 3],
        "completion_ids": [4, 5],
        "logprobs": [-0.1, -0.2],
        "step": 2,  # list_tools is no step: bad action 1, list_files 2
    } in oracle.model_calls
    rewards = {(r.status, r.reward, r.passed) for r in served.records() if r.reason == "submit"}
    assert ("completed", 3.0, True) in rewards
    assert ("completed", 0.0, False) in rewards
    summary = summarize_run(served.run_dir)
    assert summary.infra_errors >= 1
    assert summary.episodes >= 3
    assert summary.overall is not None


def test_the_servers_run_folder_reads_with_summary_compare_report_and_export(
    served: Served, stock: dict[str, Any], tmp_path: Path
) -> None:
    """Scope 4: the commands that read an evaluation's run folder read a server's as it is
    (its records: the oracle's 3 lines, the wrong body's 0, the unscored ones apart)."""
    import base64
    import gzip
    import re
    import shutil

    from click.testing import CliRunner

    from rcb_env.cli import cli

    run = served.run_dir
    records = served.records()
    runner = CliRunner()
    summary = runner.invoke(cli, ["summary", str(run), "--json", "--resamples", "100"])
    assert summary.exit_code == 0, summary.output
    numbers = json.loads(summary.output)
    assert numbers["episodes"] == len(records)
    assert numbers["infra_errors"] == sum(r.status == "infra_error" for r in records) > 0
    other = tmp_path / "copy" / run.name  # a second run to compare with: the same records
    shutil.copytree(run, other)
    compared = runner.invoke(cli, ["compare", str(run), str(other), "--resamples", "100"])
    assert compared.exit_code == 0, compared.output
    assert run.name in compared.output
    page = tmp_path / "report.html"
    report = runner.invoke(cli, ["report", str(run), "-o", str(page)])
    assert report.exit_code == 0, report.output
    packed = re.findall(r'id="ep-\d+">([^<]+)</script>', page.read_text())  # gzip, base64
    shown = [json.loads(gzip.decompress(base64.b64decode(p))) for p in packed]
    assert sorted(e["episode_id"] for e in shown) == sorted(r.episode_id for r in records)
    assert {e["agent"]["name"] for e in shown} == {"openenv"}
    scored = [r for r in records if r.reason == "submit"]
    out = tmp_path / "trajectories.jsonl"
    exported = runner.invoke(cli, ["export", "run", str(run), "--keep-incomplete", "-o", str(out)])
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((t["task_id"], t["sample"], t["reward"]) for t in lines) == sorted(
        (r.snippet_id, r.sample, None if r.status == "infra_error" else r.reward) for r in records
    )  # an unscored episode's reward: none
    atif = tmp_path / "atif"
    as_atif = runner.invoke(cli, ["export", "run", str(run), "--format", "atif", "-o", str(atif)])
    assert as_atif.exit_code == 0, as_atif.output
    assert len(list(atif.iterdir())) >= len(scored)


def test_sigterm_drains_an_open_episode_is_recorded_interrupted(served: Served) -> None:
    ws = _ws(served)
    ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK, "episode_id": "drained"}}))
    json.loads(ws.recv(timeout=30))
    served.proc.send_signal(signal.SIGTERM)
    health = 200
    deadline = time.monotonic() + 5
    while health == 200 and time.monotonic() < deadline:  # draining: health says so
        try:
            served.get("/health")
        except urllib.error.HTTPError as exc:
            health = exc.code
        except OSError:
            health = 0  # gone: it did not drain
        time.sleep(0.05)
    assert health == 503  # draining (for --drain-s: an episode is open)
    # a new episode is refused; the running one is left to the drain
    ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK}, "id": "late"}))
    late = json.loads(ws.recv(timeout=30))
    assert late["id"] == "late"
    assert late["data"]["code"] == "DRAINING"
    assert served.proc.wait(timeout=30) == 0
    ws.close()
    (drained,) = [r for r in served.records() if r.episode_id == "drained"]
    assert drained.status == "infra_error"
    assert drained.infra_error is not None
    assert drained.infra_error.type == "ServerShutdown"


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        ({"idle_s": 5.0}, "agent_stopped"),
        ({"episode_wall_s": 0.01}, "budget_wall_s"),
    ],
)
def test_the_reaper_ends_idle_and_overlong_episodes_and_keeps_the_session(
    tmp_path: Path, limits: dict[str, float], reason: str
) -> None:
    """An episode whose client went quiet (or that ran past the wall limit) is ended, graded
    as it stands and recorded; the session's next frame gets the ended observation."""
    cfg = EvalConfig(agent="openenv", sandbox=SandboxConfig(backend="local"))
    server = EpisodeServer(
        load_tasks(None), cfg, tmp_path / "run", ServeLimits.model_validate(limits)
    )

    Answer = dict[str, Any] | None

    async def play() -> tuple[Answer, dict[str, int], Answer]:
        session = server.connect({"client": "test"})
        reset = await session.answer(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
        quiet = await server.reap(time.monotonic())  # nothing is overdue yet (idle)
        await asyncio.sleep(0.05)
        ended = await server.reap(time.monotonic() + 10)
        after = await session.answer(json.dumps({"type": "step", "data": {"tool": "list_files"}}))
        return reset, {"quiet": quiet, "ended": ended}, after

    try:
        reset, counts, after = asyncio.run(play())
    finally:
        server.close()
    assert reset is not None
    assert reset["data"]["done"] is False
    assert counts["quiet"] + counts["ended"] == 1  # once, by whichever pass found it overdue
    if reason == "agent_stopped":
        assert counts["quiet"] == 0  # not before idle_s
    assert after is not None
    assert after["data"]["done"] is True
    assert "ended" in after["data"]["observation"]["text"]
    assert server.open_episodes == 0
    (record,) = read_records(tmp_path / "run" / RECORDS)
    assert record.reason == reason
    assert record.status == "truncated"
    assert record.passed is False


class _FactorySayingWhenStarted(SandboxFactory):
    """A sandbox factory that says when its last sandbox has started."""

    def __init__(self, config: SandboxConfig, started: threading.Event) -> None:
        super().__init__(config)
        self.started = started

    def create(self, paper: Paper, snippet: Snippet) -> Sandbox:
        sandbox = super().create(paper, snippet)
        self.started.set()
        return sandbox


class _LedgerSlowToDisk(RunLedger[EpisodeRecord]):
    """The eval ledger, whose forcing of a line to disk waits until ``allowed`` (at most 5 s;
    each wait noted: True when it ran out) and notes whether the sandbox had started."""

    def __init__(self, records: Path, allowed: threading.Event, started: threading.Event) -> None:
        plain = eval_ledger(records)
        super().__init__(records, model=EpisodeRecord, key=plain.key, counts=plain.counts)
        self.allowed = allowed
        self.started = started
        self.waited_out: list[bool] = []
        self.after_the_sandbox: list[bool] = []

    def start(self, name: str, *, sync: bool = True) -> EpisodeRecord | None:
        if sync:
            self.waited_out.append(not self.allowed.wait(timeout=5))
        return super().start(name, sync=sync)

    def sync(self) -> None:
        self.after_the_sandbox.append(self.started.is_set())
        self.waited_out.append(not self.allowed.wait(timeout=5))
        super().sync()


def test_a_resets_started_line_is_written_before_the_answer_and_synced_off_its_path(
    tmp_path: Path,
) -> None:
    """The started line's fsync (0.2-5 ms on a busy disk, and a sandbox starting beside it
    slows by as much) is not waited for by the reset: the line is written (a killed server
    leaves it) when the reset is answered, and forced to disk after the sandbox started."""
    cfg = EvalConfig(agent="openenv", sandbox=SandboxConfig(backend="local"))
    server = EpisodeServer(load_tasks(None), cfg, tmp_path / "run")
    allowed, started = threading.Event(), threading.Event()
    server.factory = _FactorySayingWhenStarted(cfg.sandbox, started)
    ledger = _LedgerSlowToDisk(tmp_path / "run" / RECORDS, allowed, started)
    server.ledger = ledger

    async def reset() -> tuple[dict[str, Any] | None, str]:
        session = server.connect({"client": "test"})
        answer = await session.answer(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
        written = (tmp_path / "run" / EVENTS).read_text()
        allowed.set()
        await session.disconnected()
        return answer, written

    try:
        answer, written = asyncio.run(reset())
    finally:
        server.close()
        server.factory.close()
    assert answer is not None
    assert answer["data"]["observation"]["status"] == "running"
    assert json.loads(written) == {"key": f"{TASK}#0", "event": "started"}
    assert ledger.waited_out == [False]  # synced once, after the answer
    assert ledger.after_the_sandbox == [True]  # not beside its start


def test_a_token_is_needed_off_loopback_and_must_stand_in_a_url() -> None:
    from click.testing import CliRunner

    from rcb_env.cli import cli
    from rcb_env.integrations.serve.app import needs_token

    assert not needs_token("127.0.0.1")
    assert not needs_token("::1")
    assert not needs_token("localhost")
    assert needs_token("0.0.0.0")
    assert needs_token("10.1.2.3")
    assert needs_token("gpu-node-3")
    short = CliRunner().invoke(cli, ["serve", "--token", "abc"])
    assert short.exit_code == 2
    assert "--token" in short.output


def test_reward_hack_bodies_submitted_through_the_server_score_zero_never_unscored(
    require_bwrap: None, tmp_path: Path
) -> None:
    """One attack of each kind (tests/attacks.py) submitted over /ws: each episode is scored
    and its reward is 0 (an attack that gets itself excluded would be a reward of null)."""
    from rcb_env.validation.hacks import TARGET
    from tests.attacks import FRONT_DOOR

    proc, url = _start(tmp_path / "runs", TARGET[0])
    try:
        with connect(url.replace("http://", "ws://") + "/ws", open_timeout=10) as ws:
            for name, body in FRONT_DOOR.items():
                task = f"{TARGET[0]}/{TARGET[1]}"
                ws.send(json.dumps({"type": "reset", "data": {"task_id": task}}))
                assert json.loads(ws.recv(timeout=60))["type"] == "observation", name
                ws.send(json.dumps({"type": "step", "data": {"tool": "submit", "body": body}}))
                answer = json.loads(ws.recv(timeout=300))["data"]
                seen = answer["observation"]
                assert answer["done"] is True, name
                assert (answer["reward"], seen["scored"], seen["passed"]) == (0.0, True, False), (
                    name,
                    seen["text"][-300:],
                )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
