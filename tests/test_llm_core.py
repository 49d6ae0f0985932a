"""Model names, settings, the price table and the scripted provider."""

from __future__ import annotations

import threading

import pytest

from engine.llm import (
    LLMRequest,
    Message,
    PriceTable,
    ProviderSettings,
    Usage,
    make_provider,
    parse_model_name,
)
from engine.llm import errors as E
from engine.llm.openai_provider import is_reasoning_model
from engine.llm.scripted import ScriptedProvider

REQ = LLMRequest(system="s", messages=[Message("user", "u")])


# --- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("openai/o3", ("openai", "o3")),
        ("anthropic/claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        ("openai/Qwen/Qwen3-32B", ("openai", "Qwen/Qwen3-32B")),
        ("scripted//tmp/replies", ("scripted", "/tmp/replies")),
    ],
)
def test_parse_model_name(name, expected):
    assert parse_model_name(name) == expected


@pytest.mark.parametrize("name", ["o3", "gemini/pro", "openai/", "/o3"])
def test_unknown_model_names_give_one_clear_line(name):
    with pytest.raises(E.UnknownModelError, match="provider/model") as info:
        make_provider(name)
    assert "\n" not in str(info.value)


def test_reasoning_families():
    assert all(is_reasoning_model(m) for m in ["o1", "o3", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini"])
    assert not any(is_reasoning_model(m) for m in ["gpt-4o", "gpt-4.1", "Qwen/Qwen3-32B", "llama3"])


# --- settings -----------------------------------------------------------------------------------


def test_settings_reject_unknown_keys_and_bad_values():
    with pytest.raises(E.ConfigError, match="temprature"):
        ProviderSettings.from_mapping({"temprature": 0.1})
    with pytest.raises(E.ConfigError, match="api must be"):
        ProviderSettings.from_mapping({"api": "completions"})
    with pytest.raises(E.ConfigError, match="thinking_budget"):
        ProviderSettings.from_mapping({"thinking_budget": 100})
    s = ProviderSettings.from_mapping({"api": "responses", "max_retries": 5})
    assert (s.api, s.max_retries, s.stream) == ("responses", 5, True)


def test_settings_dict_names_the_key_variable_not_the_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    p = make_provider("openai/o3", {"api_key_env": "OPENAI_API_KEY"})
    assert "sk-should-not-leak" not in repr(p.settings.to_dict())
    assert "sk-should-not-leak" not in repr(p.summarize(p.build_params(REQ)))


# --- prices -------------------------------------------------------------------------------------


def test_bundled_prices_cover_common_models():
    table = PriceTable.load()
    for name in [
        "openai/o3",
        "openai/o4-mini",
        "openai/gpt-5",
        "openai/gpt-5-mini",
        "openai/gpt-4.1",
        "openai/gpt-4o",
        "anthropic/claude-opus-4-1",
        "anthropic/claude-sonnet-4-5",
        "anthropic/claude-haiku-4-5",
    ]:
        assert name in table, name
    assert table.cost("openai/o3", Usage(input_tokens=1_000_000, output_tokens=500_000)) == pytest.approx(6.0)


def test_dated_snapshots_use_their_alias_price():
    table = PriceTable.load()
    assert table.lookup("anthropic/claude-sonnet-4-5-20250929") == table.lookup("anthropic/claude-sonnet-4-5")
    assert table.lookup("anthropic/claude-opus-4-20250514") == table.lookup("anthropic/claude-opus-4-0")
    assert table.lookup("openai/gpt-4.1-2025-04-14") == table.lookup("openai/gpt-4.1")


def test_unknown_model_has_no_cost():
    assert PriceTable.load().cost("openai/my-finetune", Usage(10, 10)) is None


def test_config_overrides_and_adds_prices_with_cached_rate():
    table = PriceTable.load(
        {
            "openai/o3": {"input": 1.0, "output": 4.0, "cached_input": 0.25},
            "openai/Qwen/Qwen3-32B": {"input": 0.1, "output": 0.2},
        }
    )
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cached_tokens=400_000)
    assert table.cost("openai/o3", usage) == pytest.approx(0.6 * 1.0 + 0.4 * 0.25 + 4.0)
    assert table.cost("openai/Qwen/Qwen3-32B", Usage(1_000_000, 0)) == pytest.approx(0.1)
    # without a cached rate, cached tokens are charged as input (an upper bound, never a discount we made up)
    assert PriceTable.load().cost("openai/gpt-4o", usage) == pytest.approx(2.5 + 10.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"input": 1.0},
        {"input": "x", "output": 1},
        {"input": 1, "output": 2, "oops": 3},
        {"input": -1, "output": 1},
        5,
    ],
)
def test_bad_price_overrides_are_refused(bad):
    with pytest.raises(E.ConfigError):
        PriceTable.load({"openai/o3": bad})


def test_price_override_reaches_the_provider(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    p = make_provider("openai/o3", None, {"openai/o3": {"input": 100.0, "output": 0.0}})
    assert p.prices.cost("openai/o3", Usage(1_000_000, 0)) == pytest.approx(100.0)


# --- scripted -----------------------------------------------------------------------------------


def test_scripted_replies_in_name_order_then_last_repeats(tmp_path):
    (tmp_path / "02_second.md").write_text("second\n")
    (tmp_path / "01_first.md").write_text("<think>plan it</think>\nfirst line\nmore\n")
    (tmp_path / ".hidden").write_text("never")
    (tmp_path / "sub").mkdir()
    p = make_provider(f"scripted/{tmp_path}")
    tokens: list[str] = []
    first = p.complete(REQ, on_token=tokens.append)
    assert first.text == "first line\nmore\n" and first.thinking == "plan it"
    assert tokens == ["first line\n", "more\n"]
    assert first.cost_usd == 0.0 and first.usage.total_tokens == 0
    assert [p.complete(REQ).text for _ in range(3)] == ["second\n"] * 3
    assert first.model == f"scripted/{tmp_path}" and first.provider == "scripted"


def test_scripted_errors_and_cancel(tmp_path):
    with pytest.raises(E.ConfigError, match="no such directory"):
        make_provider(f"scripted/{tmp_path / 'missing'}")
    with pytest.raises(E.ConfigError, match="no reply files"):
        make_provider(f"scripted/{tmp_path}")
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    cancel = threading.Event()
    seen: list[str] = []

    def on_token(t: str) -> None:
        seen.append(t)
        cancel.set()

    with pytest.raises(E.LLMCancelled):
        ScriptedProvider(str(tmp_path)).complete(REQ, on_token=on_token, cancel=cancel)
    assert seen == ["one\n"]


# --- the shared completion skeleton -------------------------------------------------------------


def test_both_sdk_providers_use_the_one_completion_skeleton():
    """The frame around a call (cancel, timing, error translation, pricing) is written once."""
    from engine.llm.anthropic_provider import AnthropicProvider
    from engine.llm.openai_provider import OpenAIProvider
    from engine.llm.sdk_provider import SDKProvider

    for provider in (OpenAIProvider, AnthropicProvider):
        assert issubclass(provider, SDKProvider)
        assert "complete" not in vars(provider)


def test_a_provider_that_only_says_how_to_call_gets_pricing_and_error_translation(monkeypatch):
    """A new SDK provider supplies its client, parameters and call; the skeleton does the rest."""
    import httpx2  # the HTTP library the openai SDK is built on
    import openai

    from engine.llm.sdk_provider import Completion, SDKProvider

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    outcomes: list[object] = []

    class Probe(SDKProvider):
        provider = "openai"
        sdk = openai
        sdk_error = openai.OpenAIError

        def make_client(self, api_key):
            return None

        def build_params(self, request):
            return {"model": self.model}

        def summarize(self, params):
            return dict(params)

        def call(self, params, on_token, cancel):
            outcome = outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

    prices = PriceTable.load({"openai/probe": {"input": 1.0, "output": 2.0}})
    probe = Probe("probe", ProviderSettings(max_retries=0), prices)
    outcomes.append(Completion("hi", "", Usage(input_tokens=1_000_000, output_tokens=500_000), "stop", None))
    reply = probe.complete(REQ)
    assert (reply.text, reply.model, reply.cost_usd, reply.raw_request_summary) == (
        "hi",
        "openai/probe",
        2.0,
        {"model": "probe"},
    )
    # a real request: since openai 3.60 the error reads the request's headers (to hide secret ones)
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    outcomes.append(openai.APIConnectionError(request=request))
    with pytest.raises(E.LLMError) as info:
        probe.complete(REQ)
    assert "openai/probe" in str(info.value)
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(E.LLMCancelled):
        probe.complete(REQ, cancel=cancelled)
