"""The few HTML pieces every part of ``cudaforge report``'s page is built from (ARCHITECTURE.md §8,
"The report"): escaping, a table, a speedup figure. One place, so the branch leaderboard, the shapes table
and the iteration tables look alike and escape alike."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any


def escape(value: Any) -> str:
    """``value`` as HTML text."""
    return html.escape(str(value))


def times(value: float | None) -> str:
    """``1.42x``, or ``—`` without a number."""
    return f"{value:.2f}x" if isinstance(value, (int, float)) else "—"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table: ``header`` escaped here, the cells already HTML; the ``numeric`` columns right-aligned."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if i in numeric else ''}>{cell}</td>" for i, cell in enumerate(row)) + "</tr>"
        for row in rows
    )  # fmt: skip
    return f"<table><tr>{head}</tr>{body}</table>"
