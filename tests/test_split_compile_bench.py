"""benchmarks/split_compile_cpu.py's arithmetic: compile wall from ninja's log, a candidate's total, the summary."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from split_compile_cpu import ninja_compile_seconds, summarize, total  # noqa: E402


def test_compile_wall_spans_the_objects_and_leaves_out_the_link(tmp_path: Path) -> None:
    (tmp_path / ".ninja_log").write_text(
        "# ninja log v7\n"
        "1\t54338\t0\tmain.o\tx\n"
        "4\t102386\t0\tcuda.cuda.o\ty\n"
        "102400\t103900\t0\tcf_ext.so\tz\n"
    )
    assert ninja_compile_seconds(tmp_path) == 102.385
    assert ninja_compile_seconds(tmp_path / "absent") is None


def build(path: str, seconds: float | None, pch: str = "used", ok: bool = True) -> dict:
    return {"path": path, "ok": ok, "pch": pch, "split_skipped": None, "compile_seconds": seconds}


def test_totals_add_a_candidates_extensions_and_refuse_a_failed_one() -> None:
    assert total({"builds": [build("split", 4.0), build("split", 6.5)]}) == 10.5
    assert total({"builds": [build("split", 4.0), build("split", None)]}) is None
    assert total({"builds": [build("stock", 40.0, ok=False)]}) is None
    assert total({"builds": []}) is None
    rows = [
        {"stock": {"builds": [build("stock", 60.0, "")]}, "split": {"builds": [build("split", 10.0)]}},
        {"stock": {"builds": [build("stock", 90.0, "")]}, "split": {"builds": [build("split", 9.0)]}},
        {"stock": {"builds": [build("stock", 50.0, "")]}, "split": {"builds": [build("stock", 50.0, "")]}},
    ]
    summary = summarize(rows)
    assert (
        summary["both_compiled"] == 3
        and summary["split_path_taken"] == 2
        and summary["split_with_header"] == 2
    )
    assert summary["split_fell_back"] == 1 and summary["compared"] == 2  # the fallback is not a split time
    assert summary["stock_compile_s"]["median"] == 60.0 and summary["ratio_median"] == 8.0
    assert summary["ratio_min"] == 6.0
