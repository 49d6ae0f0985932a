"""The output pane: build log (streamed), checks and timing, NCU metrics, and the speedup chart."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Log, Static, TabbedContent, TabPane

from tui.model import build_log_lines, check_rows, ncu_rows, speedup_chart

BUILD_LOG_MAX_LINES = 5000


class OutputPane(Vertical):
    DEFAULT_CSS = """
    OutputPane { height: 1fr; }
    OutputPane > TabbedContent { height: 1fr; }
    OutputPane #speedup-chart { padding: 0 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    @property
    def active(self) -> str:
        return self.query_one(TabbedContent).active

    @active.setter
    def active(self, tab_id: str) -> None:
        self.query_one(TabbedContent).active = tab_id

    def compose(self) -> ComposeResult:
        with TabbedContent():
            with TabPane("Build", id="tab-build"):
                yield Log(max_lines=BUILD_LOG_MAX_LINES, id="build-log", auto_scroll=True)
            with TabPane("Checks", id="tab-checks"):
                yield DataTable(id="checks-table", zebra_stripes=True, cursor_type="row")
            with TabPane("NCU", id="tab-ncu"):
                yield DataTable(id="ncu-table", zebra_stripes=True, cursor_type="row")
            with TabPane("Chart", id="tab-chart"):
                yield Static("no iterations yet", id="speedup-chart")

    def on_mount(self) -> None:
        self.query_one("#checks-table", DataTable).add_columns("item", "result", "detail", "note")
        self.query_one("#ncu-table", DataTable).add_columns("kernel", "metric", "value", "unit")

    # ------------------------------------------------------------------ filling

    def clear_build(self) -> None:
        self.query_one("#build-log", Log).clear()

    def append_build(self, lines: Iterable[str]) -> None:
        self.query_one("#build-log", Log).write_lines(list(lines))

    def show_result(self, result: dict[str, Any] | None, replace_log: bool) -> None:
        table = self.query_one("#checks-table", DataTable)
        table.clear()
        if result:
            for row in check_rows(result):
                table.add_row(*row)
            if replace_log:
                self.clear_build()
                self.append_build(build_log_lines(result) or ["(no build output recorded)"])

    def show_profile(self, profile: dict[str, Any] | None) -> None:
        table = self.query_one("#ncu-table", DataTable)
        table.clear()
        rows = ncu_rows(profile)
        for row in rows:
            table.add_row(*row)
        if not rows:
            kind = (profile or {}).get("kind", "none")
            table.add_row("—", f"not profiled ({kind})", "", "")

    def show_chart(self, points: Sequence[tuple[int, str, float | None]]) -> None:
        width = max(8, min(40, self.size.width - 30))  # bar + number + status fit the pane: no wrapping
        self.query_one("#speedup-chart", Static).update(speedup_chart(points, width=width))
