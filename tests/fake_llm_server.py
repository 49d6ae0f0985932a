"""A local HTTP server that speaks the OpenAI and Anthropic wire protocols, for tests.

Point the real ``openai`` / ``anthropic`` clients at it (``base_url``) and script what it answers:
each endpoint has a queue of ``FakeResponse`` (status, JSON body, SSE events, raw bytes, delay,
headers); every request is recorded (path, headers, JSON body) so tests can assert what the client
sent. Endpoints: ``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``. Where the order of
calls is not fixed (a person at the keyboard decides it: the TUI journey), ``respond(path, fn)``
answers each request from what it asks (``fn(request) -> FakeResponse``) once the queue is empty.

Body builders (``chat_completion``, ``chat_sse``, ``responses_body``, ``responses_sse``,
``messages_body``, ``messages_sse``) produce realistic protocol shapes so other tests (the loop,
the TUI) can reuse them.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"


@dataclass
class FakeResponse:
    """One scripted answer. Exactly one of ``json_body``, ``sse`` or ``raw`` is normally set.

    ``sse`` is a list of ``(event_name_or_None, data)``; data that is not a str is JSON-encoded.
    ``delay_s`` waits before the status line (to trigger client timeouts); ``event_delay_s``
    waits between SSE events (to test cancellation mid-stream).
    """

    status: int = 200
    json_body: Any = None
    sse: list[tuple[str | None, Any]] | None = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    event_delay_s: float = 0.0


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeLLMServer:
    """``with FakeLLMServer() as server: server.enqueue(CHAT, FakeResponse(...))``."""

    def __init__(self) -> None:
        self._queues: dict[str, collections.deque[FakeResponse]] = collections.defaultdict(collections.deque)
        self._responders: dict[str, Callable[[RecordedRequest], FakeResponse]] = {}
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.events_sent = 0
        self.streams_cut = 0  # streams the client closed before their end
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # -- scripting ---------------------------------------------------------------------------
    def enqueue(self, path: str, *responses: FakeResponse) -> None:
        with self._lock:
            self._queues[path].extend(responses)

    def respond(self, path: str, responder: Callable[[RecordedRequest], FakeResponse]) -> None:
        """Answer ``path`` with ``responder(request)`` whenever nothing is queued for it."""
        with self._lock:
            self._responders[path] = responder

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path]

    def _next(self, path: str, request: RecordedRequest | None = None) -> FakeResponse:
        with self._lock:
            queue = self._queues.get(path)
            if queue:
                return queue.popleft()
            responder = self._responders.get(path)
        if responder is not None and request is not None:
            return responder(request)
        return FakeResponse(
            status=500,
            json_body={"error": {"message": f"fake server: nothing scripted for {path}"}},
            headers={"x-should-retry": "false"},
        )

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                self._serve(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                self._serve(body)

            def _serve(self, body: Any) -> None:
                path = self.path.split("?", 1)[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                recorded = RecordedRequest(self.command, path, headers, body)
                with server._lock:
                    server.requests.append(recorded)
                scripted = server._next(path, recorded)
                # The client may give up first (timeout or cancellation): expected in tests.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._answer(scripted)

            def _answer(self, r: FakeResponse) -> None:
                if r.delay_s:
                    time.sleep(r.delay_s)
                self.send_response(r.status)
                for k, v in r.headers.items():
                    self.send_header(k, v)
                if r.sse is not None:
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("cache-control", "no-cache")
                    self.end_headers()
                    try:
                        for event, data in r.sse:
                            chunk = ""
                            if event is not None:
                                chunk += f"event: {event}\n"
                            text = data if isinstance(data, str) else json.dumps(data)
                            chunk += f"data: {text}\n\n"
                            self.wfile.write(chunk.encode())
                            self.wfile.flush()
                            with server._lock:
                                server.events_sent += 1
                            if r.event_delay_s:
                                time.sleep(r.event_delay_s)
                    except (BrokenPipeError, ConnectionResetError):
                        with server._lock:
                            server.streams_cut += 1  # the client closed the stream: an event tests wait on
                    return
                payload = r.raw if r.raw is not None else json.dumps(r.json_body).encode()
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


# ---------------------------------------------------------------------------------------------
# Body builders: realistic shapes of each protocol.
# ---------------------------------------------------------------------------------------------


def error_body(
    message: str, *, code: str | None = None, type_: str = "invalid_request_error"
) -> dict[str, Any]:
    """OpenAI-style error body."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def anthropic_error(message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def chat_completion(
    text: str,
    *,
    model: str = "gpt-4o",
    prompt_tokens: int = 100,
    completion_tokens: int = 50,
    reasoning_tokens: int = 0,
    cached_tokens: int = 0,
    finish_reason: str = "stop",
    reasoning_content: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        },
    }


def chat_sse(
    chunks: list[str],
    *,
    model: str = "gpt-4o",
    prompt_tokens: int = 100,
    completion_tokens: int = 50,
    reasoning_tokens: int = 0,
    cached_tokens: int = 0,
    finish_reason: str = "stop",
    reasoning_chunks: list[str] | None = None,
    include_usage: bool = True,
) -> list[tuple[str | None, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": model}
    events: list[tuple[str | None, Any]] = [
        (
            None,
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            },
        )
    ]
    for r in reasoning_chunks or []:
        events.append(
            (
                None,
                {**base, "choices": [{"index": 0, "delta": {"reasoning_content": r}, "finish_reason": None}]},
            )
        )
    for c in chunks:
        events.append(
            (None, {**base, "choices": [{"index": 0, "delta": {"content": c}, "finish_reason": None}]})
        )
    events.append((None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]}))
    if include_usage:
        events.append(
            (
                None,
                {
                    **base,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                        "prompt_tokens_details": {"cached_tokens": cached_tokens},
                        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
                    },
                },
            )
        )
    events.append((None, "[DONE]"))
    return events


def _responses_usage(
    input_tokens: int, output_tokens: int, reasoning_tokens: int, cached_tokens: int
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def responses_body(
    text: str,
    *,
    model: str = "o3",
    input_tokens: int = 100,
    output_tokens: int = 50,
    reasoning_tokens: int = 0,
    cached_tokens: int = 0,
    summary: str | None = None,
    status: str = "completed",
    incomplete_reason: str | None = None,
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if summary is not None:
        output.append(
            {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": summary}]}
        )
    output.append(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    )
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 1700000000,
        "model": model,
        "status": status,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _responses_usage(input_tokens, output_tokens, reasoning_tokens, cached_tokens),
    }


def responses_sse(
    chunks: list[str],
    *,
    model: str = "o3",
    input_tokens: int = 100,
    output_tokens: int = 50,
    reasoning_tokens: int = 0,
    cached_tokens: int = 0,
    summary_chunks: list[str] | None = None,
) -> list[tuple[str | None, Any]]:
    text = "".join(chunks)
    summary = "".join(summary_chunks) if summary_chunks else None
    in_progress = responses_body("", model=model, status="in_progress")
    in_progress["output"], in_progress["usage"] = [], None
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "sequence_number": 0, "response": in_progress}),
    ]
    seq = 1
    for s in summary_chunks or []:
        events.append(
            (
                "response.reasoning_summary_text.delta",
                {
                    "type": "response.reasoning_summary_text.delta",
                    "item_id": "rs_1",
                    "output_index": 0,
                    "summary_index": 0,
                    "delta": s,
                    "sequence_number": seq,
                },
            )
        )
        seq += 1
    for c in chunks:
        events.append(
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_1",
                    "output_index": 1,
                    "content_index": 0,
                    "delta": c,
                    "logprobs": [],
                    "sequence_number": seq,
                },
            )
        )
        seq += 1
    events.append(
        (
            "response.output_text.done",
            {
                "type": "response.output_text.done",
                "item_id": "msg_1",
                "output_index": 1,
                "content_index": 0,
                "text": text,
                "logprobs": [],
                "sequence_number": seq,
            },
        )
    )
    seq += 1
    events.append(
        (
            "response.completed",
            {
                "type": "response.completed",
                "sequence_number": seq,
                "response": responses_body(
                    text,
                    model=model,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    reasoning_tokens=reasoning_tokens,
                    cached_tokens=cached_tokens,
                    summary=summary,
                ),
            },
        )
    )
    return events


def messages_body(
    text: str,
    *,
    model: str = "claude-sonnet-4-5",
    input_tokens: int = 100,
    output_tokens: int = 50,
    cache_read: int = 0,
    thinking: str | None = None,
    stop_reason: str = "end_turn",
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if thinking is not None:
        content.append({"type": "thinking", "thinking": thinking, "signature": "sig"})
    content.append({"type": "text", "text": text})
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": 0,
        },
    }


def messages_sse(
    chunks: list[str],
    *,
    model: str = "claude-sonnet-4-5",
    input_tokens: int = 100,
    output_tokens: int = 50,
    cache_read: int = 0,
    thinking_chunks: list[str] | None = None,
    stop_reason: str = "end_turn",
) -> list[tuple[str | None, Any]]:
    start = messages_body("", model=model, input_tokens=input_tokens, output_tokens=1, cache_read=cache_read)
    start["content"], start["stop_reason"] = [], None
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
    index = 0
    if thinking_chunks:
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
        )
        for t in thinking_chunks:
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": t},
                    },
                )
            )
        events.append(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": "sig"},
                },
            )
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    events.append(
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        )
    )
    events.append(("ping", {"type": "ping"}))
    for c in chunks:
        events.append(
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": c}},
            )
        )
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events
