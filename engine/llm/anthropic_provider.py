"""Anthropic provider on the ``anthropic`` SDK (Messages API), streamed by default.

Extended thinking is optional (``thinking_budget``: a token budget, or ``"adaptive"``); the
thinking text is returned apart from the reply and never sent to the token callback. Retries are
the SDK's own (``max_retries``; 408/409/429/5xx and timeouts, honouring ``retry-after``).
"""

from __future__ import annotations

import threading
from typing import Any

import anthropic

from engine.llm.base import LLMRequest, TokenCallback, Usage
from engine.llm.errors import ConfigError, MalformedReplyError, ServerError
from engine.llm.prices import PriceTable
from engine.llm.sdk_provider import Completion, SDKProvider, as_int
from engine.llm.settings import ProviderSettings
from engine.llm.streaming import drain


def _usage(u: Any, output_tokens: int | None = None) -> Usage:
    """Anthropic reports cache reads/writes apart from ``input_tokens``; we fold them in so
    ``input_tokens`` is the whole prompt, as for OpenAI."""
    if u is None:
        return Usage(output_tokens=output_tokens or 0)
    cache_read = as_int(getattr(u, "cache_read_input_tokens", 0))
    cache_write = as_int(getattr(u, "cache_creation_input_tokens", 0))
    return Usage(
        input_tokens=as_int(getattr(u, "input_tokens", 0)) + cache_read + cache_write,
        output_tokens=as_int(getattr(u, "output_tokens", 0)) if output_tokens is None else output_tokens,
        cached_tokens=cache_read,
    )


class AnthropicProvider(SDKProvider):
    provider = "anthropic"
    sdk = anthropic
    sdk_error = anthropic.AnthropicError

    def __init__(self, model: str, settings: ProviderSettings, prices: PriceTable) -> None:
        budget = settings.thinking_budget
        if isinstance(budget, int) and budget >= settings.max_output_tokens:
            raise ConfigError(
                f"anthropic/{model}: thinking_budget ({budget}) must be below max_output_tokens "
                f"({settings.max_output_tokens}), which includes the thinking"
            )
        super().__init__(model, settings, prices)

    def make_client(self, api_key: str | None) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            api_key=api_key,
            base_url=self.settings.base_url or None,
            timeout=self.settings.timeout_s,
            max_retries=self.settings.max_retries,
        )

    def build_params(self, request: LLMRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_output_tokens or self.settings.max_output_tokens,
            "messages": request.messages_as_dicts(),
        }
        if request.system:
            params["system"] = request.system
        budget = self.settings.thinking_budget
        if budget == "adaptive":
            params["thinking"] = {"type": "adaptive"}
        elif isinstance(budget, int):
            params["thinking"] = {"type": "enabled", "budget_tokens": budget}
        temperature = request.temperature if request.temperature is not None else self.settings.temperature
        if temperature is not None and "thinking" not in params:  # thinking requires the default temperature
            # This SDK generation no longer lists ``temperature`` as a keyword; older models still
            # accept it in the body, so it travels as an extra body field only when configured.
            params["extra_body"] = {"temperature": temperature}
        if self.settings.stream:
            params["stream"] = True
        return params

    def summarize(self, params: dict[str, Any]) -> dict[str, Any]:
        summary = {k: v for k, v in params.items() if k not in ("messages", "system", "extra_body")}
        summary.update(params.get("extra_body") or {})
        summary.update(
            endpoint="messages",
            base_url=self.base_url,
            max_retries=self.settings.max_retries,
            timeout_s=self.settings.timeout_s,
        )
        return summary

    def call(
        self, params: dict[str, Any], on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> Completion:
        return self._stream(params, on_token, cancel) if params.get("stream") else self._plain(params)

    def _plain(self, params: dict[str, Any]) -> Completion:
        resp = self._client.messages.create(**params)
        content = getattr(resp, "content", None)
        if not isinstance(content, list):
            raise MalformedReplyError(f"{self.name}: malformed reply from the server: no content list")
        text = "".join(b.text for b in content if getattr(b, "type", None) == "text")
        thinking = "".join(b.thinking for b in content if getattr(b, "type", None) == "thinking")
        return Completion(text, thinking, _usage(resp.usage), resp.stop_reason, getattr(resp, "model", None))

    def _stream(
        self, params: dict[str, Any], on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> Completion:
        text: list[str] = []
        thinking: list[str] = []
        state: dict[str, Any] = {
            "start_usage": None,
            "output": None,
            "stop": None,
            "model": None,
            "done": False,
        }

        def on_event(event: Any) -> None:
            kind = getattr(event, "type", "")
            if kind == "message_start":
                state["start_usage"] = event.message.usage
                state["model"] = getattr(event.message, "model", None)
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    text.append(delta.text)
                    if on_token:
                        on_token(delta.text)
                elif delta.type == "thinking_delta":
                    thinking.append(delta.thinking)
            elif kind == "message_delta":
                state["stop"] = getattr(event.delta, "stop_reason", None) or state["stop"]
                if getattr(event, "usage", None) is not None:
                    state["output"] = as_int(event.usage.output_tokens)
            elif kind == "message_stop":
                state["done"] = True
            elif kind == "error":
                raise ServerError(
                    f"{self.name}: the server reported an error mid-stream: {getattr(event, 'error', '')}"
                )

        drain(self._client.messages.create(**params), on_event, cancel, self.name)
        if not state["done"] and state["stop"] is None:
            raise MalformedReplyError(f"{self.name}: the stream ended before the reply was complete")
        usage = _usage(state["start_usage"], state["output"])
        return Completion("".join(text), "".join(thinking), usage, state["stop"], state["model"])
