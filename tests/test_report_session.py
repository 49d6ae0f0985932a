"""``cudaforge report`` over a whole session (engine/batch/report.py, report_branches.py, report_shapes.py;
ARCHITECTURE.md §8 "The report"): every branch once, a leaderboard of their bests with intervals, the
best kernel at each tested shape, and the two defects (a legend over a point, ncu clocks on a CPU page).

Records are committed to real session repos and the page is rendered and parsed back as HTML.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from engine.batch.report import gather, render_html, speedup_figure
from sessions import ranking
from sessions.repo import SessionRepo
from tests.loop_helpers import RELU_KERNEL, RELU_TASK, new_session


def _eval(ms: float, p25: float, p75: float, interval: tuple[float, float] | None = None,
          device: str = "cuda", ref_ms: float = 0.2, **extra: Any) -> dict[str, Any]:  # fmt: skip
    stats = {"n": 100, "median_ms": ms, "p25_ms": p25, "p75_ms": p75, "iqr_ms": p75 - p25,
             "min_ms": p25, "max_ms": p75, "mean_ms": ms, "std_ms": 0.0}  # fmt: skip
    reference = {**stats, "median_ms": ref_ms, "p25_ms": ref_ms, "p75_ms": ref_ms}
    timing: dict[str, Any] = {"method": "cuda-events", "candidate": stats, "reference": reference}
    if interval is not None:
        timing["speedup_interval"] = list(interval)
    env = (
        {"device": "cuda", "gpu": "NVIDIA H200", "driver": "570.1"} if device == "cuda" else {"device": "cpu"}
    )
    return {
        "status": "correct",
        "speedup": ref_ms / ms,
        "timing": timing,
        "env": env,
        "device": device,
        **extra,
    }


FAILED = {"status": "compile_error", "speedup": None, "messages": ["error: expected ';'"]}


def _record(
    session: SessionRepo, result: dict[str, Any], branch: str | None = None, seed: bool = False
) -> int:
    source = RELU_KERNEL.read_text() + f"\n# {len(session.all_iterations())}\n"
    return session.record_iteration(kernel_source=source, eval_result=result, phase="seed" if seed else "optimize",
                                    branch=branch)  # fmt: skip


class Page(HTMLParser):
    """The page as a list of ("h2" | "h3" | "p" | "table", content) in document order; a table is its rows
    of cell texts."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.items: list[tuple[str, Any]] = []
        self._text: list[str] | None = None
        self._rows: list[list[str]] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._rows = []
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th", "h2", "h3", "p"):
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._rows is not None and self._text is not None:
            self._rows[-1].append("".join(self._text).strip())
            self._text = None
        elif tag in ("h2", "h3", "p") and self._text is not None:
            self.items.append((tag, "".join(self._text).strip()))
            self._text = None
        elif tag == "table" and self._rows is not None:
            self.items.append(("table", self._rows))
            self._rows = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def table_after(self, kind: str, text: str) -> list[list[str]]:
        """The first table after the first ``kind`` item starting with ``text``."""
        start = next(i for i, (k, v) in enumerate(self.items) if k == kind and v.startswith(text))
        return next(v for k, v in self.items[start:] if k == "table")

    def table_headed(self, first: str) -> list[list[str]]:
        return next(v for k, v in self.items if k == "table" and v and v[0][0] == first)

    def texts(self, kind: str) -> list[str]:
        return [v for k, v in self.items if k == kind]


@pytest.fixture
def explored(tmp_path: Path) -> SessionRepo:
    """main: 0 (seed), 1, 2, 3 (slower beyond spread than side's best); side, from 1: 2, 3 (the session
    best, 0.060 ms); twin, from side's 2: 3 (0.061 ms, within side's spread)."""
    session = new_session(tmp_path)
    _record(session, _eval(0.100, 0.095, 0.105), seed=True)  # an old record: no interval
    _record(session, _eval(0.090, 0.088, 0.092, interval=(2.18, 2.26)))
    _record(session, FAILED)
    _record(session, _eval(0.080, 0.078, 0.082, interval=(2.45, 2.55)))
    session.branch_from(1, "side")
    _record(session, _eval(0.085, 0.083, 0.087, interval=(2.30, 2.40)), branch="side")
    _record(session, _eval(0.060, 0.058, 0.062, interval=(3.25, 3.40)), branch="side")
    session.branch_from(2, "twin", branch="side")
    _record(session, _eval(0.061, 0.059, 0.063, interval=(3.20, 3.35)), branch="twin")
    yield session
    session.close()


def test_every_branch_is_shown_and_each_iteration_once_under_the_branch_it_was_made_on(
    explored: SessionRepo,
) -> None:
    page = Page(render_html(gather(explored)))
    assert [h for h in page.texts("h3") if h.startswith("Branch ")] == [
        "Branch main",
        "Branch side",
        "Branch twin",
    ]
    shown = {
        name: [row[0] for row in page.table_after("h3", f"Branch {name}")[1:]]
        for name in ("main", "side", "twin")
    }
    assert shown == {"main": ["0", "1", "2", "3"], "side": ["2", "3"], "twin": ["3"]}
    assert sum(len(v) for v in shown.values()) == len(explored.all_iterations())  # each commit once
    lines = page.texts("p")
    assert "branched at iteration 1 (shown under main); 2 iterations of its own." in lines
    assert "branched at iteration 2 (shown under side); 1 iteration of its own." in lines


def test_the_leaderboard_gives_each_branchs_best_with_its_interval_and_says_within_spread(
    explored: SessionRepo,
) -> None:
    best, holder = explored.session_best()
    assert (best.number, holder) == (3, "side")
    assert (
        gather(explored).branch == "side" and gather(explored, "main").best.number == 3
    )  # detailed: the holder's
    page = Page(render_html(gather(explored)))
    board = page.table_headed("branch")
    assert board[0] == ["branch", "best", "speedup (interval)", "kernel time (p25–p75)", "rounds",
                        "against the session best"]  # fmt: skip
    rows = {row[0]: row for row in board[1:]}
    assert [row[0] for row in board[1:]] == ["side", "twin", "main"]  # the session best first
    assert rows["side"] == ["side", "#3", "3.33× ±0.08", "0.06 ms (p25–p75 0.058–0.062)", "2", "session best"]
    assert rows["twin"][1:3] == ["#3", ranking.interval_label(0.2 / 0.061, 3.20, 3.35)]
    assert rows["twin"][5] == "within spread"  # ranks as neither faster nor slower than side's #3
    assert rows["main"][1:] == [
        "#3",
        "2.50× ±0.05",
        "0.08 ms (p25–p75 0.078–0.082)",
        "4",
        "slower beyond spread",
    ]


def test_a_record_without_an_interval_shows_the_bare_speedup_and_the_rule_is_explained(
    tmp_path: Path,
) -> None:
    session = new_session(tmp_path)
    _record(session, _eval(0.100, 0.095, 0.105), seed=True)
    _record(session, _eval(0.050, 0.049, 0.051, interval=(3.9, 4.1)))
    page = Page(render_html(gather(session)))
    session.close()
    rows = page.table_after("h3", "Branch main")
    speedup = rows[0].index("speedup (eager; vs torch.compile)")
    assert [row[speedup] for row in rows[1:]] == ["2.00×", "4.00× ±0.10"]
    assert page.table_headed("branch")[1][2] == "4.00× ±0.10"
    rule = [p for p in page.texts("p") if p.startswith("Ranked by kernel time. How best is chosen:")]
    assert len(rule) == 1
    assert "beating the current best beyond both timings' spread" in rule[0]
    assert "winning a back-to-back re-timing" in rule[0]


def test_the_best_kernel_is_shown_at_each_shape_it_was_tested_at(tmp_path: Path) -> None:
    shapes = {"sizes": {"N": 4096}, "note": "", "variants": [
        {"name": "half", "sizes": {"N": 2048}, "status": "correct", "message": "", "speedup": 3.2,
         "speedup_interval": [3.0, 3.5], "kernel_ms": 0.03},
        {"name": "odd", "sizes": {"N": 4095}, "status": "incorrect", "message": "max abs error 1.0 at [7]"},
        {"name": "odd-half", "sizes": {"N": 2047}, "status": "correct", "message": ""},  # an older record
    ]}  # fmt: skip
    session = new_session(tmp_path)
    _record(session, _eval(0.100, 0.095, 0.105, shapes={"sizes": {}, "variants": [], "note": "x"}), seed=True)
    page = Page(render_html(gather(session)))
    assert "No per-shape results recorded for iteration 0: x." in page.texts("p")
    _record(session, _eval(0.050, 0.049, 0.051, interval=(3.9, 4.1), shapes=shapes))
    page = Page(render_html(gather(session)))
    session.close()
    assert page.table_after("h2", "Shapes") == [
        ["shape", "sizes", "result", "speedup"],
        ["the task's own", "N=4096", "correct", "4.00× ±0.10"],
        ["half", "N=2048", "correct", "3.20× ±0.30"],
        ["odd", "N=4095", "incorrect max abs error 1.0 at [7]", "not timed (correctness only)"],
        ["odd-half", "N=2047", "correct", "not timed (correctness only)"],
    ]


def test_the_speedup_chart_plots_every_branch_and_its_legend_covers_no_point(explored: SessionRepo) -> None:
    # points in every corner of the axes: whatever place inside them the legend took, it would cover one
    for k in range(24):
        ms = (0.5, 0.04, 0.1, 0.03, 0.06, 0.2)[k % 6]
        _record(explored, _eval(ms, ms * 0.98, ms * 1.02) if k % 7 != 5 else FAILED, branch="main")
    figure = speedup_figure(gather(explored))
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    [axes] = figure.axes
    legend = axes.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    for name in ("main", "side", "twin"):
        assert any(label.startswith(name) for label in labels), labels
    box = legend.get_window_extent(renderer)
    points = [
        axes.transData.transform(line.get_xydata())
        for line in axes.lines
        if line.get_marker() not in ("", "None")
    ]
    points += [c.get_offset_transform().transform(c.get_offsets()) for c in axes.collections]
    drawn = [(x, y) for block in points for x, y in block]
    assert len(drawn) >= 20
    covered = [(x, y) for x, y in drawn if box.x0 - 4 <= x <= box.x1 + 4 and box.y0 - 4 <= y <= box.y1 + 4]
    assert not covered, (box, covered)
    import matplotlib.pyplot as plt

    plt.close(figure)


def test_only_a_gpu_session_mentions_ncu_and_its_clocks(tmp_path: Path) -> None:
    for device in ("cpu", "cuda"):
        session = SessionRepo.create(tmp_path / device, RELU_TASK, name=device)
        _record(session, _eval(0.100, 0.095, 0.105, device=device), seed=True)
        _record(session, _eval(0.050, 0.049, 0.051, device=device))
        text = render_html(gather(session)).lower()
        session.close()
        mentions = [word for word in ("ncu", "clock", "nsight") if word in text]
        if device == "cpu":
            assert mentions == [], mentions
            assert "evaluated on the cpu" in text
        else:
            assert "ncu ran with --clock-control none" in text and "nvidia h200" in text
