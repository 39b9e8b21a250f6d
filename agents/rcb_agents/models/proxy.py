"""A recording proxy in front of an OpenAI-compatible endpoint, on 127.0.0.1.

Agent frameworks call the model through clients of their own, which rcb-env cannot reach; pointed
at this proxy instead of the endpoint, every call they make is forwarded unchanged and recorded
the way rcb-env's own model layer records its calls (:class:`~rcb_agents.models.types.ModelCall`:
usage, cost from the price table, latency, errors), and it takes the endpoint's concurrency cap
(shared with rcb-env's own clients, and across a Ray cluster), so token and cost accounting and
the caps are the same whatever the framework. Streamed answers (server-sent events) are
forwarded as they arrive and their usage read from the final chunk when the server sends one.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rcb_agents.models.client import _cap
from rcb_agents.models.pricing import Price, cost
from rcb_agents.models.types import ModelCall, Usage

#: Request headers passed on to the endpoint (the rest are hop-by-hop or the proxy's own).
_FORWARD = ("authorization", "content-type", "accept", "openai-organization", "user-agent",
            "x-api-key", "anthropic-version")  # fmt: skip


def _usage(data: dict[str, Any]) -> Usage:
    u = data.get("usage") or {}
    details = u.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=int(u.get("prompt_tokens") or u.get("input_tokens") or 0),
        output_tokens=int(u.get("completion_tokens") or u.get("output_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


class RecordingProxy:
    """Forwards ``<url>/...`` to ``<upstream>/...``; :meth:`drain` returns the calls recorded
    since the last drain, :attr:`tokens` and :attr:`cost` the totals."""

    def __init__(
        self,
        upstream: str,
        *,
        prices: dict[str, Price] | None = None,
        concurrency: int = 4,
        provider: str = "openai",
    ) -> None:
        parts = urllib.parse.urlsplit(upstream.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) endpoint: {upstream!r}")
        self.upstream = parts
        self.prices = prices or {}
        self.provider = provider
        self._cap = _cap((provider, upstream), concurrency)
        self._lock = threading.Lock()
        self._calls: list[ModelCall] = []
        self.tokens = 0
        self.cost = 0.0
        self.requests = 0
        self.upstream_failures = 0
        """Calls the endpoint could not answer (connection errors, 5xx)."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The proxy's base URL, with the endpoint's path (``http://127.0.0.1:P/v1``)."""
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}{self.upstream.path}"

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def drain(self) -> list[ModelCall]:
        with self._lock:
            calls, self._calls = self._calls, []
        return calls

    def _record(self, call: ModelCall, failed: bool) -> None:
        with self._lock:
            self._calls.append(call)
            self.tokens += call.usage.total
            self.cost += call.cost
            self.requests += 1
            self.upstream_failures += failed

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self._forward(self.rfile.read(length))

            def _forward(self, body: bytes) -> None:
                up = proxy.upstream
                conn_cls = (
                    http.client.HTTPSConnection
                    if up.scheme == "https"
                    else http.client.HTTPConnection
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() in _FORWARD}
                try:
                    request = json.loads(body) if body else {}
                except ValueError:
                    request = {}
                model = str(request.get("model", ""))
                started, t0 = time.time(), time.monotonic()
                with proxy._cap:
                    conn = conn_cls(up.hostname or "", up.port, timeout=600)
                    try:
                        conn.request(self.command, self.path, body=body or None, headers=headers)
                        resp = conn.getresponse()
                        answer = self._relay(resp)
                        status = resp.status
                        error = None if status < 400 else f"HTTP {status}"
                    except OSError as exc:
                        answer, status, error = b"", 502, f"{type(exc).__name__}: {exc}"
                        self.send_error(502, "the model endpoint did not answer")
                    finally:
                        conn.close()
                if not self.path.rstrip("/").endswith(("/completions", "/messages", "/responses")):
                    return  # a model list or health check: not a model call
                usage = Usage()
                if status < 400:
                    usage = _usage(_final_json(answer))
                proxy._record(
                    ModelCall(
                        provider=proxy.provider,
                        model=model,
                        request_chars=len(body),
                        usage=usage,
                        cost=cost(usage, proxy.prices.get(model)),
                        latency_s=round(time.monotonic() - t0, 4),
                        error=error,
                        started_at=started,
                    ),
                    failed=status >= 500,
                )

            def _relay(self, resp: http.client.HTTPResponse) -> bytes:
                """Send the endpoint's answer on as it arrives; the whole of it."""
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                chunks = []
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    self.wfile.write(chunk)
                    self.wfile.flush()
                return b"".join(chunks)

        return Handler


def _final_json(answer: bytes) -> dict[str, Any]:
    """The response as JSON; for a stream, its last chunk that carries usage."""
    text = answer.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
        return data if isinstance(data, dict) else {}
    except ValueError:
        pass
    found: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                chunk = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(chunk, dict) and chunk.get("usage"):
                found = chunk
    return found
