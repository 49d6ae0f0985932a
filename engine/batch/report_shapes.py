"""The best kernel at each shape it was tested at, for ``cudaforge report`` (ARCHITECTURE.md §8, "The
report"; §3, "Defences").

Why: a kernel correct only at the task's own sizes is a common agent shortcut, and a reader of the page
should see where the best kernel was checked. The evaluation records its shape re-check in
``EvalResult.shapes`` (``engine.eval.shapes``): ``{"sizes", "variants": [{"name", "sizes", "status",
"message", and at a shape it passed: "speedup", "speedup_interval", "kernel_ms"}], "note"}``. The task's
own shape has the full timing; another shape where the kernel was correct has a short one (a few calls on
one input set, ``engine.eval.late``), and a record older than that, or a shape it failed at, carries no
time, so its cell says so instead of inventing one.
"""

from __future__ import annotations

from typing import Any

from engine.batch.report_html import escape, table
from sessions import ranking

NOT_TIMED = "not timed (correctness only)"


def _sizes(sizes: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in (sizes or {}).items()) or "—"


def _speed(variant: dict[str, Any]) -> str:
    speedup = variant.get("speedup")
    if not isinstance(speedup, (int, float)):
        return NOT_TIMED
    low, high = (variant.get("speedup_interval") or [None, None])[:2]
    return ranking.interval_label(float(speedup), low, high)


def shapes_html(best: Any, branch: str) -> str:
    """The table of ``best``'s shapes (the task's own first, with its timed speedup and interval), or one
    line saying no other shape was tested, and why when the record says."""
    if best is None:
        return "<p>No correct kernel: no shapes to show.</p>"
    record = best.eval_result.get("shapes") or {}
    variants = record.get("variants") or []
    if not variants:
        why = f": {record['note']}" if record.get("note") else ""
        return f"<p>No per-shape results recorded for iteration {best.number}{escape(why)}.</p>"
    own = ranking.label(ranking.measured(branch, best))
    rows = [["the task's own", escape(_sizes(record.get("sizes"))), "correct", escape(own)]]
    for v in variants:
        status = escape(v.get("status", "—")) + (
            f" <span class=note>{escape(v['message'])}</span>" if v.get("message") else ""
        )
        rows.append([escape(v.get("name", "—")), escape(_sizes(v.get("sizes"))), status, escape(_speed(v))])
    note = (
        "<p class=note>The task's own shape has the full timing; the others a short one (a few calls on one "
        "input set) where the kernel was correct there: a guide, not the verdict.</p>"
    )
    return (
        f"<p>Iteration {best.number} at each shape it was tested at:</p>"
        + table(("shape", "sizes", "result", "speedup"), rows, (3,))
        + note
    )
