"""What the workbench shows when an exploration (``X``) ends: a headline and the CLI's summary table.

The TUI used to say only the best branch in a notice that faded; the person lost the table that
``cudaforge explore`` prints (each branch's state, rounds, best, cost, why it stopped, and the export
command). The text is that same table (``engine.cli.explore.format_summary``), so the two front ends
never disagree (ARCHITECTURE.md §2 "Explore", §8). No Textual here: the dialog is
``tui.screens.dialogs.SummaryScreen``.
"""

from __future__ import annotations

from typing import Any


def headline(summary: Any) -> str:
    """One line: how the exploration ended and its best branch (the dialog's title)."""
    best = summary.best
    if summary.outcome != "finished":
        return "exploration stopped: X at the same iteration resumes it"
    if best is None:
        return "exploration done: no branch has a correct kernel"
    tied = summary.within_spread
    within = f" ({', '.join(tied)} within its timing spread)" if tied else ""
    return f"exploration done: best {best.name} #{best.best_iteration} {best.best_speedup:.2f}x{within}"


def summary_text(summary: Any, session_name: str) -> str:
    """The per-branch table and the totals, as ``cudaforge explore`` prints them."""
    from engine.cli.explore import format_summary

    return format_summary(summary, session_name).strip("\n")
