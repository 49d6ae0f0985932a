"""Filling a DataTable whose rows are all replaced at once, with each column as wide as its widest cell.

Textual's DataTable measures new rows when it is next idle and widens their columns then; rows it drew
before that keep the old width in its line cache, so a cell that grew ("1 iteration" → "0 iterations") shows
cut until the row changes again. Setting every column's width from the cells before adding any row leaves
nothing to measure later (ARCHITECTURE §8, front ends).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.cells import cell_len

if TYPE_CHECKING:  # the table's module loads with the first table shown (the workbench starts without it)
    from textual.widgets import DataTable


def fill(
    table: DataTable[str],
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    keys: Sequence[str] | None = None,
) -> None:
    """Replace ``table``'s columns and rows; column ``i`` is as wide as its label or its widest cell."""
    widths = [max([cell_len(label), *(cell_len(row[i]) for row in rows)]) for i, label in enumerate(columns)]
    table.clear(columns=True)
    for label, width in zip(columns, widths, strict=True):
        table.add_column(label, width=width, key=label)
    for n, row in enumerate(rows):
        table.add_row(*row, key=keys[n] if keys is not None else None)
