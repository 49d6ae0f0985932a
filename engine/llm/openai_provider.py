"""OpenAI provider on the ``openai`` SDK: Chat Completions or the Responses API.

Works for OpenAI's reasoning models (o1/o3/o4/gpt-5: no temperature, a completion-token limit)
and for any OpenAI-compatible server (vLLM, SGLang, Ollama...) through ``base_url`` in the
config or ``OPENAI_BASE_URL``. With such a server a missing key is not fatal: the placeholder
``EMPTY`` is sent. Retries (429, 5xx, timeouts; exponential backoff honouring ``retry-after``)
are the SDK's own, driven by ``max_retries``.
"""

from __future__ import annotations

import threading
from typing import Any

import openai

from engine.llm.base import LLMRequest, TokenCallback, Usage
from engine.llm.errors import MalformedReplyError, ServerError
from engine.llm.sdk_provider import Completion, SDKProvider, as_int
from engine.llm.streaming import drain

REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def is_reasoning_model(model: str) -> bool:
    """OpenAI reasoning families reject ``temperature`` and need ``max_completion_tokens``."""
    base = model.rsplit("/", 1)[-1].lower()
    return base.startswith(REASONING_PREFIXES)


def _extra(obj: Any, *names: str) -> str | None:
    """A non-standard string field some compatible servers add (``reasoning_content``, ``reasoning``)."""
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, str) and value:
            return value
    return None


class OpenAIProvider(SDKProvider):
    provider = "openai"
    sdk = openai
    sdk_error = openai.OpenAIError

    @property
    def reasoning(self) -> bool:
        return is_reasoning_model(self.model)

    def make_client(self, api_key: str | None) -> openai.OpenAI:
        return openai.OpenAI(
            api_key=api_key,
            base_url=self.settings.base_url or None,
            timeout=self.settings.timeout_s,
            max_retries=self.settings.max_retries,
        )

    # -- request building ----------------------------------------------------------------------
    def _limit_param(self) -> str:
        """``max_completion_tokens`` for OpenAI itself and reasoning models; ``max_tokens`` for
        other compatible servers, which do not all understand the newer name."""
        if self.reasoning or self.base_url is None or "api.openai.com" in self.base_url:
            return "max_completion_tokens"
        return "max_tokens"

    def _temperature(self, request: LLMRequest) -> float | None:
        t = request.temperature if request.temperature is not None else self.settings.temperature
        return None if self.reasoning else t

    def build_params(self, request: LLMRequest) -> dict[str, Any]:
        """The keyword arguments for the SDK call (also what the transcript summarises)."""
        limit = request.max_output_tokens or self.settings.max_output_tokens
        params: dict[str, Any] = {"model": self.model}
        if self.settings.api == "chat":
            params["messages"] = [{"role": "system", "content": request.system}, *request.messages_as_dicts()]
            params[self._limit_param()] = limit
            if self.settings.reasoning_effort:
                params["reasoning_effort"] = self.settings.reasoning_effort
            if self.settings.stream:
                params["stream"] = True
                params["stream_options"] = {"include_usage": True}
        else:
            params["instructions"] = request.system
            params["input"] = request.messages_as_dicts()
            params["max_output_tokens"] = limit
            params["store"] = False  # do not keep our prompts server-side
            if self.settings.reasoning_effort:
                params["reasoning"] = {"effort": self.settings.reasoning_effort}
            if self.settings.stream:
                params["stream"] = True
        temperature = self._temperature(request)
        if temperature is not None:
            params["temperature"] = temperature
        return params

    def summarize(self, params: dict[str, Any]) -> dict[str, Any]:
        """What was asked, without the prompt text or any credential."""
        summary = {k: v for k, v in params.items() if k not in ("messages", "input", "instructions")}
        summary["endpoint"] = "chat.completions" if self.settings.api == "chat" else "responses"
        summary["base_url"] = self.base_url
        summary["max_retries"] = self.settings.max_retries
        summary["timeout_s"] = self.settings.timeout_s
        return summary

    # -- calls -----------------------------------------------------------------------------------
    def call(
        self, params: dict[str, Any], on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> Completion:
        streamed = bool(params.get("stream"))
        if self.settings.api == "chat":
            return self._chat_stream(params, on_token, cancel) if streamed else self._chat(params)
        return self._responses_stream(params, on_token, cancel) if streamed else self._responses(params)

    @staticmethod
    def _chat_usage(u: Any) -> Usage:
        if u is None:
            return Usage()
        pd, cd = getattr(u, "prompt_tokens_details", None), getattr(u, "completion_tokens_details", None)
        return Usage(
            input_tokens=as_int(u.prompt_tokens),
            output_tokens=as_int(u.completion_tokens),
            reasoning_tokens=as_int(getattr(cd, "reasoning_tokens", 0)),
            cached_tokens=as_int(getattr(pd, "cached_tokens", 0)),
        )

    def _chat(self, params: dict[str, Any]) -> Completion:
        resp = self._client.chat.completions.create(**params)
        choices = getattr(resp, "choices", None)
        if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
            raise MalformedReplyError(f"{self.name}: malformed reply from the server: no choices[0].message")
        message = choices[0].message
        thinking = _extra(message, "reasoning_content", "reasoning") or ""
        return Completion(
            message.content or "",
            thinking,
            self._chat_usage(resp.usage),
            choices[0].finish_reason,
            getattr(resp, "model", None),
        )

    def _chat_stream(
        self, params: dict[str, Any], on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> Completion:
        text: list[str] = []
        thinking: list[str] = []
        state: dict[str, Any] = {"usage": None, "stop": None, "model": None}

        def on_chunk(chunk: Any) -> None:
            if getattr(chunk, "usage", None) is not None:
                state["usage"] = chunk.usage
            state["model"] = getattr(chunk, "model", None) or state["model"]
            for choice in getattr(chunk, "choices", None) or []:
                if getattr(choice, "index", 0) != 0:
                    continue
                delta = choice.delta
                if delta is not None:
                    reasoning = _extra(delta, "reasoning_content", "reasoning")
                    if reasoning:
                        thinking.append(reasoning)
                    if delta.content:
                        text.append(delta.content)
                        if on_token:
                            on_token(delta.content)
                if choice.finish_reason:
                    state["stop"] = choice.finish_reason

        drain(self._client.chat.completions.create(**params), on_chunk, cancel, self.name)
        if state["stop"] is None and state["usage"] is None:
            raise MalformedReplyError(f"{self.name}: the stream ended before the reply was complete")
        return Completion(
            "".join(text),
            "".join(thinking),
            self._chat_usage(state["usage"]),
            state["stop"],
            state["model"],
        )

    @staticmethod
    def _responses_usage(u: Any) -> Usage:
        if u is None:
            return Usage()
        idt, odt = getattr(u, "input_tokens_details", None), getattr(u, "output_tokens_details", None)
        return Usage(
            input_tokens=as_int(u.input_tokens),
            output_tokens=as_int(u.output_tokens),
            reasoning_tokens=as_int(getattr(odt, "reasoning_tokens", 0)),
            cached_tokens=as_int(getattr(idt, "cached_tokens", 0)),
        )

    @staticmethod
    def _responses_parts(resp: Any) -> tuple[str, str]:
        """Text and reasoning summary of a finished Response object."""
        text: list[str] = []
        thinking: list[str] = []
        for item in resp.output:
            kind = getattr(item, "type", None)
            if kind == "message":
                for part in getattr(item, "content", None) or []:
                    if getattr(part, "type", None) == "output_text":
                        text.append(part.text)
            elif kind == "reasoning":
                for part in list(getattr(item, "summary", None) or []) + list(
                    getattr(item, "content", None) or []
                ):
                    if getattr(part, "text", None):
                        thinking.append(part.text)
        return "".join(text), "\n".join(thinking)

    def _stop_of(self, resp: Any) -> str | None:
        status = getattr(resp, "status", None)
        if status == "failed":
            err = getattr(resp, "error", None)
            raise ServerError(f"{self.name}: the response failed: {getattr(err, 'message', None) or err}")
        if status == "incomplete":
            details = getattr(resp, "incomplete_details", None)
            return getattr(details, "reason", None) or "incomplete"
        return status

    def _responses(self, params: dict[str, Any]) -> Completion:
        resp = self._client.responses.create(**params)
        if not isinstance(getattr(resp, "output", None), list):
            raise MalformedReplyError(f"{self.name}: malformed reply from the server: no output list")
        text, thinking = self._responses_parts(resp)
        return Completion(
            text,
            thinking,
            self._responses_usage(resp.usage),
            self._stop_of(resp),
            getattr(resp, "model", None),
        )

    def _responses_stream(
        self, params: dict[str, Any], on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> Completion:
        text: list[str] = []
        thinking: list[str] = []
        final: dict[str, Any] = {}

        def on_event(event: Any) -> None:
            kind = getattr(event, "type", "")
            if kind == "response.output_text.delta":
                text.append(event.delta)
                if on_token:
                    on_token(event.delta)
            elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                thinking.append(event.delta)
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                final["response"] = event.response
            elif kind == "error":
                raise ServerError(
                    f"{self.name}: the server reported an error mid-stream: {getattr(event, 'message', '')}"
                )

        drain(self._client.responses.create(**params), on_event, cancel, self.name)
        resp = final.get("response")
        if resp is None:
            raise MalformedReplyError(f"{self.name}: the stream ended before the reply was complete")
        stop = self._stop_of(resp)
        return Completion(
            "".join(text),
            "".join(thinking),
            self._responses_usage(resp.usage),
            stop,
            getattr(resp, "model", None),
        )
