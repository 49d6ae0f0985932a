"""The real ``openai`` client against a local server speaking Chat Completions and Responses."""

from __future__ import annotations

import json
import threading

import pytest

from engine.llm import LLMRequest, Message, ProviderSettings, make_provider
from engine.llm import errors as E
from tests.conftest import until

try:
    from tests.fake_llm_server import (
        CHAT,
        RESPONSES,
        FakeLLMServer,
        FakeResponse,
        chat_completion,
        chat_sse,
        error_body,
        responses_body,
        responses_sse,
    )
except ImportError:  # pragma: no cover - tests/ on sys.path instead of the repo root
    from fake_llm_server import (  # type: ignore
        CHAT,
        RESPONSES,
        FakeLLMServer,
        FakeResponse,
        chat_completion,
        chat_sse,
        error_body,
        responses_body,
        responses_sse,
    )

SECRET = "sk-test-secret-0123456789"
REQ = LLMRequest(system="You write CUDA.", messages=[Message("user", "Write ModelNew for relu.")])
FAST = {"retry-after-ms": "5"}  # keep SDK backoff short in tests


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def server():
    with FakeLLMServer() as s:
        yield s


def provider(server: FakeLLMServer, model: str = "openai/gpt-4o", **settings):
    settings.setdefault("base_url", server.openai_base_url)
    settings.setdefault("max_retries", 0)
    settings.setdefault("timeout_s", 5.0)
    return make_provider(model, ProviderSettings(**settings))


def assert_no_secret(*objects: object) -> None:
    for obj in objects:
        assert SECRET not in json.dumps(obj, default=str)


# --- Chat Completions -------------------------------------------------------------------------


def test_chat_plain_sends_messages_limits_and_parses_usage_and_cost(server):
    server.enqueue(
        CHAT,
        FakeResponse(
            json_body=chat_completion(
                "```python\nclass ModelNew: pass\n```",
                model="gpt-4o-2024-08-06",
                prompt_tokens=1200,
                completion_tokens=300,
                cached_tokens=200,
            )
        ),
    )
    p = provider(server, stream=False, temperature=0.2, max_output_tokens=1234)
    reply = p.complete(REQ)

    (req,) = server.requests_to(CHAT)
    assert req.body["model"] == "gpt-4o"
    assert req.body["messages"] == [
        {"role": "system", "content": "You write CUDA."},
        {"role": "user", "content": "Write ModelNew for relu."},
    ]
    assert req.body["max_tokens"] == 1234  # a compatible server gets the classic name
    assert req.body["temperature"] == 0.2
    assert "stream" not in req.body
    assert req.headers["authorization"] == f"Bearer {SECRET}"

    assert reply.text.startswith("```python")
    assert reply.model == "openai/gpt-4o" and reply.provider == "openai"
    assert reply.served_model == "gpt-4o-2024-08-06"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cached_tokens) == (
        1200,
        300,
        200,
    )
    assert reply.cost_usd == pytest.approx((1200 * 2.50 + 300 * 10.00) / 1e6)
    assert reply.latency_s > 0
    assert reply.stop_reason == "stop" and not reply.truncated
    assert_no_secret(reply.to_dict())


def test_chat_stream_calls_back_with_text_deltas_and_reads_final_usage(server):
    server.enqueue(
        CHAT,
        FakeResponse(
            sse=chat_sse(
                ["Hel", "lo ", "world"],
                reasoning_chunks=["let me ", "think"],
                prompt_tokens=10,
                completion_tokens=7,
                reasoning_tokens=4,
            )
        ),
    )
    tokens: list[str] = []
    reply = provider(server).complete(REQ, on_token=tokens.append)

    (req,) = server.requests_to(CHAT)
    assert req.body["stream"] is True
    assert req.body["stream_options"] == {"include_usage": True}
    assert tokens == ["Hel", "lo ", "world"]
    assert reply.text == "Hello world"
    assert reply.thinking == "let me think"  # vLLM/DeepSeek-style reasoning_content, kept apart
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.reasoning_tokens) == (10, 7, 4)


def test_reasoning_model_gets_completion_limit_and_no_temperature(server):
    server.enqueue(CHAT, FakeResponse(sse=chat_sse(["ok"], model="o3")))
    p = provider(server, model="openai/o3", temperature=0.7, max_output_tokens=4000, reasoning_effort="high")
    reply = p.complete(REQ)
    body = server.requests_to(CHAT)[0].body
    assert body["max_completion_tokens"] == 4000
    assert "max_tokens" not in body and "temperature" not in body
    assert body["reasoning_effort"] == "high"
    assert reply.raw_request_summary["max_completion_tokens"] == 4000
    assert reply.cost_usd == pytest.approx((100 * 2.0 + 50 * 8.0) / 1e6)


def test_official_api_uses_max_completion_tokens_for_every_model():
    p = make_provider("openai/gpt-4.1", {"temperature": 0.1})
    params = p.build_params(REQ)
    assert params["max_completion_tokens"] == 16384 and params["temperature"] == 0.1


def test_openai_base_url_env_is_honoured(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    server.enqueue(CHAT, FakeResponse(sse=chat_sse(["via env"])))
    reply = make_provider("openai/gpt-4o", {"max_retries": 0}).complete(REQ)
    assert reply.text == "via env"
    assert reply.raw_request_summary["base_url"] == server.openai_base_url


def test_local_server_without_key_gets_placeholder(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    server.enqueue(CHAT, FakeResponse(sse=chat_sse(["local"], model="Qwen/Qwen3-32B")))
    reply = provider(server, model="openai/Qwen/Qwen3-32B").complete(REQ)
    req = server.requests_to(CHAT)[0]
    assert req.headers["authorization"] == "Bearer EMPTY"
    assert req.body["model"] == "Qwen/Qwen3-32B"
    assert reply.cost_usd is None and reply.cost_text() == "cost unknown"
    assert reply.usage.total_tokens == 150  # tokens are still shown


def test_missing_key_without_base_url_is_a_one_line_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(E.MissingKeyError, match="set OPENAI_API_KEY") as info:
        make_provider("openai/o3")
    assert "\n" not in str(info.value)
    monkeypatch.setenv("MY_KEY", "")
    with pytest.raises(E.MissingKeyError, match="set MY_KEY"):
        make_provider("openai/o3", {"api_key_env": "MY_KEY"})


def test_api_key_env_names_another_variable(server, monkeypatch):
    monkeypatch.setenv("TEAM_OPENAI_KEY", "sk-team")
    server.enqueue(CHAT, FakeResponse(sse=chat_sse(["x"])))
    provider(server, api_key_env="TEAM_OPENAI_KEY").complete(REQ)
    assert server.requests[0].headers["authorization"] == "Bearer sk-team"


# --- Responses API ----------------------------------------------------------------------------


def test_responses_plain(server):
    server.enqueue(
        RESPONSES,
        FakeResponse(
            json_body=responses_body(
                "final answer",
                summary="I compared layouts.",
                input_tokens=900,
                output_tokens=400,
                reasoning_tokens=300,
            )
        ),
    )
    p = provider(
        server, model="openai/o3", api="responses", stream=False, temperature=0.5, max_output_tokens=999
    )
    reply = p.complete(REQ)
    body = server.requests_to(RESPONSES)[0].body
    assert body["model"] == "o3"
    assert body["instructions"] == "You write CUDA."
    assert body["input"] == [{"role": "user", "content": "Write ModelNew for relu."}]
    assert body["max_output_tokens"] == 999 and body["store"] is False
    assert "temperature" not in body
    assert reply.text == "final answer"
    assert reply.thinking == "I compared layouts."
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.reasoning_tokens) == (
        900,
        400,
        300,
    )
    assert reply.raw_request_summary["endpoint"] == "responses"


def test_responses_stream(server):
    server.enqueue(
        RESPONSES,
        FakeResponse(
            sse=responses_sse(["a", "b", "c"], summary_chunks=["why ", "so"], input_tokens=5, output_tokens=3)
        ),
    )
    tokens: list[str] = []
    reply = provider(server, model="openai/gpt-5", api="responses").complete(REQ, on_token=tokens.append)
    assert server.requests_to(RESPONSES)[0].body["stream"] is True
    assert tokens == ["a", "b", "c"]
    assert reply.text == "abc" and reply.thinking == "why so"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (5, 3)
    assert reply.cost_usd == pytest.approx((5 * 1.25 + 3 * 10.0) / 1e6)


def test_responses_incomplete_marks_truncation(server):
    server.enqueue(
        RESPONSES,
        FakeResponse(
            json_body=responses_body(
                "```python\nclass ModelNew", status="incomplete", incomplete_reason="max_output_tokens"
            )
        ),
    )
    reply = provider(server, model="openai/o3", api="responses", stream=False).complete(REQ)
    assert reply.stop_reason == "max_output_tokens" and reply.truncated


# --- errors and retries -----------------------------------------------------------------------


def test_401_fails_at_once_naming_the_variable(server):
    server.enqueue(
        CHAT,
        FakeResponse(status=401, json_body=error_body("Incorrect API key provided", code="invalid_api_key")),
    )
    with pytest.raises(E.AuthError) as info:
        provider(server, max_retries=3).complete(REQ)
    assert len(server.requests) == 1
    message = str(info.value)
    assert "OPENAI_API_KEY" in message and "\n" not in message and SECRET not in message


def test_429_then_success_is_retried_by_the_sdk(server):
    server.enqueue(
        CHAT,
        FakeResponse(status=429, json_body=error_body("Rate limit reached", type_="requests"), headers=FAST),
        FakeResponse(sse=chat_sse(["after retry"])),
    )
    reply = provider(server, max_retries=2).complete(REQ)
    assert reply.text == "after retry"
    assert [r.headers.get("x-stainless-retry-count") for r in server.requests] == ["0", "1"]


def test_429_forever_reports_rate_limit(server):
    server.enqueue(CHAT, *[FakeResponse(status=429, json_body=error_body("slow down"), headers=FAST)] * 3)
    with pytest.raises(E.RateLimitError, match="after 2 retries"):
        provider(server, max_retries=2).complete(REQ)
    assert len(server.requests) == 3


def test_500_is_retried_then_reported(server):
    server.enqueue(
        CHAT,
        *[FakeResponse(status=500, json_body=error_body("boom", type_="server_error"), headers=FAST)] * 2,
    )
    with pytest.raises(E.ServerError, match="server error 500 after 1 retry"):
        provider(server, max_retries=1).complete(REQ)
    assert len(server.requests) == 2


def test_timeout_is_retried_then_reported(server):
    server.enqueue(
        CHAT,
        FakeResponse(delay_s=1.5, sse=chat_sse(["late"])),
        FakeResponse(delay_s=1.5, sse=chat_sse(["late"])),
    )
    with pytest.raises(E.LLMTimeoutError, match="no reply within 0.3 s after 1 retry"):
        provider(server, max_retries=1, timeout_s=0.3).complete(REQ)
    assert len(server.requests) == 2


def test_malformed_body_is_a_clear_error(server):
    server.enqueue(CHAT, FakeResponse(raw=b"<html>502 Bad Gateway</html>"))
    with pytest.raises(E.MalformedReplyError, match="malformed reply"):
        provider(server, stream=False).complete(REQ)


def test_json_of_the_wrong_shape_is_malformed(server):
    server.enqueue(CHAT, FakeResponse(json_body={"object": "list", "data": []}))
    with pytest.raises(E.MalformedReplyError, match="no choices"):
        provider(server, stream=False).complete(REQ)


def test_stream_cut_short_is_malformed(server):
    events = chat_sse(["partial"], include_usage=False)[:2]  # role chunk + one delta, no finish, no [DONE]
    server.enqueue(CHAT, FakeResponse(sse=events))
    with pytest.raises(E.MalformedReplyError, match="stream ended"):
        provider(server).complete(REQ)


def test_context_exhausted_is_named(server):
    server.enqueue(
        CHAT,
        FakeResponse(
            status=400,
            json_body=error_body(
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.",
                code="context_length_exceeded",
            ),
        ),
    )
    with pytest.raises(E.ContextExhaustedError, match="context window"):
        provider(server).complete(REQ)


def test_unknown_model_on_the_server(server):
    server.enqueue(
        CHAT,
        FakeResponse(
            status=404,
            json_body=error_body(
                "The model `gpt-9` does not exist or you do not have access to it.", code="model_not_found"
            ),
        ),
    )
    with pytest.raises(E.UnknownModelError, match="does not know this model"):
        provider(server, model="openai/gpt-9").complete(REQ)


# --- cancellation -----------------------------------------------------------------------------


def test_cancel_mid_stream_closes_the_stream(server):
    n = 60
    server.enqueue(CHAT, FakeResponse(sse=chat_sse([f"t{i} " for i in range(n)]), event_delay_s=0.03))
    cancel = threading.Event()
    seen: list[str] = []

    def on_token(t: str) -> None:
        seen.append(t)
        if len(seen) == 3:
            cancel.set()

    with pytest.raises(E.LLMCancelled):
        provider(server).complete(REQ, on_token=on_token, cancel=cancel)
    assert len(seen) == 3
    assert until(lambda: server.streams_cut == 1)  # the server saw the connection close ...
    assert server.events_sent < n // 2  # the server noticed the closed connection and stopped


def test_cancel_before_the_call_sends_nothing(server):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(E.LLMCancelled):
        provider(server).complete(REQ, cancel=cancel)
    assert server.requests == []


def test_error_event_mid_stream_is_reported(server):
    events = chat_sse(["par"])[:2] + [
        (None, {"error": {"message": "worker crashed", "type": "server_error"}})
    ]
    server.enqueue(CHAT, FakeResponse(sse=events))
    with pytest.raises(E.ServerError, match="worker crashed"):
        provider(server).complete(REQ)


def test_failed_response_is_reported(server):
    body = responses_body("", status="failed")
    body["error"] = {"code": "server_error", "message": "The model failed to generate"}
    server.enqueue(RESPONSES, FakeResponse(json_body=body))
    with pytest.raises(E.ServerError, match="failed to generate"):
        provider(server, model="openai/o3", api="responses", stream=False).complete(REQ)
