"""The evalset's PNG: verdicts, the speedup distribution and, when measured, the own-kernel share.

Drawn like the bench's plots (:mod:`engine.batch.plots`): matplotlib's file-only Agg backend, a
pure function of the summary rows (so it can be redrawn from ``summary.json``), and without
matplotlib the run says how to get it and goes on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from engine.batch.plots import INSTALL_HINT  # noqa: F401  (re-exported for the CLI)
from engine.eval.result import OUTCOMES
from engine.evalset.summary import PairRow

PLOT = "evalset.png"


def write_plot(rows: Sequence[PairRow], out: Path) -> Path:
    """Write ``OUT/evalset.png``; raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    shares = [r.kernel_share for r in rows if r.kernel_share is not None]
    panels = 3 if shares else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), dpi=110)

    counts = Counter(r.status for r in rows)
    order = [s for s in (*OUTCOMES, "pending") if counts.get(s)]
    ax = axes[0]
    ax.bar(
        order,
        [counts[s] for s in order],
        color=["C2" if s == "correct" else "grey" if s in ("pending", "harness_error") else "C3" for s in order],
    )
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_ylabel("kernels")
    ax.set_title(f"Verdicts: {counts.get('correct', 0)} correct of {len(rows)}")

    ax = axes[1]
    speedups = [r.speedup for r in rows if r.correct and r.speedup]
    if speedups:
        low, high = min([*speedups, 0.5]), max([*speedups, 2.0])
        bins = [low * (high / low) ** (i / 20) for i in range(21)]
        ax.hist(speedups, bins=bins, alpha=0.8)
        ax.set_xscale("log")
        label = FuncFormatter(lambda value, _pos: f"{value:g}x")
        ax.xaxis.set_major_formatter(label)
        ax.xaxis.set_minor_formatter(label)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
    else:
        ax.text(0.5, 0.5, "no timed correct kernel", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("speedup over the reference (log scale)")
    ax.set_ylabel("kernels")
    ax.set_title("Speedup of the correct kernels")

    if shares:
        ax = axes[2]
        ax.hist(shares, bins=[i / 10 for i in range(11)], alpha=0.8, color="C1")
        ax.set_xlim(0, 1)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("own-kernel share of device time")
        ax.set_ylabel("kernels")
        ax.set_title(f"Own-kernel share ({len(shares)} measured)")

    fig.tight_layout()
    path = out / PLOT
    fig.savefig(path)
    plt.close(fig)
    return path
