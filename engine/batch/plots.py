"""The bench's two PNG plots: the distribution of best speedups, and the best speedup per round.

Drawn with matplotlib (the ``plots`` extra) on its file-only Agg backend, so they work over SSH
with no display. Both are pure functions of the summary rows, which makes them reproducible from
``summary.json`` alone. Without matplotlib the bench says how to get the plots and goes on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from engine.batch.statistics import TaskRow

DISTRIBUTION = "speedup_distribution.png"
PER_ROUND = "best_by_round.png"
INSTALL_HINT = "plots need matplotlib: pip install 'cudaforge[plots]'"


def round_series(rows: Sequence[TaskRow]) -> list[tuple[int, float | None, float]]:
    """Per round: geometric mean of the best-so-far over tasks correct by then, and the fraction of
    *all* tasks correct by then (a task stays at its last round's value after it finished)."""
    longest = max((len(r.best_by_round) for r in rows), default=0)
    series = []
    for number in range(longest):
        values = []
        for r in rows:
            if not r.best_by_round:
                continue
            value = r.best_by_round[min(number, len(r.best_by_round) - 1)]
            if value is not None and value > 0:
                values.append(value)
        geomean = math.exp(statistics.fmean(math.log(v) for v in values)) if values else None
        series.append((number, geomean, len(values) / len(rows) if rows else 0.0))
    return series


def write_plots(rows: Sequence[TaskRow], out: Path) -> list[Path]:
    """Write both PNGs into ``out``; returns their paths. Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    written = []
    speedups = [r.best_speedup for r in rows if r.correct and r.best_speedup]
    vs_compile = [r.speedup_vs_compile for r in rows if r.speedup_vs_compile]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    if speedups:
        low = min([*speedups, *vs_compile, 0.5])
        high = max([*speedups, *vs_compile, 2.0])
        bins = [low * (high / low) ** (i / 20) for i in range(21)]
        ax.hist(speedups, bins=bins, alpha=0.75, label="vs eager PyTorch")
        if vs_compile:
            ax.hist(vs_compile, bins=bins, alpha=0.6, label="vs torch.compile")
        ax.set_xscale("log")
        label = FuncFormatter(lambda value, _pos: f"{value:g}x")
        ax.xaxis.set_major_formatter(label)
        ax.xaxis.set_minor_formatter(label)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no correct kernel", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("best speedup (log scale)")
    ax.set_ylabel("tasks")
    ax.set_title(f"Best speedup per task: {len(speedups)} correct of {len(rows)}")
    fig.tight_layout()
    written.append(out / DISTRIBUTION)
    fig.savefig(written[-1])
    plt.close(fig)

    series = round_series(rows)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for r in rows:
        points = [(i, v) for i, v in enumerate(r.best_by_round) if v is not None]
        if points:
            ax.plot(*zip(*points, strict=True), color="grey", alpha=0.35, linewidth=1)
    means = [(n, g) for n, g, _ in series if g is not None]
    if means:
        ax.plot(
            *zip(*means, strict=True),
            color="C0",
            linewidth=2.5,
            marker="o",
            label="geomean over correct tasks",
        )
        ax.legend(loc="lower right")
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("best speedup so far")
    share = ax.twinx()
    share.plot([n for n, _, _ in series], [100 * f for _, _, f in series], color="C2", linestyle=":")
    share.set_ylabel("% of tasks correct (dotted)")
    share.set_ylim(0, 105)
    ax.set_title("Best speedup by round")
    fig.tight_layout()
    written.append(out / PER_ROUND)
    fig.savefig(written[-1])
    plt.close(fig)
    return written
