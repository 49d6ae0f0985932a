"""Settings of a provider, as they come from the config file, and API-key lookup.

Keys are never stored here: the settings only name the environment variable that holds the key
(``api_key_env``), so a settings object can be written to ``session.toml`` or a transcript safely.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from engine.llm.errors import ConfigError, MissingKeyError

#: Sent as the key to an OpenAI-compatible local server (vLLM, SGLang, Ollama) that needs none;
#: the SDK refuses to start without some key.
PLACEHOLDER_KEY = "EMPTY"

DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


@dataclass(frozen=True)
class ProviderSettings:
    """Per-provider knobs. ``None`` means "the provider's default".

    - ``base_url``: another server speaking the same protocol (else the SDK reads
      ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, else the vendor's API).
    - ``api_key_env``: name of the environment variable holding the key.
    - ``max_output_tokens``: output limit (``max_completion_tokens`` / ``max_output_tokens`` /
      ``max_tokens`` depending on the API). 16384 by default, as in the paper's runs.
    - ``temperature``: sent only to models that accept it (never to o1/o3/o4/gpt-5 reasoning models).
    - ``timeout_s``: per request; for streams it bounds each wait for the next chunk.
    - ``max_retries``: handed to the SDK, which retries 408/409/429/5xx and timeouts with
      exponential backoff and honours ``retry-after(-ms)``.
    - ``thinking_budget``: Anthropic extended thinking budget in tokens (>= 1024), or
      ``"adaptive"`` for models that choose their own budget.
    - ``reasoning_effort``: OpenAI reasoning effort (``low``/``medium``/``high``...), when set.
    - ``api``: ``"chat"`` (Chat Completions; works with compatible servers) or ``"responses"``.
    - ``stream``: stream the reply (needed for live tokens and prompt cancellation).
    """

    base_url: str | None = None
    api_key_env: str | None = None
    max_output_tokens: int = 16384
    temperature: float | None = None
    timeout_s: float = 600.0
    max_retries: int = 3
    thinking_budget: int | str | None = None
    reasoning_effort: str | None = None
    api: str = "chat"
    stream: bool = True

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> ProviderSettings:
        """Build from a config table, refusing unknown keys so a typo is not silently ignored."""
        if data is None:
            return cls()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown provider setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        settings = cls(**dict(data))
        settings.validate()
        return settings

    def with_overrides(self, **changes: Any) -> ProviderSettings:
        return replace(self, **changes)

    def validate(self) -> None:
        if self.api not in ("chat", "responses"):
            raise ConfigError(f"api must be 'chat' or 'responses', not {self.api!r}")
        if self.max_output_tokens <= 0:
            raise ConfigError("max_output_tokens must be positive")
        if self.max_retries < 0:
            raise ConfigError("max_retries must be >= 0")
        if self.timeout_s <= 0:
            raise ConfigError("timeout_s must be positive")
        tb = self.thinking_budget
        if tb is not None and tb != "adaptive" and (not isinstance(tb, int) or tb < 1024):
            raise ConfigError("thinking_budget must be an integer >= 1024 or 'adaptive'")

    def to_dict(self) -> dict[str, Any]:
        """Safe to record: holds the key's variable name, never the key."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def effective_base_url(settings: ProviderSettings, provider: str) -> str | None:
    """The base URL the SDK will use: the setting, else the provider's environment variable."""
    if settings.base_url:
        return settings.base_url
    env = BASE_URL_ENV.get(provider)
    return os.environ.get(env) or None if env else None


def key_env_name(settings: ProviderSettings, provider: str) -> str:
    return settings.api_key_env or DEFAULT_KEY_ENV[provider]


def resolve_api_key(settings: ProviderSettings, provider: str, model_name: str) -> str:
    """Read the key from its environment variable.

    With a custom base URL (a local OpenAI-compatible server) a missing key is not fatal: the
    placeholder ``EMPTY`` is sent, which vLLM, SGLang and Ollama accept.
    """
    env = key_env_name(settings, provider)
    key = os.environ.get(env, "").strip()
    if key:
        return key
    if effective_base_url(settings, provider):
        return PLACEHOLDER_KEY
    raise MissingKeyError(f"{model_name}: no API key; set {env} (or point api_key_env at another variable)")
