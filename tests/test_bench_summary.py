"""The bench's set statistics on a hand-built set, every number worked out by hand below."""

from __future__ import annotations

import collections
import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest

from engine.batch.statistics import TaskRow, fast_p, format_table, set_statistics, write_csv, write_json
from engine.bench.compile_baseline import speedup_vs_compile
from engine.bench.results import best_by_round


def row(
    task: str,
    status: str,
    correct: bool,
    speedup: float | None,
    tokens: int,
    cost: float | None,
    minutes: float,
    device: str,
) -> TaskRow:
    return TaskRow(task, status, correct, speedup, 3, tokens, cost, minutes, device)


# Six tasks: four correct (2.0x, 1.0x, 4.0x, 1.25x), one finished without a correct kernel, one never run.
ROWS = [
    row("a", "done", True, 2.0, 100, 0.10, 6.0, "cuda"),
    row("b", "done", True, 1.0, 200, 0.20, 12.0, "cuda"),
    row("c", "done", True, 4.0, 300, None, 30.0, "cpu"),
    row("d", "done", False, None, 50, 0.05, 30.0, "cpu"),
    row("e", "pending", False, None, 0, None, 0.0, "cpu"),
    row("f", "unfinished", True, 1.25, 400, 0.30, 30.0, "cpu"),
]


def test_hand_checked_statistics() -> None:
    s = set_statistics(ROWS)
    assert s["tasks"] == 6 and s["correct"] == 4
    assert s["correct_pct"] == pytest.approx(100 * 4 / 6)  # 66.67 %: the denominator is every task
    # over the correct tasks only: (2 + 1 + 4 + 1.25) / 4 = 8.25 / 4
    assert s["mean_speedup"] == pytest.approx(2.0625)
    # sorted 1.0, 1.25, 2.0, 4.0 → middle pair (1.25 + 2.0) / 2
    assert s["median_speedup"] == pytest.approx(1.625)
    # (2 · 1 · 4 · 1.25) ** (1/4) = 10 ** 0.25
    assert s["geomean_speedup"] == pytest.approx(10**0.25)
    # KernelBench fast_p: correct AND speedup > p, over all 6 tasks (strictly greater)
    assert s["fast_0.0"] == pytest.approx(4 / 6)  # a, b, c, f
    assert s["fast_1.0"] == pytest.approx(3 / 6)  # b's 1.0x is not > 1.0
    assert s["fast_1.2"] == pytest.approx(3 / 6)  # f's 1.25x still counts
    assert s["fast_1.5"] == pytest.approx(2 / 6)  # a, c
    assert s["fast_2.0"] == pytest.approx(1 / 6)  # only c: a's 2.0x is not > 2.0
    assert s["total_tokens"] == 1050  # 100 + 200 + 300 + 50 + 0 + 400
    assert s["total_cost_usd"] == pytest.approx(0.65)  # 0.10 + 0.20 + 0.05 + 0.30 (c unpriced)
    assert s["cost_unknown_tasks"] == 1  # c; e never ran, so it has no cost to miss
    assert s["gpu_hours"] == pytest.approx(0.3)  # (6 + 12) cuda minutes / 60
    assert s["total_minutes"] == pytest.approx(108.0)


def test_fast_p_never_counts_wrong_or_unmeasured_kernels() -> None:
    rows = [row("w", "done", False, 9.0, 0, 0.0, 0, "cpu"), row("u", "done", True, None, 0, 0.0, 0, "cpu")]
    assert fast_p(rows, 0.0) == 0.0  # a wrong 9x kernel and a correct one without a timing
    assert set_statistics(rows)["correct_pct"] == 50.0


def test_empty_and_all_wrong_sets_have_no_speedup_statistics() -> None:
    assert set_statistics([])["correct_pct"] == 0.0
    s = set_statistics([row("d", "done", False, None, 5, 0.0, 1.0, "cpu")])
    assert s["mean_speedup"] is None and s["median_speedup"] is None and s["geomean_speedup"] is None
    assert s["fast_0.0"] == 0.0


def test_csv_and_json_hold_every_task_and_the_set(tmp_path: Path) -> None:
    write_csv(ROWS, tmp_path / "summary.csv")
    write_json(ROWS, tmp_path / "summary.json")
    with (tmp_path / "summary.csv").open() as handle:
        lines = list(csv.DictReader(handle))
    assert [r["task"] for r in lines] == ["a", "b", "c", "d", "e", "f"]
    assert lines[2]["cost_usd"] == "" and lines[3]["best_speedup"] == ""  # unknowns are empty cells
    assert float(lines[5]["best_speedup"]) == 1.25
    data = json.loads((tmp_path / "summary.json").read_text())
    assert [t["task"] for t in data["tasks"]] == ["a", "b", "c", "d", "e", "f"]
    assert data["tasks"][2]["cost_usd"] is None
    assert math.isclose(data["set"]["fast_1.5"], 2 / 6)
    assert not list(tmp_path.glob("*.tmp"))


def test_table_shows_rows_and_set_line() -> None:
    text = format_table(ROWS)
    lines = text.splitlines()
    assert lines[0].split() == ["task", "status", "best", "rounds", "tokens", "cost", "min"]
    assert lines[1].split()[:3] == ["a", "done", "2.00x"]
    assert "done (no correct kernel)" in lines[4]
    assert "correct 4/6 (66.7%)" in text and "geomean 1.78" in text
    assert (
        "fast_2.0=0.17" in text
        and "cost unknown ($0.6500 priced; 1 task(s) unpriced)" in text
        and "GPU-hours 0.300" in text
    )


def with_compile(r: TaskRow, compile_speedup: float | None, vs: float | None) -> TaskRow:
    return dataclasses.replace(r, compile_speedup=compile_speedup, speedup_vs_compile=vs)


def test_speedups_against_torch_compile_are_over_every_task_like_fast_p() -> None:
    # a: kernel 2x eager, compile 4x eager → 0.5x vs compile; b: 1x eager, compile 0.5x → 2x; c: 4x, 1x → 4x;
    # d (no correct kernel) and e (never ran) have none; f's compile baseline failed (None).
    rows = [
        with_compile(ROWS[0], 4.0, 0.5),
        with_compile(ROWS[1], 0.5, 2.0),
        with_compile(ROWS[2], 1.0, 4.0),
        with_compile(ROWS[3], 2.0, None),
        ROWS[4],
        ROWS[5],
    ]
    s = set_statistics(rows)
    assert s["vs_compile_tasks"] == 3
    assert s["vs_compile_mean"] == pytest.approx(6.5 / 3)
    assert s["vs_compile_median"] == pytest.approx(2.0)
    assert s["vs_compile_geomean"] == pytest.approx(4.0 ** (1 / 3))  # (0.5 · 2 · 4) ** (1/3)
    assert s["vs_compile_fast_1.0"] == pytest.approx(2 / 6)  # b and c, over all six tasks
    text = format_table(rows)
    assert text.splitlines()[0].split()[-3:] == ["compile", "vs", "compile"]
    assert "against torch.compile (3 task(s)): mean 2.17 · median 2.00 · geomean 1.59 · fast_1.0 0.33" in text
    assert "vs_compile_mean" not in set_statistics(ROWS)  # no baseline measured: no such keys


def test_speedup_vs_compile_multiplies_the_two_side_by_side_ratios() -> None:
    baseline = {"eager_ms": 2.0, "compiled_ms": 0.5, "compiled_matches": True}
    # the kernel is 3x eager; compiled is 4x eager; so the kernel is 3 · 0.5 / 2 = 0.75x compiled
    assert speedup_vs_compile(3.0, baseline) == pytest.approx(0.75)
    assert speedup_vs_compile(None, baseline) is None
    assert speedup_vs_compile(3.0, {**baseline, "compiled_matches": False}) is None  # a wrong baseline
    assert speedup_vs_compile(3.0, None) is None


def test_best_by_round_carries_the_best_so_far() -> None:
    Item = collections.namedtuple("Item", "number correct speedup")
    history = [Item(0, False, None), Item(1, True, 1.5), Item(2, True, 1.2), Item(4, True, 2.5)]
    assert best_by_round(history) == (None, 1.5, 1.5, 1.5, 2.5)  # round 3 is missing: carried forward
    assert best_by_round([]) == ()


def test_csv_leaves_the_per_round_curve_to_the_json(tmp_path: Path) -> None:
    rows = [dataclasses.replace(ROWS[0], best_by_round=(None, 1.5, 2.0))]
    write_csv(rows, tmp_path / "s.csv")
    write_json(rows, tmp_path / "s.json")
    assert "best_by_round" not in (tmp_path / "s.csv").read_text().splitlines()[0]
    assert json.loads((tmp_path / "s.json").read_text())["tasks"][0]["best_by_round"] == [None, 1.5, 2.0]


def test_the_best_kernels_shapes_stand_beside_its_speedup_when_checked() -> None:
    import dataclasses

    rows = [dataclasses.replace(ROWS[0], best_shapes="3/3"), dataclasses.replace(ROWS[1], best_shapes="")]
    lines = format_table(rows).splitlines()
    assert lines[0].split()[:4] == ["task", "status", "best", "shapes"]
    assert lines[1].split()[3] == "3/3" and lines[2].split()[3] == "-"
    assert "shapes" not in format_table(ROWS).splitlines()[0]  # not checked anywhere: no column


def test_an_explored_set_says_its_width_and_each_best_kernels_branch(tmp_path: Path) -> None:
    explored = [
        dataclasses.replace(
            r, explore_width=2, explore_beam=1, best_branch="explore/0-2" if r.correct else ""
        )
        for r in ROWS
    ]
    s = set_statistics(explored)
    assert s["explore_width"] == 2 and s["explore_beam"] == 1
    lines = format_table(explored).splitlines()
    assert lines[0].split()[:4] == ["task", "status", "best", "branch"]
    assert lines[1].split()[:4] == ["a", "done", "2.00x", "explore/0-2"] and lines[5].split()[3] == "-"
    assert "explored: width 2, beam 1 from each task's seed" in format_table(explored)
    write_csv(explored, tmp_path / "x.csv")
    write_json(explored, tmp_path / "x.json")
    assert "best_branch" in (tmp_path / "x.csv").read_text().splitlines()[0]
    assert json.loads((tmp_path / "x.json").read_text())["tasks"][0]["best_branch"] == "explore/0-2"
    # a bench that did not explore: no such column, key or line, as before --explore existed
    write_csv(ROWS, tmp_path / "s.csv")
    write_json(ROWS, tmp_path / "s.json")
    assert "branch" not in (tmp_path / "s.csv").read_text().splitlines()[0]
    assert "explore_width" not in json.loads((tmp_path / "s.json").read_text())["tasks"][0]
    assert "explore_width" not in set_statistics(ROWS) and "explored" not in format_table(ROWS)
