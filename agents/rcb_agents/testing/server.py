"""A scripted model server on 127.0.0.1 (and, if asked, a unix socket) that speaks the OpenAI
chat-completions and Responses and the Anthropic Messages wire formats, streamed (server-sent
events, as the agent CLIs ask) or not, so the real SDK clients and the real agent CLIs can be
tested end to end without a network.

Each request consumes the next item of the script: a :class:`Reply` (text, tool calls, usage) or
a :class:`Fault` (an HTTP error with optional ``Retry-After``, or a delay before the next item).
A reply is format-neutral: the same ``Reply(tool_calls=...)`` is a chat tool call, a Responses
``function_call`` item or an Anthropic ``tool_use`` block, whichever the request's path asks for.
Every request is recorded (path and JSON body, and its headers) and counted.
"""

from __future__ import annotations

import json
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class Reply(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = ""
    tool_calls: tuple[tuple[str, str | dict[str, Any]], ...] = ()
    """(name, arguments); a string is sent as is, so it may be malformed JSON on purpose."""
    input_tokens: int = 100
    output_tokens: int = 20
    cached_tokens: int = 0
    logprobs: tuple[float, ...] = ()
    """OpenAI format only: per-token log-probabilities to return (as vLLM can)."""
    token_ids: tuple[int, ...] = ()
    """OpenAI format only: the completion's token ids, returned when the request asks for them
    (``return_token_ids``, as vLLM does); with a tokenizer set on the server and none given
    here, made up from the reply."""


class Fault(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    status: int = 0
    """HTTP status to answer with (0: none, only the delay)."""
    retry_after: float | None = None
    delay_s: float = 0.0
    """Sleep before answering (with the status, or with the next item if status is 0)."""
    message: str = "scripted fault"


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout under test) is expected; anything else is printed.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class _QuietUnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class ScriptedModelServer:
    """``tokens``: how the server turns a conversation into prompt token ids when a request asks
    for token ids (vLLM's ``return_token_ids``): ``append`` (a template under which every turn
    extends the previous prompt plus completion, token for token), ``rewrite`` (earlier
    assistant turns re-rendered differently, as templates that drop past reasoning do), or
    ``None`` (no token ids, as a server that does not support them).

    ``unix_socket``: also listen on this socket file (as the model proxy does for a sandbox).
    ``api_key``: answer 401 to a request that does not carry it (``x-api-key`` or ``Bearer``),
    as a real endpoint does; None accepts any. ``responder``: see :attr:`responder`."""

    def __init__(
        self,
        script: Iterable[Reply | Fault] = (),
        *,
        tokens: Literal["append", "rewrite"] | None = None,
        unix_socket: Path | None = None,
        api_key: str | None = None,
        responder: Callable[[str, dict[str, Any]], Reply | Fault | None] | None = None,
    ) -> None:
        self.script: list[Reply | Fault] = list(script)
        self.responder = responder
        """Answers a request (its path and JSON body) instead of the script, which serves
        where it returns None: a server for many conversations at once (an evaluation of a
        whole set, each episode's own answer found in its request)."""
        self.tokens = tokens
        self._sampled: dict[str, list[int]] = {}
        """assistant message (as rendered) -> the ids sampled for it"""
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        """Each request's headers (names in lower case), in the order of :attr:`requests`."""
        self.api_key = api_key
        self.refused = 0
        """Requests answered 401 (without the key)."""
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self.unix_socket = unix_socket
        self._unix: _QuietUnixServer | None = None
        if unix_socket is not None:
            unix_socket.unlink(missing_ok=True)
            self._unix = _QuietUnixServer(str(unix_socket), self._handler())

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def __enter__(self) -> ScriptedModelServer:
        self._thread.start()
        if self._unix is not None:
            threading.Thread(target=self._unix.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._unix is not None:
            self._unix.shutdown()
            self._unix.server_close()
            if self.unix_socket is not None:
                self.unix_socket.unlink(missing_ok=True)

    def extend(self, items: Iterable[Reply | Fault]) -> None:
        with self._lock:
            self.script.extend(items)

    def _next(self) -> Reply | Fault | None:
        with self._lock:
            return self.script.pop(0) if self.script else None

    @staticmethod
    def _key(message: dict[str, Any]) -> str:
        calls = [
            (c.get("function") or {}).get("name", "")
            + (c.get("function") or {}).get("arguments", "")
            for c in message.get("tool_calls") or []
        ]
        return json.dumps([message.get("content") or "", calls])

    @staticmethod
    def _encode(text: str) -> list[int]:
        return [5000 + (ord(c) % 997) for c in text[:40]]

    def _add_tokens(self, reply: Reply, body: dict[str, Any], payload: dict[str, Any]) -> None:
        """vLLM-style token ids: ``prompt_token_ids`` on the response, ``token_ids`` and
        logprobs on the choice."""
        messages = body.get("messages") or []
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        prompt: list[int] = []
        for i, m in enumerate(messages):
            prompt.append({"system": 1, "user": 2, "assistant": 3, "tool": 4}.get(m["role"], 9))
            if m.get("role") == "assistant":
                sampled = self._sampled.get(self._key(m))
                ids = sampled if sampled is not None else self._encode(self._key(m))
                if self.tokens == "rewrite" and i < last:
                    ids = ids[:1]  # an earlier turn re-rendered (its reasoning dropped)
                prompt += ids
            else:
                prompt += self._encode(str(m.get("content") or ""))
        prompt.append(3)  # the generation prompt
        choice = payload["choices"][0]
        ids = list(reply.token_ids) or self._encode(self._key(choice["message"])) or [7]
        self._sampled[self._key(choice["message"])] = ids
        lps = list(reply.logprobs) or [-0.5] * len(ids)
        choice["token_ids"] = ids
        choice["logprobs"] = {
            "content": [
                {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(ids, lps, strict=False)
            ]
        }
        payload["prompt_token_ids"] = prompt

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def address_string(self) -> str:
                return "unix" if isinstance(self.client_address, str) else super().address_string()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.requests.append((self.path, body))
                    server.headers.append(headers)
                if server.api_key is not None and server.api_key not in (
                    headers.get("x-api-key"),
                    headers.get("authorization", "").removeprefix("Bearer "),
                ):
                    with server._lock:
                        server.refused += 1
                    self._error(Fault(status=401, message="invalid x-api-key"), self._format())
                    return
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                self._answer(body)

            def _format(self) -> Literal["chat", "responses", "messages"]:
                path = self.path.partition("?")[0].rstrip("/")
                if path.endswith("/messages"):
                    return "messages"
                return "responses" if path.endswith("/responses") else "chat"

            def _answered(self) -> None:
                # A request stops counting once its answer is decided, before it is written: the
                # client may send its next request as soon as it has read this one's response.
                with server._lock:
                    server.in_flight -= 1

            def _answer(self, body: dict[str, Any]) -> None:
                wire = self._format()
                found = server.responder(self.path, body) if server.responder else None
                item = found if found is not None else server._next()
                while isinstance(item, Fault) and item.status == 0:
                    time.sleep(item.delay_s)
                    item = server._next()
                if isinstance(item, Fault):
                    time.sleep(item.delay_s)
                    self._answered()
                    self._error(item, wire)
                    return
                reply = item or Reply(text="(script exhausted)")
                if wire == "messages":
                    payload = _anthropic(reply, body)
                elif wire == "responses":
                    payload = _response(reply, body)
                else:
                    payload = _openai(reply, body)
                    if server.tokens and body.get("return_token_ids"):
                        server._add_tokens(reply, body, payload)
                self._answered()
                if not body.get("stream"):
                    self._send(200, payload)
                    return
                if wire == "messages":
                    self._events((e["type"], e) for e in _anthropic_events(payload))
                elif wire == "responses":
                    self._events((e["type"], e) for e in _response_events(payload))
                else:
                    chunks = [(None, c) for c in _openai_chunks(payload, body)]
                    self._events([*chunks, (None, "[DONE]")])

            def _events(self, events: Iterable[tuple[str | None, dict[str, Any] | str]]) -> None:
                """Server-sent events (``stream: true``): an ``event:`` line where the format
                names its events (Anthropic, Responses), then the data; the connection closed
                after the last one."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for name, data in events:
                    text = data if isinstance(data, str) else json.dumps(data)
                    head = f"event: {name}\n" if name else ""
                    self.wfile.write(f"{head}data: {text}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

            def _error(self, fault: Fault, wire: str) -> None:
                kind = {
                    401: "authentication_error",
                    429: "rate_limit_error",
                    529: "overloaded_error",
                }.get(fault.status, "api_error")
                payload = (
                    {"type": "error", "error": {"type": kind, "message": fault.message}}
                    if wire == "messages"
                    else {"error": {"message": fault.message, "type": kind, "code": None}}
                )
                headers = (
                    {} if fault.retry_after is None else {"retry-after": f"{fault.retry_after:g}"}
                )
                self._send(fault.status, payload, headers)

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _args(arguments: str | dict[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _openai(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:8]}",
            "type": "function",
            "function": {"name": n, "arguments": _args(a)},
        }
        for n, a in reply.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if calls:
        message["tool_calls"] = calls
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": "tool_calls" if calls else "stop",
    }
    if reply.logprobs:
        choice["logprobs"] = {
            "content": [
                {"token": f"t{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
                for i, lp in enumerate(reply.logprobs)
            ]
        }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "scripted"),
        "choices": [choice],
        "usage": {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        },
    }


def _openai_chunks(payload: dict[str, Any], request: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat completion as the chunks of its stream: the role, the text, each tool call
    (name and arguments), the finish reason, and the usage when the request asks for it
    (``stream_options.include_usage``)."""
    choice = payload["choices"][0]
    message = choice["message"]
    base = {k: payload[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": fn["arguments"]},
                        }
                    ]
                }
            )
        )
    chunks.append(chunk({}, choice["finish_reason"]))
    if (request.get("stream_options") or {}).get("include_usage"):
        chunks.append(base | {"choices": [], "usage": payload["usage"]})
    return chunks


def _anthropic(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for name, arguments in reply.tool_calls:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:8]}",
                "name": name,
                "input": parsed,
            }
        )
    return {
        "id": f"msg_{uuid.uuid4().hex[:8]}",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "scripted"),
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": reply.input_tokens - reply.cached_tokens,
            "output_tokens": reply.output_tokens,
            "cache_read_input_tokens": reply.cached_tokens,
            "cache_creation_input_tokens": 0,
        },
    }


def _anthropic_events(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """An Anthropic message as its stream: message_start (input usage), one
    content_block_start/delta/stop per block (text in a ``text_delta``, a tool's input as
    ``input_json_delta`` pieces), message_delta (stop reason, output tokens), message_stop."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield {"type": "message_start", "message": start}
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield {
                "type": "content_block_start",
                "index": i,
                "content_block": {"type": "text", "text": ""},
            }
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
            yield {"type": "content_block_delta", "index": i, "delta": delta}
        else:
            yield {
                "type": "content_block_start",
                "index": i,
                "content_block": {**block, "input": {}},
            }
            text = json.dumps(block["input"])
            half = len(text) // 2
            for piece in (text[:half], text[half:]):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield {"type": "content_block_delta", "index": i, "delta": delta}
        yield {"type": "content_block_stop", "index": i}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    yield {"type": "message_stop"}


def _response(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI Responses object: a ``message`` item for the text, a ``function_call`` item per
    tool call."""
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:8]}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for name, arguments in reply.tool_calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:8]}",
                "call_id": f"call_{uuid.uuid4().hex[:8]}",
                "name": name,
                "arguments": _args(arguments),
                "status": "completed",
            }
        )
    return {
        "id": f"resp_{uuid.uuid4().hex[:8]}",
        "object": "response",
        "created_at": int(time.time()),
        "model": request.get("model", "scripted"),
        "status": "completed",
        "output": output,
        "usage": {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


def _response_events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A Responses object as its stream: response.created, per output item its added event,
    its text or argument deltas and done events, then response.completed with the usage."""
    started = {k: v for k, v in response.items() if k != "usage"}
    started |= {"status": "in_progress", "output": []}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
    for i, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": i}
        if item["type"] == "function_call":
            added = {**item, "arguments": "", "status": "in_progress"}
            events += [
                {"type": "response.output_item.added", "output_index": i, "item": added},
                {"type": "response.function_call_arguments.delta", **where,
                 "delta": item["arguments"]},
                {"type": "response.function_call_arguments.done", **where,
                 "arguments": item["arguments"]},
            ]  # fmt: skip
        else:
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            added = {**item, "content": [], "status": "in_progress"}
            at = {**where, "content_index": 0}
            events += [
                {"type": "response.output_item.added", "output_index": i, "item": added},
                {"type": "response.content_part.added", **at, "part": part},
                {"type": "response.output_text.delta", **at, "delta": text},
                {"type": "response.output_text.done", **at, "text": text},
            ]
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    events.append({"type": "response.completed", "response": response})
    for n, event in enumerate(events):
        yield {**event, "sequence_number": n}
