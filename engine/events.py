"""Events the loop emits for its front ends (ARCHITECTURE.md §1): plain dataclasses, no UI imports.

The TUI turns each into a Textual message; the headless CLI prints them. Every event carries the
session branch and iteration it belongs to, so a front end can route it without loop state.
Add fields with defaults only, so existing front ends keep working.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    """Base of all loop events."""

    iteration: int | None = None
    branch: str = ""
    at: float = field(default_factory=time.time)


@dataclass
class StageStarted(Event):
    """A stage began: ``seed``, ``coder``, ``evaluate``, ``build``, ``check``, ``time``, ``profile``, ``judge``."""

    stage: str = ""
    round: int = 0
    detail: str = ""


@dataclass
class LLMToken(Event):
    """A streamed piece of an agent's reply (``role``: ``coder`` or ``judge``)."""

    role: str = ""
    text: str = ""


@dataclass
class LLMReply(Event):
    """A finished agent call with its usage and cost (``cost_usd`` None when the price is unknown)."""

    role: str = ""
    kind: str = ""  # seed / repair / optimize
    model: str = ""
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_s: float = 0.0


@dataclass
class BuildLog(Event):
    """One line of compiler or worker output, as it happens."""

    line: str = ""


@dataclass
class EvalFinished(Event):
    """The evaluation's verdict: ``result`` is the EvalResult as a dict (the eval.json contract)."""

    result: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProfileFinished(Event):
    """Hardware feedback for the Judge: ``profile`` is the profile.json content."""

    profile: dict[str, Any] = field(default_factory=dict)


@dataclass
class SuggestionReady(Event):
    """The Judge proposed exactly one fix or optimisation (``suggestion`` as in suggestion.json)."""

    suggestion: dict[str, Any] = field(default_factory=dict)


@dataclass
class AwaitingApproval(Event):
    """The loop waits for ``approve``, ``reject`` or ``edit_kernel``; ``flagged`` when a guard flagged it."""

    suggestion: dict[str, Any] = field(default_factory=dict)
    flagged: bool = False


@dataclass
class IterationCommitted(Event):
    """A kernel version was committed to the session repo."""

    commit: str = ""
    phase: str = ""
    status: str = ""
    speedup: float | None = None


@dataclass
class LoopFinished(Event):
    """The rounds ended or the human stopped; the best correct kernel of the branch."""

    reason: str = ""
    best_iteration: int | None = None
    best_speedup: float | None = None


@dataclass
class LoopError(Event):
    """Something failed outside the candidate (an LLM call, the session repo); ``stage`` says where."""

    stage: str = ""
    message: str = ""
    recoverable: bool = True


@dataclass
class LoopNotice(Event):
    """Something the person should know that is not an error: a repaired journal, a refused step."""

    message: str = ""
