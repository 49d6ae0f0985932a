"""The one interface every LLM provider implements, and the plain data it exchanges.

A provider takes a system prompt and a short list of messages, optionally streams text deltas to
a callback, and returns the whole reply with its token usage, latency and cost. Everything here
is plain data (JSON-able through ``to_dict``) so the loop can record it in a session's
``transcript.jsonl`` without knowing which provider produced it.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from engine.llm.errors import LLMCancelled

Role = Literal["user", "assistant"]
TokenCallback = Callable[[str], None]


@dataclass(frozen=True)
class Message:
    """One turn of the conversation sent to the model (the system prompt travels separately)."""

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class LLMRequest:
    """What to send. ``max_output_tokens``/``temperature`` override the provider settings for one call."""

    system: str
    messages: Sequence[Message]
    max_output_tokens: int | None = None
    temperature: float | None = None

    def messages_as_dicts(self) -> list[dict[str, str]]:
        return [m.to_dict() for m in self.messages]


@dataclass
class Usage:
    """Token counts of one call, normalised across providers.

    ``input_tokens`` counts the whole prompt, cached part included; ``cached_tokens`` is the part
    served from a prompt cache. ``output_tokens`` includes ``reasoning_tokens`` (hidden thinking
    is billed as output by both OpenAI and Anthropic).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class LLMReply:
    """The outcome of one successful call. ``cost_usd`` is None when the model has no known price."""

    text: str
    thinking: str
    model: str
    usage: Usage
    latency_s: float
    cost_usd: float | None
    provider: str
    raw_request_summary: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    #: the model name the server reported (e.g. a dated snapshot), when it reported one.
    served_model: str | None = None

    @property
    def truncated(self) -> bool:
        """True when the model stopped because it hit the output-token limit."""
        return self.stop_reason in {"length", "max_tokens", "max_output_tokens"}

    def cost_text(self) -> str:
        """Human text for the cost: never a made-up number for an unpriced model."""
        return "cost unknown" if self.cost_usd is None else f"${self.cost_usd:.4f}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "thinking": self.thinking,
            "model": self.model,
            "provider": self.provider,
            "usage": self.usage.to_dict(),
            "latency_s": self.latency_s,
            "cost_usd": self.cost_usd,
            "stop_reason": self.stop_reason,
            "served_model": self.served_model,
            "request": dict(self.raw_request_summary),
        }


class Provider(abc.ABC):
    """A way to reach one model. Instances are reusable and safe to call from one thread at a time."""

    #: ``provider/model`` as the user wrote it, e.g. ``openai/o3``.
    name: str
    #: the provider part (``openai``, ``anthropic``, ``scripted``).
    provider: str
    #: the model part as sent to the server.
    model: str

    @abc.abstractmethod
    def complete(
        self,
        request: LLMRequest,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LLMReply:
        """Send ``request`` and return the reply; raise an ``LLMError`` subclass on failure.

        ``on_token`` receives text deltas as they arrive (not thinking). ``cancel`` is checked
        before the request and between stream chunks; when set, the stream is closed and
        ``LLMCancelled`` is raised.
        """


def check_cancel(cancel: threading.Event | None, name: str) -> None:
    """Raise ``LLMCancelled`` when the caller asked to stop."""
    if cancel is not None and cancel.is_set():
        raise LLMCancelled(f"{name}: call cancelled")
