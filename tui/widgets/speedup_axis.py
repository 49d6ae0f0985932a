"""The speedup chart's y-axis: ticks a few rows apart, labelled as speedups ("1.0×"), not bare fractions.

textual-plot labels ticks with plain numbers ("0.5", "1") that read as fractions of something; the chart's
scale is speedup over eager PyTorch, so each label says it ("0.5×", "1.0×"). The step is the smallest
round one that leaves two rows per tick on the plot's canvas, so 80×24 reads as well as 120×40
(ARCHITECTURE.md §8). Imported with the chart (textual-plot pulls numpy in).
"""

from __future__ import annotations

from collections.abc import Sequence

from textual_plot.axis_formatter import NumericAxisFormatter

STEPS = (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
MARGINS = 5  # textual-plot's rows above (2) and below (3) its canvas


def speedup_ticks(top: float, plot_rows: int) -> list[float]:
    """Ticks from 0 to ``top`` at a round step, two canvas rows apart at least (a 6-row canvas assumed
    before the plot is laid out); 1.0× among them whenever there is room."""
    canvas = plot_rows - MARGINS if plot_rows > MARGINS else 6
    most = max(2, (canvas + 1) // 2)
    step = next((s for s in STEPS if int(top / s) + 1 <= most), STEPS[-1])
    ticks = [round(step * k, 6) for k in range(int(top / step) + 1)]
    if 1.0 not in ticks and len(ticks) < most and top >= 1.0:
        ticks = sorted([*ticks, 1.0])
    return ticks


class SpeedupAxis(NumericAxisFormatter):
    """Labels as speedups: "0×" where the kernels that are not correct sit, then "0.5×", "1.0×", "2.0×" …"""

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        fine = any(abs(t * 10 - round(t * 10)) > 1e-6 for t in ticks)  # a 0.25 step needs two decimals
        return ["0×" if t == 0 else f"{t:.{2 if fine else 1}f}×" for t in ticks]
