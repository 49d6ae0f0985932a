"""One transcript record per LLM call, as stored in a session's ``transcript.jsonl``.

The record holds what was sent (system + messages), what came back (reply, thinking), and what
it cost (usage, latency, cost). It is built from plain data only, so no API key can end up in it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from engine.agents.prompts import Prompt
from engine.llm.base import LLMReply


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def transcript_record(
    prompt: Prompt,
    *,
    model: str,
    provider: str,
    started_at: datetime,
    reply: LLMReply | None = None,
    error: str | None = None,
    outcome: str | None = None,
) -> dict[str, Any]:
    """A JSON-able dict for one call; ``reply`` is None when the call failed (``error`` says why)."""
    return {
        "role": prompt.role,
        "kind": prompt.kind,
        "model": model,
        "provider": provider,
        "started_at": started_at.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "system": prompt.system,
        "messages": [m.to_dict() for m in prompt.messages],
        "reply": reply.text if reply else None,
        "thinking": reply.thinking if reply else None,
        "usage": reply.usage.to_dict() if reply else None,
        "latency_s": reply.latency_s if reply else None,
        "cost_usd": reply.cost_usd if reply else None,
        "stop_reason": reply.stop_reason if reply else None,
        "served_model": reply.served_model if reply else None,
        "request": dict(reply.raw_request_summary) if reply else None,
        "outcome": outcome,
        "error": error,
    }
