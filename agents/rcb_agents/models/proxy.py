"""The metering model proxy: the one way an agent's model traffic leaves its process (or its
sandbox), on 127.0.0.1 and/or a unix socket.

Agents call the model through clients of their own, which rcb-env cannot reach; pointed at this
proxy instead of the endpoint, every call they make is forwarded (streamed answers as they
arrive) and recorded the way rcb-env's own model layer records its calls
(:class:`~rcb_agents.models.types.ModelCall`: usage, cost from the price table, latency,
errors), under the endpoint's concurrency cap (shared with rcb-env's own clients, and across a
Ray cluster). It speaks OpenAI chat completions and Responses and Anthropic Messages, and reads
the usage from each format's answer or stream.

Two modes:

- **passthrough** (``api_key=None``): the client's own credentials are forwarded; for agent
  frameworks that run in rcb-env's process and hold the key anyway.
- **holding the key** (``api_key`` given): the real key stays in the proxy. Each episode opens a
  :class:`Tap` (:meth:`RecordingProxy.open_episode`) and hands its token to the agent; a request
  is forwarded only with a live token (``x-api-key`` or ``Authorization: Bearer``), the token
  replaced by the key; any other credential is answered 401 and never forwarded. The tap records
  the episode's calls, enforces its :class:`Budget` (past it the proxy answers without
  forwarding, in the way each CLI stops at once: 403 for Anthropic Messages, 400 for the OpenAI
  formats) and tells an upstream failure (infrastructure) from the agent's own.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socketserver
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from rcb_agents.models.client import _cap
from rcb_agents.models.errors import ProviderError, RetryableError
from rcb_agents.models.pricing import Price, cost
from rcb_agents.models.retry import (
    RETRYABLE_STATUS,
    RetryPolicy,
    call_with_retries,
    classify_status,
)
from rcb_agents.models.types import ModelCall, Usage
from rcb_env.frozen import Frozen

#: Request headers passed on to the endpoint (the rest are hop-by-hop or the proxy's own).
_FORWARD = ("authorization", "content-type", "content-encoding", "accept",
            "openai-organization", "openai-beta", "user-agent", "x-api-key",
            "anthropic-version", "anthropic-beta")  # fmt: skip

Wire = Literal["chat", "responses", "messages"]

#: The proxy's default: the endpoint's failure passed on at once.
NO_RETRY = RetryPolicy(attempts=1)

#: Upstream answers that are not the agent's doing: the endpoint failed or refused the key.
_UPSTREAM_FAILURES = frozenset({401, 403, 429})


#: The largest request body the proxy reads (a model call's JSON is far smaller).
MAX_BODY = 32 * 1024 * 1024
NOT_A_MODEL_CALL = "not a model call"


def api_key_from_env(provider: str) -> str:
    """The real key of a provider as the host process has it (``ANTHROPIC_API_KEY`` or
    ``OPENAI_API_KEY``; empty for a local endpoint that needs none)."""
    name = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    return os.environ.get(name, "")


class Budget(Frozen):
    """An episode's model budgets; None is unlimited. A call that crosses one is answered (its
    usage is only known afterwards); the next is refused."""

    tokens: int | None = None
    """Input plus output tokens over the episode's calls."""
    cost_usd: float | None = None
    """Cost from the price table."""
    calls: int | None = None
    """Model calls forwarded."""


class Tap:
    """One episode's side of the proxy: its token, its calls, and why it stopped when the proxy
    stopped it (:attr:`cut_off`, a budget: truncated) or the endpoint failed it
    (:attr:`infrastructure`)."""

    def __init__(self, token: str, budget: Budget) -> None:
        self.token = token
        self.budget = budget
        self.calls: list[ModelCall] = []
        """Every call recorded for the episode (not drained)."""
        self.tokens = 0
        self.cost = 0.0
        self.requests = 0
        """Model calls forwarded."""
        self.refused = 0
        """Requests answered without forwarding because a budget was spent."""
        self.cut_off: str | None = None
        """Which budget ended the episode (the first refusal); None if none did."""
        self.infrastructure: str | None = None
        """The first upstream failure (5xx, 429, refused key, no connection); None if none."""
        self.live = True
        self._drained = 0

    @property
    def outcome(self) -> Literal["ok", "budget", "infrastructure"]:
        """How the proxy saw the episode: an upstream failure wins over a budget."""
        if self.infrastructure is not None:
            return "infrastructure"
        return "budget" if self.cut_off is not None else "ok"

    def spent(self) -> str | None:
        """The budget that is spent, as a sentence; None while every one has room."""
        found = self._spent()
        return found[1] if found is not None else None

    @property
    def cut_off_budget(self) -> Literal["tokens", "cost", "model_calls"] | None:
        """Which budget ended the episode (:attr:`cut_off`) by its name in the episode's
        budgets; None if none did."""
        if self.cut_off is None:
            return None
        found = self._spent()
        return found[0] if found is not None else None

    def _spent(self) -> tuple[Literal["tokens", "cost", "model_calls"], str] | None:
        b = self.budget
        if b.tokens is not None and self.tokens >= b.tokens:
            return "tokens", f"token budget spent ({self.tokens} of {b.tokens})"
        if b.cost_usd is not None and self.cost >= b.cost_usd:
            return "cost", f"cost budget spent (${self.cost:.4f} of ${b.cost_usd:.4f})"
        if b.calls is not None and self.requests >= b.calls:
            return "model_calls", f"model-call budget spent ({self.requests} of {b.calls})"
        return None

    def drain(self) -> list[ModelCall]:
        """The calls recorded since the last drain."""
        calls = self.calls[self._drained :]
        self._drained = len(self.calls)
        return calls


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class RecordingProxy:
    """Forwards ``<url>/...`` to ``<upstream>/...``; :meth:`drain` returns the calls recorded
    since the last drain (all episodes), :attr:`tokens` and :attr:`cost` the totals.

    ``unix_socket``: also listen on this socket file (mode 0666: the sandbox user connects
    through a bind of its folder). ``retry``: how the proxy retries the endpoint's 429, 5xx and
    connection failures before it passes the last one on (default: it does not; an agent CLI is
    told not to retry, so the proxy's log alone decides what was the endpoint's failure)."""

    def __init__(  # noqa: PLR0913 (the endpoint, its prices, cap and key, and where to listen)
        self,
        upstream: str,
        *,
        prices: dict[str, Price] | None = None,
        concurrency: int = 4,
        provider: str = "openai",
        api_key: str | None = None,
        unix_socket: Path | None = None,
        retry: RetryPolicy = NO_RETRY,
        client_timeout_s: float = 120.0,
    ) -> None:
        parts = urllib.parse.urlsplit(upstream.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) endpoint: {upstream!r}")
        self.upstream = parts
        self.prices = prices or {}
        self.provider = provider
        self.api_key = api_key
        self.retry = retry
        self.client_timeout_s = client_timeout_s
        """How long a client may keep a connection without sending (a slow client is let go)."""
        self._cap = _cap((provider, upstream), concurrency)
        self._lock = threading.Lock()
        self._calls: list[ModelCall] = []
        self._taps: dict[str, Tap] = {}
        self.tokens = 0
        self.cost = 0.0
        self.requests = 0
        self.upstream_failures = 0
        """Calls the endpoint could not answer (connection errors, 5xx, 429, a refused key)."""
        self.unauthorized = 0
        """Requests refused (401) for want of a live episode token."""
        self._servers: list[socketserver.BaseServer] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._servers.append(self._httpd)
        self.unix_socket = unix_socket
        if unix_socket is not None:
            unix_socket.unlink(missing_ok=True)
            unix = _UnixHTTPServer(str(unix_socket), self._handler())
            unix_socket.chmod(0o666)
            self._servers.append(unix)

    @property
    def url(self) -> str:
        """The proxy's base URL, with the endpoint's path (``http://127.0.0.1:P/v1``)."""
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}{self.upstream.path}"

    def __enter__(self) -> RecordingProxy:
        for server in self._servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        if self.unix_socket is not None:
            self.unix_socket.unlink(missing_ok=True)

    # episodes ----------------------------------------------------------------------------------
    def open_episode(self, budget: Budget | None = None) -> Tap:
        """A new episode's tap, with a fresh token for its agent (the only credential the
        proxy accepts from it).

        Raises:
            ValueError: the proxy does not hold a key (passthrough mode).
        """
        if self.api_key is None:
            raise ValueError("episode tokens need a proxy that holds the key (api_key=...)")
        tap = Tap(f"rcb-{secrets.token_urlsafe(24)}", budget or Budget())
        with self._lock:
            self._taps[tap.token] = tap
        return tap

    def close_episode(self, tap: Tap) -> None:
        """The episode is over: its token is refused from now on."""
        with self._lock:
            tap.live = False
            self._taps.pop(tap.token, None)

    def drain(self) -> list[ModelCall]:
        with self._lock:
            calls, self._calls = self._calls, []
        return calls

    def _record(self, tap: Tap | None, call: ModelCall, failure: str | None) -> None:
        with self._lock:
            self._calls.append(call)
            self.tokens += call.usage.total
            self.cost += call.cost
            self.requests += 1
            self.upstream_failures += failure is not None
            if tap is not None:
                tap.calls.append(call)
                tap.tokens += call.usage.total
                tap.cost += call.cost
                tap.requests += 1
                if failure is not None and tap.infrastructure is None:
                    tap.infrastructure = failure

    def _admit(self, headers: dict[str, str], wire: Wire | None) -> tuple[Tap | None, str | None]:
        """(the request's tap, why it is refused). None/None in passthrough mode. An episode's
        token buys model calls only, never the endpoint's other APIs (its files, batches,
        organisation) with the real key."""
        if self.api_key is None:
            return None, None
        token = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        with self._lock:
            tap = self._taps.get(token)
        if tap is None:
            return None, "unauthorized"
        if wire is None:
            return tap, NOT_A_MODEL_CALL
        with self._lock:
            spent = tap.spent()
            if spent is not None:
                tap.refused += 1
                tap.cut_off = tap.cut_off or spent
        return tap, spent

    def _attempt(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        stored: list[tuple[int, list[tuple[str, str]], bytes]],
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """One try at the endpoint: its connection and response (not read yet).

        Raises:
            RetryableError: no connection, or a retryable status (429, 5xx, ...), whose answer
                is kept in ``stored`` to be passed on if it is the last.
        """
        up = self.upstream
        conn_cls = (
            http.client.HTTPSConnection if up.scheme == "https" else http.client.HTTPConnection
        )
        conn = conn_cls(up.hostname or "", up.port, timeout=600)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            if resp.status in RETRYABLE_STATUS:
                stored[:] = [(resp.status, resp.getheaders(), resp.read())]
                raise classify_status(resp.status, "", resp.getheader("retry-after"))
        except OSError as exc:
            conn.close()
            stored.clear()
            raise RetryableError(f"{type(exc).__name__}: {exc}") from exc
        except ProviderError:
            conn.close()
            raise
        return conn, resp

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = proxy.client_timeout_s  # a client that sends nothing is let go

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def address_string(self) -> str:
                return "unix" if isinstance(self.client_address, str) else super().address_string()

            def do_GET(self) -> None:
                self._forward(b"")

            def do_HEAD(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                # A request's size is checked before a byte of its body is read: the client may
                # be the agent in the sandbox, and the proxy runs on the host.
                given = self.headers.get("content-length") or "0"
                if not given.isdigit():
                    self.close_connection = True
                    self._refuse(400, "rcb-env proxy: bad content-length", self._wire())
                    return
                if int(given) > MAX_BODY:
                    self.close_connection = True
                    self._refuse(413, "rcb-env proxy: request too large", self._wire())
                    return
                body = self.rfile.read(int(given))
                if len(body) < int(given):  # the client went away mid-request
                    self.close_connection = True
                    return
                self._forward(body)

            def _wire(self) -> Wire | None:
                path = self.path.partition("?")[0].rstrip("/")
                if path.endswith("/messages"):
                    return "messages"
                if path.endswith("/responses"):
                    return "responses"
                return "chat" if path.endswith("/completions") else None

            def _refuse(self, status: int, message: str, wire: Wire | None) -> None:
                """Answer without forwarding, in the format's own error shape."""
                if wire == "messages":
                    kind = "authentication_error" if status == 401 else "permission_error"
                    payload: dict[str, Any] = {
                        "type": "error",
                        "error": {"type": kind, "message": message},
                    }
                else:
                    code = "invalid_api_key" if status == 401 else "budget_exceeded"
                    payload = {
                        "error": {"message": message, "type": "invalid_request_error", "code": code}
                    }
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _forward(self, body: bytes) -> None:
                wire = self._wire()
                received = {k.lower(): v for k, v in self.headers.items()}
                tap, refusal = proxy._admit(received, wire)
                if refusal == "unauthorized":
                    with proxy._lock:
                        proxy.unauthorized += 1
                    self._refuse(401, "rcb-env proxy: not a live episode token", wire)
                    return
                if refusal is not None:
                    # claude stops at once on 403 (on 400 it retries without its betas); codex
                    # and the OpenAI SDKs stop on 400
                    status = (
                        404 if refusal == NOT_A_MODEL_CALL else 403 if wire == "messages" else 400
                    )
                    self._refuse(status, f"rcb-env: {refusal}", wire)
                    return
                headers = _outgoing(received, proxy.api_key)
                try:
                    request = json.loads(body) if body else {}
                except ValueError:
                    request = {}
                model = str(request.get("model", "")) if isinstance(request, dict) else ""
                started, t0 = time.time(), time.monotonic()
                stored: list[tuple[int, list[tuple[str, str]], bytes]] = []
                error: str | None = None
                failure: str | None = None
                with proxy._cap:
                    try:
                        (conn, resp), retries = call_with_retries(
                            lambda: proxy._attempt(self.command, self.path, body, headers, stored),
                            proxy.retry,
                        )
                    except ProviderError as exc:  # still failing after the retries
                        retries = proxy.retry.attempts - 1
                        if stored:
                            status, kept, data = stored[0]
                            answer = self._relay(status, kept, [data])
                            error = f"HTTP {status}"
                            failure = f"the model endpoint answered HTTP {status}"
                        else:
                            answer, status, error = b"", 502, str(exc)
                            failure = f"the model endpoint did not answer ({exc})"
                            self.send_error(502, "the model endpoint did not answer")
                    else:
                        try:
                            status = resp.status
                            answer = self._relay(status, resp.getheaders(), _chunks(resp))
                        finally:
                            conn.close()
                        error = None if status < 400 else f"HTTP {status}"
                        if status >= 500 or status in _UPSTREAM_FAILURES:
                            failure = f"the model endpoint answered HTTP {status}"
                if wire is None:
                    if failure is not None and tap is not None:
                        with proxy._lock:
                            tap.infrastructure = tap.infrastructure or failure
                    return  # a model list or health check: not a model call
                usage = _usage(wire, answer) if status < 400 else Usage()
                proxy._record(
                    tap,
                    ModelCall(
                        provider=proxy.provider,
                        model=model,
                        request_chars=len(body),
                        usage=usage,
                        cost=cost(usage, proxy.prices.get(model)),
                        latency_s=round(time.monotonic() - t0, 4),
                        retries=retries,
                        error=error,
                        started_at=started,
                    ),
                    failure,
                )

            def _relay(
                self, status: int, headers: list[tuple[str, str]], chunks: Iterable[bytes]
            ) -> bytes:
                """Send the endpoint's answer on as it arrives; the whole of it."""
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                sent = []
                for chunk in chunks:
                    sent.append(chunk)
                    self.wfile.write(chunk)
                    self.wfile.flush()
                return b"".join(sent)

        return Handler


def _chunks(resp: http.client.HTTPResponse) -> Iterator[bytes]:
    while chunk := resp.read1(65536):
        yield chunk


def _outgoing(received: dict[str, str], api_key: str | None) -> dict[str, str]:
    """The headers forwarded: :data:`_FORWARD`'s; when the proxy holds the key, the episode
    token out and the key in, under the header the client used."""
    headers = {k: v for k, v in received.items() if k in _FORWARD}
    if api_key is None:
        return headers
    bearer = "authorization" in headers and "x-api-key" not in headers
    headers.pop("authorization", None)
    headers.pop("x-api-key", None)
    if api_key:
        if bearer:
            headers["authorization"] = f"Bearer {api_key}"
        else:
            headers["x-api-key"] = api_key
    return headers


def _usage(wire: Wire, answer: bytes) -> Usage:
    """The usage of an answer (JSON, or a stream's events) in the format it was asked in.

    Anthropic's input tokens exclude the cache (read and written) and its stream gives them in
    message_start, the output in message_delta; Responses gives the whole usage in
    response.completed; a chat stream in its last chunk (``stream_options.include_usage``)."""
    text = answer.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
        events = [data] if isinstance(data, dict) else []
    except ValueError:
        events = []
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    event = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(event, dict):
                    events.append(event)
    found: dict[str, Any] = {}
    for event in events:
        kind = event.get("type")
        if kind == "message_start":
            found |= event.get("message", {}).get("usage") or {}
        elif kind == "response.completed":
            found = event.get("response", {}).get("usage") or {}
        elif event.get("usage"):
            found |= {k: v for k, v in event["usage"].items() if v is not None}
    if wire == "messages":
        read = int(found.get("cache_read_input_tokens") or 0)
        written = int(found.get("cache_creation_input_tokens") or 0)
        return Usage(
            input_tokens=int(found.get("input_tokens") or 0) + read + written,
            output_tokens=int(found.get("output_tokens") or 0),
            cached_tokens=read,
        )
    details = found.get("prompt_tokens_details") or found.get("input_tokens_details") or {}
    return Usage(
        input_tokens=int(found.get("prompt_tokens") or found.get("input_tokens") or 0),
        output_tokens=int(found.get("completion_tokens") or found.get("output_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


#: A TCP -> unix socket forwarder for inside a sandbox (stdlib only, run by the task
#: interpreter or the system Python): listens on the sandbox's own loopback, then runs the
#: command that follows it, so the command finds the port open (a CLI that cannot talk to a
#: unix socket, as codex). ``argv``: PORT SOCKET COMMAND...
_FORWARDER = """\
import os, socket, sys, threading
port, path, command = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen(64)
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass
if os.fork() == 0:
    while True:
        client, _ = server.accept()
        upstream = socket.socket(socket.AF_UNIX)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            continue
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
server.close()
os.execvp(command[0], command)
"""


def forwarder_command(python: str, port: int, socket_path: str) -> list[str]:
    """The prefix that runs a command inside a sandbox with ``127.0.0.1:port`` forwarded to the
    proxy's ``socket_path`` (as the sandbox sees it)."""
    return [python, "-I", "-S", "-c", _FORWARDER, str(port), socket_path]
