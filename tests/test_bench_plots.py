"""The bench's PNG plots: the numbers behind the per-round curve by hand, and real PNG files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.batch.plots import DISTRIBUTION, PER_ROUND, round_series, write_plots
from engine.batch.statistics import TaskRow

matplotlib = pytest.importorskip("matplotlib")


def row(name: str, curve: tuple[float | None, ...], vs_compile: float | None = None) -> TaskRow:
    best = max((v for v in curve if v is not None), default=None)
    return TaskRow(
        name, "done", best is not None, best, len(curve) - 1, 0, 0.0, 1.0,
        speedup_vs_compile=vs_compile, best_by_round=curve,
    )  # fmt: skip


ROWS = [
    row("a", (None, 2.0, 2.0)),  # correct from round 1
    row("b", (0.5, 0.5, 8.0), vs_compile=1.5),
    row("c", (None,)),  # finished after the seed without a correct kernel
    row("d", ()),  # never ran
]


def test_round_series_by_hand() -> None:
    series = round_series(ROWS)
    assert [n for n, _, _ in series] == [0, 1, 2]
    # round 0: only b (0.5) is correct → geomean 0.5, 1 of 4 tasks
    assert series[0][1] == pytest.approx(0.5) and series[0][2] == pytest.approx(0.25)
    # round 1: a 2.0 and b 0.5 → sqrt(1.0) = 1.0, 2 of 4; c stays at its last round (None)
    assert series[1][1] == pytest.approx(1.0) and series[1][2] == pytest.approx(0.5)
    # round 2: a 2.0 and b 8.0 → sqrt(16) = 4
    assert series[2][1] == pytest.approx(math.sqrt(16.0)) and series[2][2] == pytest.approx(0.5)


def test_plots_are_png_images(tmp_path: Path) -> None:
    from matplotlib.image import imread

    written = write_plots(ROWS, tmp_path)
    assert [p.name for p in written] == [DISTRIBUTION, PER_ROUND]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _channels = imread(path).shape
        assert width > 400 and height > 200


def test_plots_of_a_set_without_a_correct_kernel(tmp_path: Path) -> None:
    written = write_plots([row("c", (None, None))], tmp_path)
    assert all(p.stat().st_size > 1000 for p in written)
