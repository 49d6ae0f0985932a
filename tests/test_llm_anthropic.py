"""The real ``anthropic`` client against a local server speaking the Messages API."""

from __future__ import annotations

import json
import threading

import pytest

from engine.llm import LLMRequest, Message, ProviderSettings, make_provider
from engine.llm import errors as E
from tests.conftest import until

try:
    from tests.fake_llm_server import (
        MESSAGES,
        FakeLLMServer,
        FakeResponse,
        anthropic_error,
        messages_body,
        messages_sse,
    )
except ImportError:  # pragma: no cover - tests/ on sys.path instead of the repo root
    from fake_llm_server import (  # type: ignore
        MESSAGES,
        FakeLLMServer,
        FakeResponse,
        anthropic_error,
        messages_body,
        messages_sse,
    )

SECRET = "sk-ant-test-secret-987"
MODEL = "anthropic/claude-sonnet-4-6"
REQ = LLMRequest(system="You review CUDA kernels.", messages=[Message("user", "Find one issue.")])
FAST = {"retry-after-ms": "5"}


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server():
    with FakeLLMServer() as s:
        yield s


def provider(server: FakeLLMServer, model: str = MODEL, **settings):
    settings.setdefault("base_url", server.anthropic_base_url)
    settings.setdefault("max_retries", 0)
    settings.setdefault("timeout_s", 5.0)
    return make_provider(model, ProviderSettings(**settings))


def sent_key(headers: dict[str, str]) -> str:
    """The SDK sends the key as x-api-key or as a bearer token depending on its version."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def test_plain_message_request_and_reply(server):
    server.enqueue(
        MESSAGES,
        FakeResponse(
            json_body=messages_body(
                '{"critical_issue": "x"}',
                model="claude-sonnet-4-6-20260217",
                input_tokens=2000,
                output_tokens=150,
                cache_read=500,
            )
        ),
    )
    reply = provider(server, stream=False, temperature=0.3, max_output_tokens=2048).complete(REQ)

    (req,) = server.requests_to(MESSAGES)
    assert req.body == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 2048,
        "system": "You review CUDA kernels.",
        "messages": [{"role": "user", "content": "Find one issue."}],
        "temperature": 0.3,
    }
    assert sent_key(req.headers) == SECRET
    assert reply.text == '{"critical_issue": "x"}'
    assert reply.served_model == "claude-sonnet-4-6-20260217"
    # cache reads are part of the prompt: input = 2000 fresh + 500 cached
    assert (reply.usage.input_tokens, reply.usage.cached_tokens, reply.usage.output_tokens) == (
        2500,
        500,
        150,
    )
    assert reply.cost_usd == pytest.approx((2500 * 3.0 + 150 * 15.0) / 1e6)
    assert reply.stop_reason == "end_turn"
    assert SECRET not in json.dumps(reply.to_dict())


def test_stream_with_extended_thinking(server):
    server.enqueue(
        MESSAGES,
        FakeResponse(
            sse=messages_sse(
                ["The ", "bug"], thinking_chunks=["hmm, ", "index"], input_tokens=40, output_tokens=12
            )
        ),
    )
    tokens: list[str] = []
    p = provider(server, thinking_budget=2048, max_output_tokens=8192, temperature=0.9)
    reply = p.complete(REQ, on_token=tokens.append)

    body = server.requests_to(MESSAGES)[0].body
    assert body["stream"] is True
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 8192
    assert "temperature" not in body  # thinking requires the default temperature
    assert tokens == ["The ", "bug"]  # thinking never goes to the token callback
    assert reply.text == "The bug" and reply.thinking == "hmm, index"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (40, 12)


def test_adaptive_thinking_setting(server):
    p = provider(server, thinking_budget="adaptive")
    assert p.build_params(REQ)["thinking"] == {"type": "adaptive"}


def test_thinking_budget_must_leave_room_for_the_answer(server):
    with pytest.raises(E.ConfigError, match="below max_output_tokens"):
        provider(server, thinking_budget=4096, max_output_tokens=4096)


def test_max_tokens_stop_is_marked_truncated(server):
    server.enqueue(
        MESSAGES, FakeResponse(sse=messages_sse(["```python\nclass Mo"], stop_reason="max_tokens"))
    )
    reply = provider(server).complete(REQ)
    assert reply.truncated


def test_unpriced_model_has_unknown_cost(server):
    server.enqueue(MESSAGES, FakeResponse(sse=messages_sse(["hi"])))
    reply = provider(server, model="anthropic/claude-experimental-x").complete(REQ)
    assert reply.cost_usd is None and reply.usage.output_tokens == 50


def test_missing_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(E.MissingKeyError, match="set ANTHROPIC_API_KEY"):
        make_provider(MODEL)


def test_401_fails_at_once(server):
    server.enqueue(
        MESSAGES,
        FakeResponse(status=401, json_body=anthropic_error("invalid x-api-key", "authentication_error")),
    )
    with pytest.raises(E.AuthError, match="set ANTHROPIC_API_KEY to a valid key"):
        provider(server, max_retries=3).complete(REQ)
    assert len(server.requests) == 1


def test_429_then_success(server):
    server.enqueue(
        MESSAGES,
        FakeResponse(status=429, json_body=anthropic_error("rate", "rate_limit_error"), headers=FAST),
        FakeResponse(sse=messages_sse(["ok"])),
    )
    assert provider(server, max_retries=2).complete(REQ).text == "ok"
    assert len(server.requests) == 2


def test_overloaded_5xx_is_retried_then_reported(server):
    server.enqueue(
        MESSAGES,
        *[FakeResponse(status=529, json_body=anthropic_error("Overloaded", "overloaded_error"), headers=FAST)]
        * 3,
    )
    with pytest.raises(E.ServerError, match="529 after 2 retries"):
        provider(server, max_retries=2).complete(REQ)
    assert len(server.requests) == 3


def test_timeout(server):
    server.enqueue(MESSAGES, FakeResponse(delay_s=1.5, sse=messages_sse(["late"])))
    with pytest.raises(E.LLMTimeoutError):  # the reply comes after 1.5 s: only the 0.3 s timeout ends the call
        provider(server, timeout_s=0.3).complete(REQ)


def test_malformed_body(server):
    server.enqueue(MESSAGES, FakeResponse(raw=b"not json at all"))
    with pytest.raises(E.MalformedReplyError):
        provider(server, stream=False).complete(REQ)


def test_stream_without_stop_is_malformed(server):
    events = [e for e in messages_sse(["cut"]) if e[0] not in ("message_delta", "message_stop")]
    server.enqueue(MESSAGES, FakeResponse(sse=events))
    with pytest.raises(E.MalformedReplyError, match="stream ended"):
        provider(server).complete(REQ)


def test_prompt_too_long_is_context_exhausted(server):
    server.enqueue(
        MESSAGES,
        FakeResponse(
            status=400, json_body=anthropic_error("prompt is too long: 215000 tokens > 200000 maximum")
        ),
    )
    with pytest.raises(E.ContextExhaustedError):
        provider(server).complete(REQ)


def test_unknown_model(server):
    server.enqueue(
        MESSAGES, FakeResponse(status=404, json_body=anthropic_error("model: claude-nope", "not_found_error"))
    )
    with pytest.raises(E.UnknownModelError):
        provider(server, model="anthropic/claude-nope").complete(REQ)


def test_cancel_mid_stream(server):
    n = 60
    server.enqueue(MESSAGES, FakeResponse(sse=messages_sse([f"w{i} " for i in range(n)]), event_delay_s=0.03))
    cancel = threading.Event()
    seen: list[str] = []

    def on_token(t: str) -> None:
        seen.append(t)
        if len(seen) == 2:
            cancel.set()

    with pytest.raises(E.LLMCancelled):
        provider(server).complete(REQ, on_token=on_token, cancel=cancel)
    assert len(seen) == 2
    assert until(lambda: server.streams_cut == 1)  # the server saw the connection close ...
    assert server.events_sent < n // 2
