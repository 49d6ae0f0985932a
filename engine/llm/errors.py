"""Errors a provider raises, each with a one-line message a human can act on.

The loop and the TUI show ``str(error)`` as is, so every message names the model and, where it
helps, what to do (which environment variable to set, which setting to change). Messages never
contain an API key.
"""

from __future__ import annotations

from typing import Any


class LLMError(Exception):
    """Base class: any failure of one LLM call. ``retryable`` tells the loop a later retry may work."""

    retryable: bool = False
    #: the transcript record of the failed call, attached by the agent that made it (if any).
    record: dict[str, Any] | None = None

    def __init__(self, message: str) -> None:
        # Collapse to one line: SDK messages sometimes carry newlines or whole JSON bodies.
        super().__init__(" ".join(str(message).split()))


class ConfigError(LLMError):
    """The provider settings or the model name are unusable (caught before any request)."""


class UnknownModelError(LLMError):
    """The provider prefix is unknown, or the server says it does not serve that model."""


class MissingKeyError(LLMError):
    """No API key in the environment variable the provider reads."""


class AuthError(LLMError):
    """The server refused the key (401/403)."""


class ContextExhaustedError(LLMError):
    """The prompt does not fit the model's context window."""


class RateLimitError(LLMError):
    """Still rate limited (429) after the SDK's retries."""

    retryable = True


class ServerError(LLMError):
    """The server kept failing (5xx) after the SDK's retries."""

    retryable = True


class LLMTimeoutError(LLMError):
    """No (complete) answer within the timeout, after the SDK's retries."""

    retryable = True


class LLMConnectionError(LLMError):
    """The server could not be reached at all."""

    retryable = True


class MalformedReplyError(LLMError):
    """The server answered 200 with a body that is not the protocol's shape."""

    retryable = True


class BadRequestError(LLMError):
    """Any other 4xx: the request itself is wrong (bad parameter for this model, etc.)."""


class LLMCancelled(LLMError):
    """The caller set the cancel event; the stream was closed and nothing is returned."""
