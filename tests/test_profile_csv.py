"""Parsing ncu's raw and details CSV exports (fixtures in tests/fixtures/ncu, see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.profile.metrics import ARCH_EQUIVALENTS, resolve_metric_set
from engine.profile.ncu_csv import (
    launch_counts,
    parse_details_csv,
    parse_raw_csv,
    parse_raw_launches,
    parse_value,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("201,326,592", 201_326_592),
        ("60,000", 60_000),
        ("101,234.56", 101_234.56),
        ("67.50", 67.5),
        ("0", 0),
        ("1.5e+03", 1500.0),
        ("n/a", None),
        ("", None),
        ("(256, 1, 1)", "(256, 1, 1)"),
        ("CachePreferNone", "CachePreferNone"),
        ("1,2", "1,2"),  # not a thousands-separated number: stays text
    ],
)
def test_parse_value(text: str, value: object) -> None:
    assert parse_value(text) == value


def test_raw_default_set_two_kernels_and_repeat() -> None:
    text = read("synthetic_raw_default_set.csv")
    table = parse_raw_csv(text)
    assert list(table) == ["add_kernel", "sgemm_tiled"]
    add = table["add_kernel"]
    # Every requested metric is there, with its unit from the units row.
    # the synthetic fixture predates the architecture equivalents added to the default set
    assert set(resolve_metric_set("default")) - set(ARCH_EQUIVALENTS.values()) == set(add)
    assert add["dram__bytes.sum"] == (201_326_592, "byte")
    assert add["gpu__time_duration.sum"] == (60_000, "nsecond")  # the LAST launch (ID 2)
    assert add["sm__warps_active.avg.pct_of_peak_sustained_active"] == (74.6, "%")
    assert add["launch__registers_per_thread"] == (16, "register/thread")
    assert add["smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct"] == (None, "%")
    assert table["sgemm_tiled"]["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"] == (
        8_589_934_592,
        "inst",
    )
    assert launch_counts(text) == {"add_kernel": 2, "sgemm_tiled": 1}


def test_raw_repeated_launches_mean() -> None:
    table = parse_raw_csv(read("synthetic_raw_default_set.csv"), repeated="mean")
    assert table["add_kernel"]["gpu__time_duration.sum"] == (61_000.0, "nsecond")  # (62,000 + 60,000) / 2
    assert table["add_kernel"]["sm__warps_active.avg.pct_of_peak_sustained_active"][0] == pytest.approx(74.0)
    assert table["add_kernel"]["smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct"][0] is None
    assert table["sgemm_tiled"]["gpu__time_duration.sum"] == (400_000, "nsecond")
    with pytest.raises(ValueError):
        parse_raw_csv("", repeated="max")  # type: ignore[arg-type]


def test_raw_launch_info_and_tool_lines_ignored() -> None:
    launches = parse_raw_launches(read("synthetic_raw_default_set.csv"))
    assert [(launch.id, launch.kernel) for launch in launches] == [
        ("0", "add_kernel"), ("1", "sgemm_tiled"), ("2", "add_kernel"),
    ]  # fmt: skip
    assert launches[1].info["Grid Size"] == "(128, 128, 1)" and launches[1].info["CC"] == "9.0"
    assert all(not k.startswith("==") for launch in launches for k in launch.metrics)


def test_raw_import_output_without_tool_lines() -> None:
    table = parse_raw_csv(read("synthetic_raw_small_set_import.csv"))
    assert table == {
        "softmax_rows": {
            "gpu__time_duration.sum": (8192, "nsecond"),
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": (14.2, "%"),
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": (21.5, "%"),
            "dram__bytes.sum": (2_097_152, "byte"),
            "sm__warps_active.avg.pct_of_peak_sustained_active": (31.0, "%"),
            "launch__registers_per_thread": (40, "register/thread"),
            "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct": (18.4, "%"),
            "smsp__warp_issue_stalled_barrier_per_warp_active.pct": (27.9, "%"),
        }
    }


def test_raw_without_results() -> None:
    assert parse_raw_csv(read("synthetic_no_kernels.txt")) == {}
    assert parse_raw_csv("") == {}


def test_raw_without_units_row_and_unquoted() -> None:
    text = "ID,Kernel Name,gpu__time_duration.sum\n0,k,1500\n"
    assert parse_raw_csv(text) == {"k": {"gpu__time_duration.sum": (1500, "")}}


def test_details_rule_rows() -> None:
    rules = parse_details_csv(read("synthetic_details.csv"))
    assert [(r.kernel, r.rule) for r in rules] == [
        ("add_kernel", "CPIStall"),
        ("add_kernel", "SOLBottleneck"),
        ("add_kernel", "CPIStall"),
        ("add_kernel", "MemoryL2Compression"),
        ("add_kernel", "HighPipeUtilization"),
        ("add_kernel", "AchievedOccupancy"),
        ("sgemm_tiled", "TheoreticalOccupancy"),
        ("sgemm_tiled", "FPInstructions"),
        ("sgemm_tiled", "SOLBottleneck"),
    ]
    cpi = rules[2]
    assert (cpi.launch_id, cpi.section, cpi.type, cpi.speedup_type, cpi.speedup_pct) == (
        "2", "Warp State Statistics", "OPT", "global", 33.33,
    )  # fmt: skip
    assert cpi.message.startswith("On average, each warp of this workload spends 54.1 cycles")
    sol = rules[1]
    assert sol.type == "INF" and sol.speedup_pct is None and sol.speedup_type is None
    assert rules[0].extra == {"Block Size": "(256, 1, 1)", "Grid Size": "(65536, 1, 1)"}
