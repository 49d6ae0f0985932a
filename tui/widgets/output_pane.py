"""The output pane: build log (streamed), checks and timing, NCU metrics, and the speedup chart.

The build log wraps on word boundaries, and the first compiler error line is pinned above it in
full, so the error is readable in a 40-column pane without scrolling sideways or back. The NCU tab
is the Judge's table (the paper's 24 metrics first, ``tui.model.ncu_table``) with the values
before the names, so a narrow pane shows the numbers at once (ARCHITECTURE.md §8).

Only the build log exists from the start. The checks table, the NCU table and the chart are built
the first time their tab is shown, from the last result, profile and history handed to the pane:
two tables and a chart nobody is looking at were ~6 % of the work before the workbench's first
frame, and many sessions are browsed without ever opening those tabs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import RichLog, Static

from tui.model import (
    NcuTable,
    RooflinePlot,
    build_log_lines,
    check_rows,
    ellipsize,
    first_error_line,
    ncu_table,
    roofline_lines,
    roofline_plot,
    scrub,
    speedup_chart,
)
from tui.widgets import sized_table
from tui.widgets.tabs import Pane, PaneTabs

if TYPE_CHECKING:  # imported with the first table shown
    from textual.widgets import DataTable

BUILD_LOG_MAX_LINES = 5000
CHECK_COLUMNS = ("item", "result", "detail", "note")
BUILD, CHECKS, NCU, CHART, ROOF = "tab-build", "tab-checks", "tab-ncu", "tab-chart", "tab-roofline"
TAB_TITLES = {BUILD: "Build", CHECKS: "Checks", NCU: "NCU", CHART: "Chart", ROOF: "Roofline"}
# each tab's key (bound by tui/screens/workbench_keys.py, drawn in the tab strip): 80×24 and 120×40 alike
OUTPUT_TAB_KEYS = {BUILD: "1", CHECKS: "2", NCU: "3", CHART: "4", ROOF: "5"}


class OutputPane(Vertical):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._result: dict[str, Any] | None = None
        self._profile: dict[str, Any] | None = None
        self._points: list[tuple[int, str, float | None]] = []
        self._others: dict[str, list[tuple[int, str, float | None]]] = {}  # other branches' points
        self._compiled: dict[str, float] = {}  # torch.compile's speedup over eager, per mode
        self._log_lines: list[str] = []  # the build log as plain text (the RichLog keeps rendered strips)
        self._first_error: str | None = None
        self._ncu = NcuTable()  # the NCU tab's rows uncut (the table shows names cut to the width)
        self._ncu_width = 0
        self._plot_rows = 0  # the speedup plot's height its y ticks were chosen for

    @property
    def active(self) -> str:
        return self.query_one(PaneTabs).active

    @active.setter
    def active(self, tab_id: str) -> None:
        self.query_one(PaneTabs).active = tab_id

    def compose(self) -> ComposeResult:
        with PaneTabs(initial=BUILD, keys=OUTPUT_TAB_KEYS):
            with Pane(TAB_TITLES[BUILD], id=BUILD):
                yield Static("", id="build-error", markup=False)
                yield RichLog(  # min_width: RichLog wraps at 78 columns by default, then crops to the pane
                    max_lines=BUILD_LOG_MAX_LINES,
                    id="build-log",
                    wrap=True,
                    markup=False,
                    highlight=False,
                    min_width=20,
                )
            for tab in (CHECKS, NCU, CHART, ROOF):
                yield Pane(TAB_TITLES[tab], id=tab)

    @on(PaneTabs.TabActivated)
    async def _tab_shown(self, event: PaneTabs.TabActivated) -> None:
        pane = event.pane
        if pane.id in (CHECKS, NCU, CHART, ROOF) and not pane.children:
            await pane.mount(self._build(pane.id))
            if pane.id == NCU:
                self._fill_ncu()
            if pane.id == ROOF:
                self._fill_roofline()
            if pane.id == CHART:
                self._draw_plot()

    def _build(self, tab_id: str) -> Widget:
        """The widget of a tab shown for the first time, filled from what the pane holds."""
        if tab_id == CHART:
            from textual_plot import PlotWidget  # with numpy: paid when the chart is first shown

            plot = PlotWidget(id="speedup-plot", allow_pan_and_zoom=False)
            return Vertical(plot, Static(self._chart_text(), id="speedup-chart"), id="speedup-box")
        if tab_id == ROOF:
            from textual_plot import PlotWidget

            roof = PlotWidget(id="roofline-plot", allow_pan_and_zoom=False)
            return Vertical(Static("", id="roofline-text", markup=False), roof, id="roofline-box")
        from textual.widgets import DataTable

        if tab_id == CHECKS:
            table: DataTable[str] = DataTable(id="checks-table", zebra_stripes=True, cursor_type="row")
            table.add_columns(*CHECK_COLUMNS)
            self._fill_checks(table)
            return table
        table = DataTable(id="ncu-table", zebra_stripes=True, cursor_type="row")
        return Vertical(Static("", id="ncu-kernels", markup=False), table, id="ncu-box")

    def _built(self, selector: str) -> Any:
        """The tab's widget, or None while its tab has never been shown."""
        found = self.query(selector)
        return found.first() if found else None

    # ------------------------------------------------------------------ filling

    def clear_build(self) -> None:
        self.query_one("#build-log", RichLog).clear()
        self._log_lines = []
        self._show_first_error(None)

    def append_build(self, lines: Iterable[str]) -> None:
        log = self.query_one("#build-log", RichLog)
        fresh = [scrub(line) for line in lines]
        self._log_lines.extend(fresh)
        del self._log_lines[:-BUILD_LOG_MAX_LINES]
        for line in fresh:
            log.write(Text(line))
        if self._first_error is None:
            self._show_first_error(first_error_line(fresh))

    def build_text(self) -> str:
        """The build log as plain text (what the tab shows, unwrapped)."""
        return "\n".join(self._log_lines)

    def _show_first_error(self, line: str | None) -> None:
        self._first_error = line
        pinned = self.query_one("#build-error", Static)
        pinned.update(f"first error: {line}" if line else "")
        pinned.display = line is not None

    def show_result(self, result: dict[str, Any] | None, replace_log: bool) -> None:
        self._result = result
        table = self._built("#checks-table")
        if table is not None:
            self._fill_checks(table)
        if result and replace_log:
            self.clear_build()
            self.append_build(build_log_lines(result) or ["(no build output recorded)"])

    def _fill_checks(self, table: DataTable[str]) -> None:
        sized_table.fill(table, CHECK_COLUMNS, check_rows(self._result) if self._result else [])

    def show_profile(self, profile: dict[str, Any] | None) -> None:
        self._profile = profile
        if self._built("#ncu-table") is not None:
            self._fill_ncu()
        if self._built("#roofline-plot") is not None:
            self._fill_roofline()

    def _fill_roofline(self) -> None:
        """The Roofline tab: the same lines as the NCU tab's legend, then the plot of the kernels it can
        place (FLOPs counted), or why there is none."""
        kernels = ncu_table(self._profile).kernels
        lines = roofline_lines(self._profile, kernels) or ["not profiled: no roofline for this iteration"]
        placed = roofline_plot(self._profile, kernels)
        if placed is None and self._profile:
            lines.append("no kernel counted FLOPs: nothing to place on the intensity axis (the bar above is its position)")
        self.query_one("#roofline-text", Static).update("\n".join(lines))
        self._draw_roofline(placed)

    def _fill_ncu(self) -> None:
        """The metric table, each name cut with "…" to what the pane's width leaves beside the values
        (filled again when the width changes); ``i`` shows the highlighted row in full."""
        table = self._built("#ncu-table")
        if table is None:
            return
        data: NcuTable = ncu_table(self._profile)
        self._ncu = data
        self._ncu_width = self.size.width
        legend = self.query_one("#ncu-kernels", Static)
        roofline = roofline_lines(self._profile, data.kernels)
        if not data.kernels:
            table.clear(columns=True)
            legend.update("\n".join([f"not profiled ({data.kind})", *roofline]))
            return
        legend.update(
            "\n".join([*(f"K{i} = {name}" for i, name in enumerate(data.kernels, start=1)), *roofline])
        )
        heads = [f"K{i}" for i in range(1, len(data.kernels) + 1)]
        values = [max([cell_len(c), *(cell_len(r[0][k]) for r in data.rows)]) for k, c in enumerate(heads)]
        # the last column ends at the pane's edge: DataTable pads each cell by one on both sides, and 2
        # cells stay for the vertical scrollbar. A name's note follows it where the whole note fits; a
        # name that does not fit ends in "…"; the header says which, and i shows the row in full
        room = self.size.width - sum(w + 2 for w in values) - 2 - 2
        rows, every_note = [], True
        for v, metric, note in data.rows:
            noted = f"{metric}  ({note})" if note else metric
            every_note = every_note and cell_len(noted) <= room
            rows.append((*v, noted if cell_len(noted) <= room or room < 8 else ellipsize(metric, room)))
        head = "metric (note)" if every_note else "metric (i: full)"
        columns = [*heads, head if cell_len(head) <= room else "metric"]
        sized_table.fill(table, columns, rows)

    def on_resize(self) -> None:
        if self._built("#ncu-table") is not None and self.size.width != self._ncu_width:
            self._fill_ncu()
        plot = self._built("#speedup-plot")
        if plot is not None and plot.size.height != self._plot_rows:
            self.call_after_refresh(self._draw_plot)  # the y ticks follow the plot's height

    def full_text(self) -> tuple[str, str] | None:
        """The highlighted NCU or checks row in full (``i``, tui/screens/workbench_keys.py), when that
        tab is shown and has rows."""
        if self.active == NCU and self._ncu.rows:
            table = self._built("#ncu-table")
            values, metric, note = self._ncu.rows[min(table.cursor_row, len(self._ncu.rows) - 1)]
            kernels = [
                f"K{i} = {v}   ({name})"
                for i, (v, name) in enumerate(zip(values, self._ncu.kernels, strict=True), 1)
            ]
            return f"NCU metric {metric}", "\n".join([metric, *kernels, *([note] if note else [])])
        if self.active == CHECKS and self._result:
            table = self._built("#checks-table")
            rows = check_rows(self._result)
            if table is not None and rows:
                row = rows[min(table.cursor_row, len(rows) - 1)]
                return f"Check {row[0]}", "\n".join(
                    f"{c}: {v}" for c, v in zip(CHECK_COLUMNS, row, strict=True) if v
                )
        return None

    def _draw_roofline(self, placed: RooflinePlot | None) -> None:
        """The roofline on log-log axes (log10 of FLOP/B and of TFLOP/s): the memory roof rising to the
        ridge, the compute roof flat after it, each placeable kernel marked by its number (K1 → 1)."""
        plot = self._built("#roofline-plot")
        if plot is None:
            return
        plot.display = placed is not None
        if placed is None:
            return
        from textual_plot import HiResMode

        plot.clear()
        intensities = [ai for _, ai, _ in placed.points] + [placed.ridge]
        lo, hi = math.floor(math.log10(min(intensities))) - 1, math.ceil(math.log10(max(intensities))) + 1
        ridge = math.log10(placed.ridge)
        top = math.log10(placed.peak_tflops)
        bandwidth_tbs = placed.peak_bandwidth_gbs / 1000.0
        plot.plot([lo, ridge], [math.log10(bandwidth_tbs) + lo, top], line_style="cyan", hires_mode=HiResMode.BRAILLE)
        plot.plot([ridge, hi], [top, top], line_style="magenta", hires_mode=HiResMode.BRAILLE)
        for label, ai, tflops in placed.points:
            plot.scatter([math.log10(ai)], [math.log10(tflops)], marker=label.removeprefix("K")[:1] or "●",
                         marker_style="bold yellow")  # fmt: skip
        low = min([math.log10(t) for _, _, t in placed.points] + [math.log10(bandwidth_tbs) + lo])
        plot.set_xlimits(lo, hi)
        plot.set_ylimits(math.floor(low) - 0.5, math.ceil(top) + 0.5)
        plot.set_xticks(list(range(lo, hi + 1)))
        plot.set_yticks(list(range(math.floor(low), math.ceil(top) + 1)))
        plot.set_xlabel("log10 FLOP/B")
        plot.set_ylabel("log10 TFLOP/s")

    def show_chart(
        self,
        points: Sequence[tuple[int, str, float | None]],
        others: dict[str, Sequence[tuple[int, str, float | None]]] | None = None,
        compiled: dict[str, float] | None = None,
    ) -> None:
        """The branch's (number, status, speedup) per iteration, the other branches' (drawn faint), and
        where torch.compile of the reference sits on the same scale (eager ÷ compiled, per mode)."""
        self._points = list(points)
        self._others = {name: list(p) for name, p in (others or {}).items()}
        self._compiled = dict(compiled or {})
        chart = self._built("#speedup-chart")
        if chart is not None:
            chart.update(self._chart_text())
            self._draw_plot()

    def _draw_plot(self) -> None:
        """The speedup per iteration: the branch's correct kernels as a line with ● markers, the others
        as ✗ on the axis, the best as ★, other branches faint; 1.0x (eager PyTorch) dotted."""
        plot = self._built("#speedup-plot")
        if plot is None:
            return
        from textual_plot import HiResMode

        plot.clear()
        numbers = [n for n, _, _ in self._points] + [n for p in self._others.values() for n, _, _ in p]
        speedups = [s for _, st, s in self._points if st == "correct" and s is not None]
        speedups += [s for p in self._others.values() for _, st, s in p if st == "correct" and s is not None]
        if not numbers:
            return
        low, high = min(numbers), max(max(numbers), min(numbers) + 1)
        plot.plot([low, high], [1.0, 1.0], line_style="grey42", hires_mode=HiResMode.HALFBLOCK)
        for ratio in self._compiled.values():  # a kernel above this line beats torch.compile too
            plot.plot([low, high], [ratio, ratio], line_style="magenta", hires_mode=HiResMode.HALFBLOCK)
        speedups += list(self._compiled.values())
        for branch_points in self._others.values():
            correct = [(n, s) for n, st, s in branch_points if st == "correct" and s is not None]
            if correct:
                plot.plot(*zip(*correct, strict=True), line_style="grey35", hires_mode=HiResMode.HALFBLOCK)
        correct = [(n, s) for n, st, s in self._points if st == "correct" and s is not None]
        if correct:
            plot.plot(*zip(*correct, strict=True), line_style="cyan", hires_mode=HiResMode.HALFBLOCK)
            plot.scatter(*zip(*correct, strict=True), marker="●", marker_style="cyan")
            best = max(correct, key=lambda p: p[1])
            plot.scatter([best[0]], [best[1]], marker="★", marker_style="bold yellow")
        failed = [n for n, st, _ in self._points if st != "correct"]
        if failed:
            plot.scatter(failed, [0.0] * len(failed), marker="✗", marker_style="red")
        plot.set_xlimits(low - 0.5, high + 0.5)
        plot.set_xticks(list(range(low, high + 1)))  # iterations are whole numbers
        top = max([1.0, *speedups]) * 1.15
        plot.set_ylimits(-0.1 * top, top)  # a row under 0, so a kernel that is not correct sits on 0, above the axis
        from tui.widgets.speedup_axis import SpeedupAxis, speedup_ticks

        plot.set_y_formatter(SpeedupAxis())  # "1.0×", not a bare 1 (tui/widgets/speedup_axis.py)
        plot.set_yticks(speedup_ticks(top, plot.size.height))
        self._plot_rows = plot.size.height
        plot.set_xlabel("iteration")
        plot.set_ylabel("speedup over eager")

    def _chart_text(self) -> str:
        width = max(8, min(40, self.size.width - 30))  # bar + number + status fit the pane: no wrapping
        lines = [speedup_chart(self._points, width=width)]
        for mode, ratio in self._compiled.items():
            lines.append(f"torch.compile ({mode}): {ratio:.2f}x eager — the magenta line")
        return "\n".join(lines)
