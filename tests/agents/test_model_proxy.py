"""The metering model proxy in front of the scripted model server: the three wire formats
streamed through it by the real SDK clients, the episode token in place of the real key, the
budgets, upstream failures marked as infrastructure; and the real agent CLIs (Claude Code,
Codex, installed by ``scripts/install.sh``) run in a bwrap sandbox whose only way out is the
proxy's unix socket."""

from __future__ import annotations

import http.client
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rcb_agents import clis
from rcb_agents.models.pricing import Price
from rcb_agents.models.proxy import (
    Budget,
    RecordingProxy,
    Tap,
    api_key_from_env,
    forwarder_command,
)
from rcb_agents.models.retry import RetryPolicy
from rcb_agents.models.types import Usage
from rcb_agents.testing.server import Fault, Reply, ScriptedModelServer

from rcb_env import config
from rcb_env.sandbox.backends.bwrap import bwrap_command
from rcb_env.sandbox.base import Limits

KEY = "sk-real-key-MARKER-7f3a"


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(api_key=KEY) as s:
        yield s


@pytest.fixture
def proxy(server: ScriptedModelServer, tmp_path: Path) -> Iterator[RecordingProxy]:
    prices = {"m": Price(input=1.0, output=2.0, cached_input=0.5)}
    with RecordingProxy(
        server.url, prices=prices, api_key=KEY, unix_socket=tmp_path / "m.sock"
    ) as p:
        yield p


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost")
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(self.socket_path))


def _tcp(url: str) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    return http.client.HTTPConnection(host, int(port))


def _post(
    conn: http.client.HTTPConnection, path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, bytes]:
    conn.request("POST", path, json.dumps(body), {"content-type": "application/json", **headers})
    resp = conn.getresponse()
    return resp.status, resp.read()


def test_anthropic_stream_through_the_proxy(
    server: ScriptedModelServer, proxy: RecordingProxy
) -> None:
    """The Anthropic SDK's stream (as Claude Code asks it, with a system-role item among the
    messages): a tool call arrives as input_json_delta pieces, the usage is read from
    message_start and message_delta, the token is swapped for the key and the beta header
    forwarded."""
    tap = proxy.open_episode()
    server.extend([Reply(tool_calls=(("Write", {"file_path": "a.py", "content": "x = 1\n"}),),
                         input_tokens=100, output_tokens=7, cached_tokens=30)])  # fmt: skip
    import anthropic  # the SDKs: imported where used, not at collection

    client = anthropic.Anthropic(base_url=proxy.url, api_key=tap.token, max_retries=0)
    messages: Any = [
        {"role": "user", "content": "write a.py"},
        {"role": "system", "content": "<environment>"},
    ]
    with client.messages.stream(
        model="m",
        max_tokens=100,
        messages=messages,
        extra_headers={"anthropic-beta": "claude-code-20250219"},
    ) as stream:
        message = stream.get_final_message()
    block = message.content[0]
    assert block.type == "tool_use"
    assert block.input == {"file_path": "a.py", "content": "x = 1\n"}
    sent = server.headers[-1]
    assert KEY in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))
    assert tap.token not in json.dumps(sent)
    assert sent["anthropic-beta"] == "claude-code-20250219"
    assert server.requests[-1][1]["stream"] is True
    [call] = tap.drain()
    assert call.usage == Usage(input_tokens=100, output_tokens=7, cached_tokens=30)
    assert call.cost == pytest.approx((70 * 1.0 + 30 * 0.5 + 7 * 2.0) / 1e6)
    assert call.error is None
    assert tap.outcome == "ok"


def test_responses_stream_through_the_proxy(
    server: ScriptedModelServer, proxy: RecordingProxy
) -> None:
    """The OpenAI SDK's Responses stream (as Codex asks it): a function_call item built from its
    argument deltas, the usage with cached tokens read from response.completed."""
    tap = proxy.open_episode()
    server.extend([Reply(tool_calls=(("exec_command", {"cmd": "ls"}),), cached_tokens=10),
                   Reply(text="done")])  # fmt: skip
    import openai

    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=tap.token, max_retries=0)
    with client.responses.stream(model="m", input="list") as stream:
        first = stream.get_final_response()
    assert first.output[0].type == "function_call"
    assert json.loads(first.output[0].arguments) == {"cmd": "ls"}
    with client.responses.stream(model="m", input="again") as stream:
        second = stream.get_final_response()
    assert second.output_text == "done"
    assert server.headers[-1]["authorization"] == f"Bearer {KEY}"
    calls = tap.drain()
    assert [c.usage for c in calls] == [
        Usage(input_tokens=100, output_tokens=20, cached_tokens=10),
        Usage(input_tokens=100, output_tokens=20),
    ]
    assert tap.tokens == 240
    assert tap.requests == 2


def test_chat_stream_and_unix_socket(
    server: ScriptedModelServer, proxy: RecordingProxy, tmp_path: Path
) -> None:
    """Chat completions streamed over the proxy's unix socket: the usage from the last chunk."""
    tap = proxy.open_episode()
    server.extend([Reply(text="hi", input_tokens=40, output_tokens=2)])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    status, answer = _post(
        _UnixConnection(tmp_path / "m.sock"),
        "/v1/chat/completions",
        body,
        {"authorization": f"Bearer {tap.token}"},
    )
    assert status == 200
    assert b"data: [DONE]" in answer
    assert tap.drain()[0].usage == Usage(input_tokens=40, output_tokens=2)


def test_a_wrong_token_is_refused_and_never_forwarded(
    server: ScriptedModelServer, proxy: RecordingProxy
) -> None:
    """No token, another token, a closed episode's token, and the real key itself from the
    agent's side: 401 from the proxy, nothing reaches the endpoint. The episode token used
    directly against the endpoint is useless (401 there)."""
    tap = proxy.open_episode()
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    closed = proxy.open_episode()
    proxy.close_episode(closed)
    for headers in ({}, {"x-api-key": "rcb-guess"}, {"x-api-key": closed.token},
                    {"authorization": "Bearer nope"}):  # fmt: skip
        status, answer = _post(_tcp(proxy.url), "/v1/messages",
                               body, headers)  # fmt: skip
        assert status == 401, answer
        assert json.loads(answer)["error"]["type"] == "authentication_error"
    assert server.requests == []
    assert proxy.unauthorized == 4
    status, _ = _post(_tcp(server.url), "/v1/messages", body,
                      {"x-api-key": tap.token})  # fmt: skip
    assert status == 401
    assert server.refused == 1
    with pytest.raises(ValueError, match="holds the key"):
        RecordingProxy(server.url).open_episode()


@pytest.mark.parametrize(
    ("path", "status"),
    [("/v1/messages", 403), ("/v1/responses", 400), ("/v1/chat/completions", 400)],
)
def test_a_spent_budget_is_answered_without_forwarding(
    server: ScriptedModelServer, proxy: RecordingProxy, path: str, status: int
) -> None:
    """Past its token budget an episode's next call is answered by the proxy (403 for Anthropic
    Messages, where Claude Code stops at once; 400 for the OpenAI formats, where Codex does) and
    the tap says budget, not infrastructure."""
    tap = proxy.open_episode(Budget(tokens=150))
    server.extend([Reply(text="a", input_tokens=100, output_tokens=60), Reply(text="b")])
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "input": "x",
            "max_tokens": 5}  # fmt: skip
    auth = {"x-api-key": tap.token}
    assert _post(_tcp(proxy.url), path, body, auth)[0] == 200
    code, answer = _post(_tcp(proxy.url), path, body, auth)
    assert code == status
    assert b"token budget spent (160 of 150)" in answer
    assert len(server.requests) == 1
    assert tap.requests == 1
    assert tap.refused == 1
    assert tap.outcome == "budget"
    assert tap.cut_off == "token budget spent (160 of 150)"


def test_call_and_cost_budgets(server: ScriptedModelServer, proxy: RecordingProxy) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    calls = proxy.open_episode(Budget(calls=2))
    dear = proxy.open_episode(Budget(cost_usd=0.0001))
    server.extend([Reply(text="a")] * 4)
    codes = [_post(_tcp(proxy.url), "/v1/chat/completions", body,
                   {"authorization": f"Bearer {tap.token}"})[0]
             for tap in (calls, calls, calls, dear, dear)]  # fmt: skip
    assert codes == [200, 200, 400, 200, 400]
    assert calls.cut_off == "model-call budget spent (2 of 2)"
    assert dear.cut_off is not None
    assert dear.cut_off.startswith("cost budget spent")


def test_upstream_failures_are_infrastructure(
    server: ScriptedModelServer, proxy: RecordingProxy
) -> None:
    """An upstream 500 or 429, or an endpoint that does not answer, marks the episode's tap as
    infrastructure (the agent's own 400 does not)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    outcomes = []
    for fault in (Fault(status=400), Fault(status=500), Fault(status=429)):
        tap = proxy.open_episode()
        server.extend([fault])
        status, _ = _post(_tcp(proxy.url), "/v1/chat/completions",
                          body, {"authorization": f"Bearer {tap.token}"})  # fmt: skip
        assert status == fault.status
        outcomes.append((tap.outcome, tap.calls[0].error))
    assert outcomes == [("ok", "HTTP 400"), ("infrastructure", "HTTP 500"),
                        ("infrastructure", "HTTP 429")]  # fmt: skip
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with RecordingProxy(dead, api_key=KEY) as down:
        tap = down.open_episode()
        status, _ = _post(_tcp(down.url),
                          "/v1/messages", body, {"x-api-key": tap.token})  # fmt: skip
    assert status == 502
    assert tap.outcome == "infrastructure"
    assert tap.infrastructure is not None
    assert "did not answer" in tap.infrastructure


def test_the_proxy_retries_the_endpoint_before_it_gives_up(server: ScriptedModelServer) -> None:
    """With a retry policy the proxy retries a 500 or 429 itself (the CLI never sees it: the
    call succeeds, its retry recorded); still failing after the last try, the endpoint's own
    answer is passed on and the tap says infrastructure."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    policy = RetryPolicy(attempts=3, scale=0)
    with RecordingProxy(server.url, api_key=KEY, retry=policy) as p:
        tap = p.open_episode()
        server.extend([Fault(status=500), Reply(text="ok")])
        status, _ = _post(_tcp(p.url), "/v1/chat/completions", body,
                          {"authorization": f"Bearer {tap.token}"})  # fmt: skip
        assert status == 200
        assert tap.outcome == "ok"
        assert [c.retries for c in tap.calls] == [1]
        server.extend([Fault(status=429, retry_after=0)] * 3)
        status, answer = _post(_tcp(p.url), "/v1/chat/completions", body,
                               {"authorization": f"Bearer {tap.token}"})  # fmt: skip
        assert status == 429
        assert json.loads(answer)["error"]["message"] == "scripted fault"
        assert tap.infrastructure == "the model endpoint answered HTTP 429"
        assert tap.calls[-1].retries == 2
    assert len(server.requests) == 5


def test_the_real_key_comes_from_the_host_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-oai")
    assert api_key_from_env("anthropic") == "sk-ant"
    assert api_key_from_env("openai") == "sk-oai"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert api_key_from_env("openai") == ""


def test_passthrough_forwards_the_clients_own_credentials(server: ScriptedModelServer) -> None:
    """Without a key of its own (the host-side framework agents) the proxy forwards the
    client's credentials, as before."""
    server.extend([Reply(text="hi")])
    with RecordingProxy(server.url) as p:
        import openai

        client = openai.OpenAI(base_url=p.url + "/v1", api_key=KEY, max_retries=0)
        out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert out.choices[0].message.content == "hi"
        assert p.tokens == 120
        assert [c.usage.total for c in p.drain()] == [120]
    assert server.headers[-1]["authorization"] == f"Bearer {KEY}"


# the real CLIs in a sandbox ------------------------------------------------------------------

#: What the agent sees from inside, written to the workspace by its own shell tool: its
#: environment, every process's environment and command line, every file under /tmp (its home
#: and the CLI's state) and ``extra`` folders, and whether the host's ports (the proxy's, the
#: endpoint's) answer on the loopback.
SPY = (
    "env > seen_env.txt; "
    "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; echo; done"
    " > seen_proc.txt 2>/dev/null; "
    "find /tmp {extra} -type f -exec cat {{}} + > seen_files.txt 2>/dev/null; "
    "for port in {ports}; do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null"
    " && echo open || echo closed; done > seen_net.txt; true"
)
FORWARDER_PORT = 18080
SYSTEM_PYTHON = "/usr/bin/python3"


def _executable(cli: clis.AgentCli) -> Path:
    """The CLI's binary; the test skips where it is not installed, and FAILS in CI."""
    path = cli.executable()
    if path is None:
        reason = f"{cli.name} {cli.version} is not installed (scripts/install.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def _sandbox_user() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("rcb-sandbox")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


class Episode:
    """A sandbox area (workspace, the proxy's socket folder, codex's home) in the scratch
    folder, reachable by the sandbox user; the proxy on its socket, in front of the server."""

    def __init__(self, server: ScriptedModelServer, budget: Budget | None = None) -> None:
        self.area = Path(tempfile.mkdtemp(prefix="rcb-cli-", dir=config.scratch_dir()))
        self.area.chmod(0o755)
        self.user = _sandbox_user()
        for name in ("ws", "sock", "codex"):
            (self.area / name).mkdir(mode=0o755)
            if self.user is not None and name != "sock":
                os.chown(self.area / name, *self.user)
        self.socket = self.area / "sock" / "m.sock"
        self.proxy = RecordingProxy(server.url, api_key=KEY, unix_socket=self.socket).__enter__()
        self.tap: Tap = self.proxy.open_episode(budget)

    @property
    def workspace(self) -> Path:
        return self.area / "ws"

    def close(self) -> None:
        self.proxy.close()
        shutil.rmtree(self.area, ignore_errors=True)

    def run(self, cli: str, prompt: str = "write hello.py") -> subprocess.CompletedProcess[str]:
        """The real CLI in bwrap (``--unshare-all``: no network): the socket's folder is its
        only way out."""
        ro_binds = [str(self.socket.parent)]
        binds: list[tuple[str, str]] = []
        if cli == "claude-code":
            binary = _executable(clis.CLAUDE_CODE)
            ro_binds.append(str(clis.CLAUDE_CODE.folder()))
            env = clis.claude_env(str(self.socket), self.tap.token)
            argv = clis.claude_argv(str(binary), prompt, "claude-scripted")
        else:
            binary = _executable(clis.CODEX)
            ro_binds.append(str(clis.CODEX.folder()))
            home = self.area / "codex"
            (home / "config.toml").write_text(clis.codex_config("rcb-scripted", FORWARDER_PORT))
            binds.append((str(home), str(home)))
            env = clis.codex_env(str(home), self.tap.token)
            argv = [*forwarder_command(SYSTEM_PYTHON, FORWARDER_PORT, str(self.socket)),
                    *clis.codex_argv(str(binary), prompt)]  # fmt: skip
        command = bwrap_command(
            binds=[(str(self.workspace), "/workspace"), *binds],
            ro_binds=ro_binds,
            cwd="/workspace",
            env={"PATH": "/usr/bin:/bin", "HOME": "/tmp/home", **env},
            limits=Limits(),
            identity=self.user,
            dirs=["/tmp/home"],
        )
        return subprocess.run(
            [*command, *argv],
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            check=False,
        )


@pytest.fixture
def sandboxed(require_bwrap: None, server: ScriptedModelServer) -> Iterator[list[Episode]]:
    episodes: list[Episode] = []
    yield episodes
    for episode in episodes:
        episode.close()


def _write(cli: str) -> tuple[str, dict[str, Any]]:
    """The CLI's own tool call that writes hello.py."""
    if cli == "claude-code":
        return "Write", {"file_path": "hello.py", "content": "x = 1\n"}
    return "exec_command", {"cmd": "printf 'x = 1\\n' > hello.py"}


def _shell(cli: str, command: str) -> tuple[str, dict[str, Any]]:
    return (
        ("Bash", {"command": command})
        if cli == "claude-code"
        else ("exec_command", {"cmd": command})
    )


CLIS = pytest.mark.parametrize("cli", ["claude-code", "codex"])


@pytest.mark.slow
@CLIS
def test_the_real_cli_works_through_the_socket_and_never_sees_the_key(
    sandboxed: list[Episode], server: ScriptedModelServer, cli: str
) -> None:
    """The CLI, in bwrap with no network, reaches the model only through the proxy's socket,
    writes hello.py with its own tool as the script says, and the proxy recorded its calls with
    usage. From inside, the host's ports do not answer, and its own shell tool finds its episode
    token but not the real key: not in its environment, any process's environment or command
    line, or any file of its home or state; and the token is useless to the endpoint directly."""
    episode = Episode(server)
    sandboxed.append(episode)
    extra = str(episode.area / "codex") if cli == "codex" else ""
    ports = " ".join(url.split(":")[2].split("/")[0] for url in (episode.proxy.url, server.url))
    server.extend([
        Reply(tool_calls=(_write(cli),)),
        Reply(tool_calls=(_shell(cli, SPY.format(extra=extra, ports=ports)),)),
        Reply(text="done"),
    ])  # fmt: skip
    run = episode.run(cli)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert (episode.workspace / "hello.py").read_text() == "x = 1\n"
    assert len(server.requests) == 3
    calls = episode.tap.drain()
    assert [c.usage for c in calls] == [Usage(input_tokens=100, output_tokens=20)] * 3
    assert episode.tap.outcome == "ok"
    seen = {n: (episode.workspace / n).read_text(errors="replace")
            for n in ("seen_env.txt", "seen_proc.txt", "seen_files.txt")}  # fmt: skip
    # the spy does see the CLI's own secret and its state (the session transcript)
    assert episode.tap.token in seen["seen_proc.txt"]
    assert "hello.py" in seen["seen_files.txt"]
    for name, text in seen.items():
        assert KEY not in text, name
    assert (episode.workspace / "seen_net.txt").read_text().split() == ["closed", "closed"]
    if cli == "codex":
        files = [f for f in (episode.area / "codex").rglob("*") if f.is_file()]
        assert all(KEY.encode() not in f.read_bytes() for f in files)
    status, _ = _post(_tcp(server.url), "/v1/messages", {"model": "m"},
                      {"x-api-key": episode.tap.token})  # fmt: skip
    assert status == 401


@pytest.mark.slow
@CLIS
def test_a_token_budget_cuts_the_real_cli_off(
    sandboxed: list[Episode], server: ScriptedModelServer, cli: str
) -> None:
    """Past its token budget the CLI's next call is refused without forwarding; the CLI exits
    at once (no retries, no second request) and the tap says budget (truncated, graded as it
    stands: the file it wrote is there)."""
    episode = Episode(server, Budget(tokens=100))
    sandboxed.append(episode)
    server.extend([Reply(tool_calls=(_write(cli),)), Reply(text="never sent")])
    run = episode.run(cli)
    assert run.returncode != 0
    assert (episode.workspace / "hello.py").read_text() == "x = 1\n"
    assert len(server.requests) == 1
    assert episode.tap.outcome == "budget"
    assert episode.tap.refused == 1
    assert episode.tap.cut_off == "token budget spent (120 of 100)"


@pytest.mark.slow
@CLIS
def test_an_upstream_500_is_infrastructure(
    sandboxed: list[Episode], server: ScriptedModelServer, cli: str
) -> None:
    episode = Episode(server)
    sandboxed.append(episode)
    server.extend([Fault(status=500)])
    run = episode.run(cli)
    assert run.returncode != 0
    assert len(server.requests) == 1
    assert episode.tap.outcome == "infrastructure"
    assert episode.tap.infrastructure == "the model endpoint answered HTTP 500"


# A careless or hostile client (the agent in the sandbox is one) -----------------------------


def _raw(path: Path, data: bytes, timeout: float = 10) -> bytes:
    """What the proxy answers to ``data`` sent as it is on its unix socket."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(data)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got


def test_malformed_and_oversized_requests_are_refused_before_their_body_is_read(
    server: ScriptedModelServer, proxy: RecordingProxy
) -> None:
    from rcb_agents.models.proxy import MAX_BODY

    assert proxy.unix_socket is not None
    tap = proxy.open_episode()
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tap.token}\r\n"
    # announces far more than the cap and sends none of it: refused at once, nothing read
    huge = _raw(proxy.unix_socket, f"{head}Content-Length: {MAX_BODY + 1}\r\n\r\n".encode())
    assert huge.startswith(b"HTTP/1.1 413"), huge[:200]
    for bad in ("-5", "12abc"):
        answer = _raw(proxy.unix_socket, f"{head}Content-Length: {bad}\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 400"), (bad, answer[:200])
    # a client that goes away mid-body: nothing forwarded, and the proxy serves the next one
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(proxy.unix_socket))
        sock.sendall(f'{head}Content-Length: 1000\r\n\r\n{{"model"'.encode())
    assert server.requests == []
    server.extend([Reply(text="fine")])
    import openai

    client = openai.OpenAI(base_url=proxy.url, api_key=tap.token, max_retries=0)
    done = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert done.choices[0].message.content == "fine"
    assert len(server.requests) == 1


def test_a_token_buys_model_calls_only_not_the_endpoints_other_paths(
    server: ScriptedModelServer, proxy: RecordingProxy
) -> None:
    """With the real key behind it, the proxy forwards the model calls alone: an episode's
    token reaches no other API of the endpoint (its files, an organisation's settings) and no
    path outside the endpoint's."""
    tap = proxy.open_episode()
    paths = ("/v1/files", "/v1/../../etc/passwd", "/v1/organization/api_keys")
    for method, path in [("GET", p) for p in paths] + [("POST", "/v1/files")]:
        conn = _tcp(proxy.url)
        conn.request(method, path, b"{}" if method == "POST" else None,
                     {"authorization": f"Bearer {tap.token}"})  # fmt: skip
        resp = conn.getresponse()
        assert resp.status == 404, (path, resp.status)
        assert KEY.encode() not in resp.read()
        conn.close()
    assert server.requests == []


def test_a_slow_client_is_let_go(server: ScriptedModelServer, tmp_path: Path) -> None:
    with RecordingProxy(
        server.url, api_key=KEY, unix_socket=tmp_path / "s.sock", client_timeout_s=1.0
    ) as p:
        assert p.unix_socket is not None
        t0 = time.monotonic()
        assert _raw(p.unix_socket, b"POST /v1/chat/comp", timeout=30) == b""
        assert time.monotonic() - t0 < 15


def test_more_clients_than_the_cap_wait_for_a_slot(server: ScriptedModelServer) -> None:
    """Four clients at once through a proxy capped at one call: the endpoint sees one at a time,
    and every client is answered."""
    import concurrent.futures

    script: list[Reply | Fault] = []
    for i in range(4):
        script += [Fault(delay_s=0.3), Reply(text=f"r{i}")]
    server.extend(script)
    with RecordingProxy(server.url, api_key=KEY, concurrency=1) as p:
        taps = [p.open_episode() for _ in range(4)]

        def ask(token: str) -> str | None:
            import openai

            client = openai.OpenAI(base_url=p.url, api_key=token, max_retries=0)
            answer = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
            return answer.choices[0].message.content

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, [t.token for t in taps]))
    assert sorted(a or "" for a in answers) == ["r0", "r1", "r2", "r3"]
    assert server.max_in_flight == 1
