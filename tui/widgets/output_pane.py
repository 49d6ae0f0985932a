"""The output pane: build log (streamed), checks and timing, NCU metrics, and the speedup chart.

Only the build log exists from the start. The checks table, the NCU table and the chart are built
the first time their tab is shown, from the last result, profile and history handed to the pane:
two tables and a chart nobody is looking at were ~6 % of the work before the workbench's first
frame, and many sessions are browsed without ever opening those tabs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Log, Static

from tui.model import build_log_lines, check_rows, ncu_rows, scrub, speedup_chart
from tui.widgets.tabs import Pane, PaneTabs

if TYPE_CHECKING:  # imported with the first table shown
    from textual.widgets import DataTable

BUILD_LOG_MAX_LINES = 5000
BUILD, CHECKS, NCU, CHART = "tab-build", "tab-checks", "tab-ncu", "tab-chart"


class OutputPane(Vertical):

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._result: dict[str, Any] | None = None
        self._profile: dict[str, Any] | None = None
        self._points: list[tuple[int, str, float | None]] = []

    @property
    def active(self) -> str:
        return self.query_one(PaneTabs).active

    @active.setter
    def active(self, tab_id: str) -> None:
        self.query_one(PaneTabs).active = tab_id

    def compose(self) -> ComposeResult:
        with PaneTabs(initial=BUILD):
            with Pane("Build", id=BUILD):
                yield Log(max_lines=BUILD_LOG_MAX_LINES, id="build-log", auto_scroll=True)
            yield Pane("Checks", id=CHECKS)
            yield Pane("NCU", id=NCU)
            yield Pane("Chart", id=CHART)

    @on(PaneTabs.TabActivated)
    async def _tab_shown(self, event: PaneTabs.TabActivated) -> None:
        pane = event.pane
        if pane.id in (CHECKS, NCU, CHART) and not pane.children:
            await pane.mount(self._build(pane.id))

    def _build(self, tab_id: str) -> Widget:
        """The widget of a tab shown for the first time, filled from what the pane holds."""
        if tab_id == CHART:
            return Static(self._chart_text(), id="speedup-chart")
        from textual.widgets import DataTable

        if tab_id == CHECKS:
            table: DataTable[str] = DataTable(id="checks-table", zebra_stripes=True, cursor_type="row")
            table.add_columns("item", "result", "detail", "note")
            self._fill_checks(table)
        else:
            table = DataTable(id="ncu-table", zebra_stripes=True, cursor_type="row")
            table.add_columns("kernel", "metric", "value", "unit")
            self._fill_ncu(table)
        return table

    def _built(self, selector: str) -> Any:
        """The tab's widget, or None while its tab has never been shown."""
        found = self.query(selector)
        return found.first() if found else None

    # ------------------------------------------------------------------ filling

    def clear_build(self) -> None:
        self.query_one("#build-log", Log).clear()

    def append_build(self, lines: Iterable[str]) -> None:
        self.query_one("#build-log", Log).write_lines([scrub(line) for line in lines])

    def show_result(self, result: dict[str, Any] | None, replace_log: bool) -> None:
        self._result = result
        table = self._built("#checks-table")
        if table is not None:
            self._fill_checks(table)
        if result and replace_log:
            self.clear_build()
            self.append_build(build_log_lines(result) or ["(no build output recorded)"])

    def _fill_checks(self, table: DataTable[str]) -> None:
        table.clear()
        for row in check_rows(self._result) if self._result else []:
            table.add_row(*row)

    def show_profile(self, profile: dict[str, Any] | None) -> None:
        self._profile = profile
        table = self._built("#ncu-table")
        if table is not None:
            self._fill_ncu(table)

    def _fill_ncu(self, table: DataTable[str]) -> None:
        table.clear()
        rows = ncu_rows(self._profile)
        for row in rows:
            table.add_row(*row)
        if not rows:
            kind = (self._profile or {}).get("kind", "none")
            table.add_row("—", f"not profiled ({kind})", "", "")

    def show_chart(self, points: Sequence[tuple[int, str, float | None]]) -> None:
        self._points = list(points)
        chart = self._built("#speedup-chart")
        if chart is not None:
            chart.update(self._chart_text())

    def _chart_text(self) -> str:
        width = max(8, min(40, self.size.width - 30))  # bar + number + status fit the pane: no wrapping
        return speedup_chart(self._points, width=width)
