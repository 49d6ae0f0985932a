"""Turn the ``openai`` / ``anthropic`` SDK exceptions into our one-line ``LLMError`` subclasses.

Both SDKs share a layout (``APIStatusError`` with ``status_code`` and a parsed ``body``,
``APITimeoutError`` a subclass of ``APIConnectionError``), so one translator serves both. By the
time an exception reaches us the SDK has already retried what deserved retrying (429, 5xx,
timeouts); the message says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from engine.llm import errors

_CONTEXT_HINTS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "reduce the length",
)


@dataclass(frozen=True)
class CallContext:
    """What a message needs to be actionable; never holds the key itself."""

    name: str  # provider/model
    key_env: str
    timeout_s: float
    max_retries: int
    base_url: str | None


def _body_text(body: Any) -> str:
    """The most useful human text from an error body of either protocol."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            parts = [str(err.get(k)) for k in ("code", "type", "message") if err.get(k)]
            return " ".join(parts)
        return str(err)
    return "" if body is None else str(body)


def _short(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def translate(exc: BaseException, sdk: ModuleType, ctx: CallContext) -> errors.LLMError:
    """Map one SDK exception (or a JSON decoding error of a malformed body) to an ``LLMError``."""
    where = f" at {ctx.base_url}" if ctx.base_url else ""
    tries = f"after {ctx.max_retries} retr{'y' if ctx.max_retries == 1 else 'ies'}"
    if isinstance(exc, sdk.APITimeoutError):
        return errors.LLMTimeoutError(f"{ctx.name}: no reply within {ctx.timeout_s:g} s {tries}{where}")
    if isinstance(exc, sdk.APIConnectionError):
        return errors.LLMConnectionError(f"{ctx.name}: cannot reach the server{where} {tries}")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        detail = _short(_body_text(getattr(exc, "body", None)) or str(getattr(exc, "message", "")))
        lowered = detail.lower()
        if status in (401, 403):
            return errors.AuthError(
                f"{ctx.name}: the server refused the API key ({status}); set {ctx.key_env} to a valid key"
            )
        if status == 429:
            return errors.RateLimitError(f"{ctx.name}: still rate limited (429) {tries}: {detail}")
        if status >= 500:
            return errors.ServerError(f"{ctx.name}: server error {status} {tries}: {detail}")
        if status == 404 or "model_not_found" in lowered:
            return errors.UnknownModelError(
                f"{ctx.name}: the server does not know this model ({status}: {detail})"
            )
        if status == 413 or any(h in lowered for h in _CONTEXT_HINTS):
            return errors.ContextExhaustedError(
                f"{ctx.name}: the prompt does not fit the model's context window ({status}: {detail})"
            )
        return errors.BadRequestError(f"{ctx.name}: request refused ({status}: {detail})")
    if isinstance(exc, ValueError):  # json.JSONDecodeError of a 200 body that is not JSON
        return errors.MalformedReplyError(
            f"{ctx.name}: malformed reply from the server{where}: {_short(str(exc))}"
        )
    if isinstance(exc, sdk.APIError):  # e.g. an error event in the middle of a stream
        return errors.ServerError(f"{ctx.name}: the server reported an error{where}: {_short(str(exc))}")
    return errors.LLMError(f"{ctx.name}: {type(exc).__name__}: {_short(str(exc))}")
