"""At most N calls at once to each provider, however many agents ask (ARCHITECTURE.md §2, "Explore").

An exploration's branches each have their own Coder and Judge, and their rounds run side by side: K
branches would otherwise put K requests in flight to one API at once and meet its rate limits
together. :class:`ProviderBounds` gives each provider (``openai``, ``anthropic``, ``scripted``) one
semaphore, and :class:`BoundedProvider` makes a call wait for a slot of its provider's first, so the
calls beyond the bound queue here instead of failing there. A cancel is honoured while waiting.
"""

from __future__ import annotations

import threading
from typing import Any

from engine.llm.base import LLMReply, LLMRequest, Provider, TokenCallback, check_cancel

#: calls in flight per provider when the command does not say (--llm-concurrency)
DEFAULT_PER_PROVIDER = 4


class ProviderBounds:
    """One bound per provider kind, shared by every agent whose provider :meth:`wrap` wrapped."""

    def __init__(self, per_provider: int = DEFAULT_PER_PROVIDER) -> None:
        if per_provider < 1:
            raise ValueError("at least one call at a time per provider")
        self.per_provider = per_provider
        self._slots: dict[str, threading.Semaphore] = {}
        self._in_flight: dict[str, int] = {}
        #: the most calls in flight at once, per provider (what the bound let through)
        self.peak: dict[str, int] = {}
        self._lock = threading.Lock()

    def wrap(self, provider: Provider) -> Provider:
        if isinstance(provider, BoundedProvider):
            return provider
        with self._lock:
            self._slots.setdefault(provider.provider, threading.Semaphore(self.per_provider))
        return BoundedProvider(provider, self)

    def enter(self, kind: str, cancel: threading.Event | None, name: str) -> None:
        slots = self._slots[kind]
        while not slots.acquire(timeout=0.2):
            check_cancel(cancel, name)
        with self._lock:
            self._in_flight[kind] = self._in_flight.get(kind, 0) + 1
            self.peak[kind] = max(self.peak.get(kind, 0), self._in_flight[kind])

    def leave(self, kind: str) -> None:
        with self._lock:
            self._in_flight[kind] -= 1
        self._slots[kind].release()


class BoundedProvider(Provider):
    """``inner`` whose calls first wait for a slot of its provider kind (see the module docstring)."""

    def __init__(self, inner: Provider, bounds: ProviderBounds) -> None:
        self.inner = inner
        self.bounds = bounds
        self.name, self.provider, self.model = inner.name, inner.provider, inner.model

    def complete(
        self,
        request: LLMRequest,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LLMReply:
        self.bounds.enter(self.provider, cancel, self.name)
        try:
            return self.inner.complete(request, on_token, cancel)
        finally:
            self.bounds.leave(self.provider)

    def __getattr__(self, name: str) -> Any:  # prices, settings, a scripted provider's call count
        return getattr(self.inner, name)
