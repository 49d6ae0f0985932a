"""Remove API keys and other credentials from everything before it is committed.

A session repository is meant to be shared (copied, pushed, attached to a bug report), and LLM
transcripts and build logs are exactly where keys leak: an error message that echoes a request
header, a settings dump, a Coder that prints ``os.environ``. So every file the session layer
commits goes through :class:`Scrubber` first. Two kinds of secrets are removed:

* the *values* of secret-looking environment variables (``OPENAI_API_KEY``,
  ``ANTHROPIC_API_KEY`` and any variable whose name ends in ``_API_KEY``, ``_TOKEN``,
  ``_SECRET``, ``_SECRET_KEY``, ``_ACCESS_KEY`` or ``_PASSWORD``) that are at least
  :data:`MIN_SECRET_LENGTH` characters long — shorter values are too likely to occur by chance
  (``1``, ``true``) and scrubbing them would corrupt unrelated text;
* strings shaped like well-known credentials (``sk-…``, ``sk-ant-…``, GitHub, Hugging Face,
  AWS, Google, Slack tokens, ``Authorization: Bearer …`` headers).

Structured data (JSON objects) is also scrubbed by key: the string value of a field named like a
credential (``api_key``, ``authorization``, ``x-api-key``, ``*_token`` …) is replaced whatever
its shape, because a key from a provider we do not know has no recognisable pattern.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

MIN_SECRET_LENGTH = 8
REDACTED = "[REDACTED]"

_SECRET_ENV_NAMES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
_SECRET_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_SECRET_KEY", "_ACCESS_KEY", "_PASSWORD")

# A key starts a token: nothing word-like before it, except the letter of an escape (``\\nsk-…``).
_START = r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrt]))"

# Key-shaped strings: (kind, literal triggers, pattern). A pattern runs only when one of its
# triggers occurs in the text, which keeps scrubbing megabytes of transcript cheap. The
# start condition keeps ``task-…`` or ``risk-assessment-…`` from matching ``sk-``.
_KEY_PATTERNS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    ("anthropic-key", ("sk-ant-",), re.compile(r"sk-ant-[A-Za-z0-9_\-]{16,}")),
    ("openai-key", ("sk-",), re.compile(_START + r"sk-[A-Za-z0-9_\-]{20,}")),
    (
        "github-token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(_START + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ),
    ("huggingface-token", ("hf_",), re.compile(_START + r"hf_[A-Za-z0-9]{30,}")),
    ("groq-key", ("gsk_",), re.compile(_START + r"gsk_[A-Za-z0-9]{20,}")),
    ("xai-key", ("xai-",), re.compile(_START + r"xai-[A-Za-z0-9]{20,}")),
    ("aws-access-key", ("AKIA", "ASIA"), re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])")),
    ("google-api-key", ("AIza",), re.compile(_START + r"AIza[0-9A-Za-z_\-]{35}")),
    ("slack-token", ("xox",), re.compile(_START + r"xox[abprs]-[A-Za-z0-9-]{10,}")),
    # A PEM private key (an SSH or TLS key a candidate printed): the whole block, or all of a cut-off one
    # (its base64 lines, newlines written out as in JSON included).
    (
        "private-key",
        ("PRIVATE KEY-----",),
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
            r"(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|(?:[A-Za-z0-9+/=:,\s-]|\\n)*)",
            re.S,
        ),
    ),
)
# Header values: keep the header name so logs stay readable, drop the credential.
_HEADER_TRIGGERS = ("authorization", "api-key")
_HEADER_PATTERN = re.compile(
    r"(?i)((?:authorization|proxy-authorization)[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)"
    r"[^\s\"',;]{8,}"
    r"|((?:x-api-key|api-key|x-goog-api-key)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]{8,}"
)

_SECRET_FIELD_EXACT = frozenset(
    {
        "api_key",
        "apikey",
        "x_api_key",
        "authorization",
        "proxy_authorization",
        "token",
        "secret",
        "password",
        "access_token",
        "refresh_token",
        "client_secret",
        "bearer",
    }
)
_SECRET_FIELD_SUFFIXES = ("_api_key", "_token", "_secret", "_password", "_access_key")


def is_secret_env_name(name: str) -> bool:
    """True for environment variable names whose values must never be committed."""
    upper = name.upper()
    return upper in _SECRET_ENV_NAMES or upper.endswith(_SECRET_ENV_SUFFIXES)


def is_secret_field_name(name: str) -> bool:
    """True for JSON/TOML field names that hold credentials (``api_key``, ``Authorization`` …)."""
    norm = name.strip().lower().replace("-", "_")
    return norm in _SECRET_FIELD_EXACT or norm.endswith(_SECRET_FIELD_SUFFIXES)


def secret_env_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secret environment variables worth scrubbing: name → value (values >= 8 chars)."""
    source = os.environ if env is None else env
    return {
        name: value
        for name, value in source.items()
        if is_secret_env_name(name) and len(value.strip()) >= MIN_SECRET_LENGTH
    }


class Scrubber:
    """Scrubs text and JSON-like data with one snapshot of the environment.

    Built once per commit so a large transcript does not rescan ``os.environ`` for every string.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        values = secret_env_values(env)
        # Longest first, so a value that contains another value is replaced whole.
        self._env_values = sorted(
            ((value.strip(), name) for name, value in values.items()), key=lambda item: -len(item[0])
        )

    def text(self, text: str) -> str:
        """Return ``text`` with every known secret replaced by a ``[REDACTED:…]`` marker."""
        for value, name in self._env_values:
            if value in text:
                text = text.replace(value, f"[REDACTED:{name}]")
        for kind, triggers, pattern in _KEY_PATTERNS:
            if any(trigger in text for trigger in triggers):
                text = pattern.sub(f"[REDACTED:{kind}]", text)
        lowered = text.lower()
        if any(trigger in lowered for trigger in _HEADER_TRIGGERS):
            text = _HEADER_PATTERN.sub(_redact_header, text)
        return text

    def data(self, value: Any) -> Any:
        """Return a scrubbed deep copy of JSON-like data (dicts, lists, strings, numbers)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            cleaned: dict[Any, Any] = {}
            for key, item in value.items():
                key_text = self.text(key) if isinstance(key, str) else key
                if isinstance(key, str) and isinstance(item, str) and item and is_secret_field_name(key):
                    cleaned[key_text] = REDACTED
                else:
                    cleaned[key_text] = self.data(item)
            return cleaned
        if isinstance(value, list | tuple):
            return [self.data(item) for item in value]
        return value


def _redact_header(match: re.Match[str]) -> str:
    prefix = match.group(1) if match.group(1) is not None else match.group(2)
    return f"{prefix}{REDACTED}"


def scrub_text(text: str, env: Mapping[str, str] | None = None) -> str:
    """Scrub one string (see :class:`Scrubber`)."""
    return Scrubber(env).text(text)


def scrub_data(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """Scrub JSON-like data (see :class:`Scrubber`)."""
    return Scrubber(env).data(value)
