"""The branch's earlier rounds as a compact table both agents read (issue #19, item 4).

Why: without it the Judge can propose an idea that already failed or that the human rejected, and
the Coder can bring back a change an earlier round showed to be wrong. CudaForge keeps such a record
but never passes it on; ARCHITECTURE.md §2 keeps the Judge on the latest kernel, and this table keeps that:
one line per round, no kernels, no logs.

Bounded: the newest ``max_rows`` rows are kept, and a marker line says how many older ones were
left out; each suggestion is clipped to one line with a visible ellipsis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.agents.suggestion import Suggestion

MAX_ROWS = 12
MAX_TEXT = 140
MAX_NOTE = 160


@dataclass(frozen=True)
class HistoryRow:
    """One line of the table: a committed iteration, or a suggestion the human rejected in its round."""

    iteration: int | None  # None for a rejected suggestion (it produced no kernel)
    phase: str
    suggestion: str
    status: str
    speedup: float | None
    decision: str  # "approved (policy:auto)", "approved (human)", "edited (human)", "rejected (human)", "—"
    note: str = ""


def _one_line(text: str, limit: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _headline(data: Mapping[str, Any] | None, phase: str) -> str:
    if not data:
        return ""
    mode = data.get("mode") or ("repair" if phase == "repair" else "optimize")
    suggestion = Suggestion.from_dict({**data, "mode": mode})
    main = suggestion.headline()
    method = suggestion.optimization_method
    if mode == "optimize" and method and method not in main:
        main = f"{main} -> {method}"
    return main


def rows_for(
    number: int,
    phase: str,
    status: str,
    speedup: float | None,
    suggestion: Mapping[str, Any] | None,
    note: str = "",
) -> list[HistoryRow]:
    """The rows of one iteration, from its ``suggestion.json`` (proposed / approved / rejected …)."""
    rows: list[HistoryRow] = []
    record = suggestion or {}
    for rejection in record.get("rejected") or []:
        proposed = rejection.get("suggestion") or {}
        rows.append(
            HistoryRow(
                None,
                phase,
                _headline(proposed, phase) or "(suggestion)",
                "not tried",
                None,
                "rejected (human)",
                rejection.get("note") or "no reason given",
            )
        )
    approved = record.get("approved") or record.get("proposed")
    if phase == "seed":
        text = "first kernel from the reference"
    elif phase == "human":
        text = "kernel written by the human"
    else:
        text = _headline(approved, phase) or "(no suggestion recorded)"
    by = record.get("approved_by") or ""
    if record.get("approved") is None:
        decision = "—"
    elif record.get("edited"):
        decision = f"edited ({by or 'human'})"
    else:
        decision = f"approved ({by or 'auto'})"
    rows.append(HistoryRow(number, phase, text, status, speedup, decision, note))
    return rows


def rows_from_iterations(iterations: Iterable[Any]) -> list[HistoryRow]:
    """Rows for a branch's iterations (``sessions.records.Iteration`` objects), oldest first."""
    rows: list[HistoryRow] = []
    for item in iterations:
        failure = ""
        if item.status != "correct":
            messages = (item.eval_result or {}).get("messages") or []
            failure = messages[0] if messages else ""
        rows += rows_for(item.number, item.phase, item.status, item.speedup, item.suggestion, failure)
    return rows


def render(rows: Sequence[HistoryRow], max_rows: int = MAX_ROWS) -> str:
    """The table; "" when there is nothing yet."""
    if not rows:
        return ""
    shown = list(rows[-max_rows:])
    lines = ["iter | phase | suggestion carried out | status | speedup | human decision | note"]
    if len(rows) > len(shown):
        lines.append(f"[... {len(rows) - len(shown)} older row(s) not shown ...]")
    for row in shown:
        speedup = f"{row.speedup:.2f}x" if isinstance(row.speedup, (int, float)) else "—"
        number = str(row.iteration) if row.iteration is not None else "—"
        note = _one_line(row.note, MAX_NOTE) if row.note else "—"
        lines.append(
            f"{number} | {row.phase} | {_one_line(row.suggestion, MAX_TEXT)} | {row.status} | {speedup}"
            f" | {row.decision} | {note}"
        )
    return "\n".join(lines)
