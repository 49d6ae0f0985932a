"""The completion skeleton shared by the SDK-backed providers (OpenAI, Anthropic).

Both providers do the same things around the one part that differs: check for cancellation, build
the SDK's parameters, time the call, translate the SDK's exceptions into our one-line ``LLMError``\\ s,
price the usage and assemble the ``LLMReply``. That frame lives here once; a provider supplies only
its client, its parameters and how it reads a reply (:meth:`SDKProvider.call`), which returns a named
:class:`Completion` rather than an anonymous tuple.
"""

from __future__ import annotations

import abc
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from engine.llm.base import LLMReply, LLMRequest, Provider, TokenCallback, Usage, check_cancel
from engine.llm.errors import LLMError
from engine.llm.prices import PriceTable
from engine.llm.sdk_errors import CallContext, translate
from engine.llm.settings import ProviderSettings, effective_base_url, key_env_name, resolve_api_key


def as_int(value: Any) -> int:
    """A token count from an SDK object field that may be missing or ``None``."""
    return int(value) if isinstance(value, (int, float)) else 0


@dataclass(frozen=True)
class Completion:
    """What one provider call produced, before timing and pricing are added."""

    text: str
    thinking: str
    usage: Usage
    stop_reason: str | None
    served_model: str | None


class SDKProvider(Provider):
    """A provider reached through a vendor SDK whose errors ``engine.llm.sdk_errors`` translates."""

    #: the SDK module (``openai`` or ``anthropic``): its exception classes drive the translation.
    sdk: ModuleType
    #: the SDK's base exception class: everything under it is translated, nothing else is caught.
    sdk_error: type[Exception]

    def __init__(self, model: str, settings: ProviderSettings, prices: PriceTable) -> None:
        settings.validate()
        self.model = model
        self.name = f"{self.provider}/{model}"
        self.settings = settings
        self.prices = prices
        self.base_url = effective_base_url(settings, self.provider)
        self._ctx = CallContext(
            self.name,
            key_env_name(settings, self.provider),
            settings.timeout_s,
            settings.max_retries,
            self.base_url,
        )
        self._client = self.make_client(resolve_api_key(settings, self.provider, self.name))

    @abc.abstractmethod
    def make_client(self, api_key: str | None) -> Any:
        """The SDK client, with our timeout and retry settings."""

    @abc.abstractmethod
    def build_params(self, request: LLMRequest) -> dict[str, Any]:
        """The keyword arguments for the SDK call (also what the transcript summarises)."""

    @abc.abstractmethod
    def summarize(self, params: dict[str, Any]) -> dict[str, Any]:
        """What was asked, without the prompt text or any credential."""

    @abc.abstractmethod
    def call(
        self, params: dict[str, Any], on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> Completion:
        """Make the request (streamed or not) and read the reply."""

    def complete(
        self,
        request: LLMRequest,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LLMReply:
        check_cancel(cancel, self.name)
        params = self.build_params(request)
        started = time.monotonic()
        try:
            out = self.call(params, on_token, cancel)
        except LLMError:
            raise
        except (self.sdk_error, ValueError) as exc:
            raise translate(exc, self.sdk, self._ctx) from exc
        return LLMReply(
            text=out.text,
            thinking=out.thinking,
            model=self.name,
            usage=out.usage,
            latency_s=round(time.monotonic() - started, 4),
            cost_usd=self.prices.cost(self.name, out.usage),
            provider=self.provider,
            raw_request_summary=self.summarize(params),
            stop_reason=out.stop_reason,
            served_model=out.served_model,
        )
