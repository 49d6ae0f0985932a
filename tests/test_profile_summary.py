"""The Judge summary, checked against numbers computed by hand from the fixtures and the H200 spec.

H200 (table): 4,800 GB/s, FP32 67 TFLOP/s → FP32 ridge = 67e12 / 4.8e12 = 13.96 FLOP/B.

add_kernel (last launch): 60,000 ns, 201,326,592 DRAM bytes, 16,777,216 FADD.
  bandwidth = 201,326,592 B / 60 µs = 3,355.44 GB/s = 69.9 % of 4,800
  FLOP/s    = 16,777,216 / 60 µs = 0.2796 TFLOP/s = 0.417 % of 67;  AI = 1/12 = 0.0833 < 13.96
  busy: memory max(69.9, 67.5) = 69.9 % > 60; compute max(0.42, 12.3) = 12.3 %  → memory-bound
  occupancy limits (blocks/SM): blocks 32, registers 16, shared 32, warps 8 → limited by warps
sgemm_tiled: 400,000 ns, 50,331,648 DRAM bytes, 8,589,934,592 FFMA.
  FLOP/s    = 2 × 8,589,934,592 / 400 µs = 42.95 TFLOP/s = 64.1 % of 67;  AI = 341.33 > 13.96
  bandwidth = 125.83 GB/s = 2.62 %; busy: memory max(2.6, 41.0) = 41 %, compute max(64.1, 72.4) = 72.4 %
  → compute-bound; limits: registers 2 (lowest) → limited by registers
softmax_rows (small set): 8,192 ns, 2,097,152 B → 256 GB/s = 5.3 %; busy 21.5 % / 14.2 % → latency-bound
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.profile.ncu_csv import RuleResult, launch_counts, parse_details_csv, parse_raw_csv
from engine.profile.specs import lookup
from engine.profile.summary import classify_bound, select_rules, strip_markup, summarize

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"
H200 = lookup("NVIDIA H200")


@pytest.fixture
def default_summary():
    raw = (FIXTURES / "synthetic_raw_default_set.csv").read_text()
    rules = parse_details_csv((FIXTURES / "synthetic_details.csv").read_text())
    return summarize(parse_raw_csv(raw), rules, H200, duration_ms=0.52, launches=launch_counts(raw))


def kernel_data(summary, name):
    return next(k for k in summary.data["kernels"] if k["name"] == name)


def test_memory_bound_numbers(default_summary) -> None:
    k = kernel_data(default_summary, "add_kernel")
    assert k["time_ns"] == 60_000
    assert k["dram_gbs"] == pytest.approx(3355.4432)
    assert k["dram_pct_of_peak"] == pytest.approx(69.905, abs=1e-3)
    assert k["tflops"] == pytest.approx(0.279620, rel=1e-5)
    assert k["flop_pct_of_peak"] == pytest.approx(0.41734, rel=1e-4)
    assert k["arithmetic_intensity"] == pytest.approx(1 / 12)
    assert k["ridge_point"] == pytest.approx(13.958, abs=1e-3)
    assert k["bound"] == "memory-bound"
    assert k["occupancy_limiter"] == "warps per SM (block size)"
    assert k["top_stalls"] == [
        ["long_scoreboard", 45.1],
        ["short_scoreboard", 2.3],
        ["branch_resolving", 1.2],
    ]
    assert k["launches"] == 2


def test_compute_bound_numbers(default_summary) -> None:
    k = kernel_data(default_summary, "sgemm_tiled")
    assert k["flops"] == 17_179_869_184
    assert k["tflops"] == pytest.approx(42.9497, rel=1e-5)
    assert k["flop_pct_of_peak"] == pytest.approx(64.104, abs=1e-3)
    assert k["dram_gbs"] == pytest.approx(125.82912)
    assert k["arithmetic_intensity"] == pytest.approx(341.333, abs=1e-3)
    assert k["memory_util_pct"] == pytest.approx(41.0) and k["compute_util_pct"] == pytest.approx(72.4)
    assert k["bound"] == "compute-bound"
    assert k["occupancy_limiter"] == "registers"


def test_text_is_short_and_says_the_right_things(default_summary) -> None:
    text = default_summary.text
    lines = text.splitlines()
    assert len(lines) <= 12
    assert lines[0].startswith("Nsight Compute: 2 kernel(s) on NVIDIA H200") and "0.52 ms" in lines[0]
    # Slowest kernel first.
    assert lines[1].startswith("- sgemm_tiled: 400.0 µs, compute-bound (AI 341.33 FLOP/B ≥ FP32 ridge 14.0)")
    assert "FP32 42.95 TFLOP/s = 64.1% of 67" in text
    assert (
        "add_kernel ×2 launches (last shown): 60.0 µs, memory-bound (AI 0.08 FLOP/B < FP32 ridge 14.0)"
        in text
    )
    assert "DRAM 3,355 GB/s = 70% of 4,800" in text and "FP32 0.28 TFLOP/s = 0.4% of 67" in text
    assert "limited by registers" in text and "limited by warps per SM (block size)" in text
    assert "long_scoreboard 45%, short_scoreboard 2%, branch_resolving 1%" in text
    # Whitelisted rules with speedups as upper bounds; noise rules never appear; markup is gone.
    assert "[OPT] TheoreticalOccupancy:" in text and "up to 28%" in text
    assert "[OPT] CPIStall: On average, each warp of this workload spends 54.1 cycles" in text
    assert "up to 33%" in text
    for noise in ("MemoryL2Compression", "HighPipeUtilization", "FPInstructions", "@section", "@url"):
        assert noise not in text


def test_latency_bound_and_missing_metrics_are_na() -> None:
    table = parse_raw_csv((FIXTURES / "synthetic_raw_small_set_import.csv").read_text())
    summary = summarize(table, [], H200)
    k = kernel_data(summary, "softmax_rows")
    assert k["dram_gbs"] == pytest.approx(256.0) and k["dram_pct_of_peak"] == pytest.approx(5.3333, abs=1e-3)
    assert k["bound"] == "latency-bound (neither > 60%)"
    assert k["flops"] is None and k["tflops"] is None and k["occupancy_limiter"] is None
    text = summary.text
    assert "FLOP/s n/a" in text and "n/a theoretical" in text and "limited by n/a" in text
    assert " 0 TFLOP/s" not in text and "0.00" not in text


def test_without_a_spec_percentages_are_na() -> None:
    table = parse_raw_csv((FIXTURES / "synthetic_raw_default_set.csv").read_text())
    summary = summarize(table, [], None)
    k = kernel_data(summary, "add_kernel")
    assert k["dram_gbs"] == pytest.approx(3355.4432) and k["dram_pct_of_peak"] is None
    assert k["flop_pct_of_peak"] is None and k["ridge_point"] is None
    assert "unknown GPU" in summary.text and "(peak n/a)" in summary.text
    assert k["bound"] == "memory-bound"  # ncu's own SOL % still tells


def test_duration_fallback_for_a_single_kernel_without_time() -> None:
    table = {"k": {"dram__bytes.sum": (4_800_000, "byte")}}
    k = summarize(table, [], H200, duration_ms=0.002).data["kernels"][0]
    # 4.8 MB in 2 µs = 2,400 GB/s = 50 % of the H200's 4,800 GB/s
    assert k["dram_gbs"] == pytest.approx(2400.0) and k["dram_pct_of_peak"] == pytest.approx(50.0)


def test_many_kernels_stay_within_the_line_budget() -> None:
    table = {
        f"k{i}": {"gpu__time_duration.sum": (1000 * (i + 1), "nsecond"), "dram__bytes.sum": (10**6, "byte")}
        for i in range(10)
    }
    summary = summarize(table, [], H200, max_lines=12)
    lines = summary.text.splitlines()
    assert len(lines) <= 12
    assert lines[1].startswith("- k9:")  # slowest first
    assert lines[-1].startswith("+ 7 more kernel(s): k6 (7.0 µs)")
    assert len(summary.data["kernels"]) == 10  # the data keeps everything


@pytest.mark.parametrize(
    ("mem", "comp", "ai", "ridge", "expected"),
    [
        (70.0, 10.0, None, None, "memory-bound"),
        (10.0, 70.0, 0.1, 14.0, "compute-bound"),  # one unit busy decides, whatever the AI
        (80.0, 75.0, 0.5, 14.0, "memory-bound"),  # both busy: AI below the ridge
        (80.0, 75.0, 50.0, 14.0, "compute-bound"),
        (61.0, 65.0, None, None, "compute-bound"),
        (60.0, 60.0, 1.0, 14.0, "latency-bound (neither > 60%)"),
        (None, 30.0, None, None, "latency-bound (neither > 60%)"),
        (None, None, None, None, "unknown"),
    ],
)
def test_classify_bound(mem, comp, ai, ridge, expected) -> None:
    assert classify_bound(mem, comp, ai, ridge) == expected


def test_strip_markup() -> None:
    assert strip_markup(
        "See the @section:MemoryWorkloadAnalysis_Chart:Memory Workload Analysis@ section."
    ) == ("See the Memory Workload Analysis section.")
    assert strip_markup("See the @url:Kernel Profiling Guide:https://docs.nvidia.com/x/index.html#y@ .") == (
        "See the Kernel Profiling Guide ."
    )
    assert strip_markup("At @source:kernel.cu:42:line 42@ and @sass:0x1a0:LDG.E@,\n  twice") == (
        "At line 42 and LDG.E, twice"
    )


def test_select_rules_keeps_the_last_launch_and_sorts_by_speedup() -> None:
    rules = [
        RuleResult("k", "s", "CPIStall", "OPT", "first", "global", 10.0, launch_id="0"),
        RuleResult("k", "s", "SOLBottleneck", "INF", "sol", None, None),
        RuleResult("k", "s", "CPIStall", "OPT", "second", "global", 20.0, launch_id="2"),
        RuleResult("k", "s", "AchievedOccupancy", "OPT", "occ", "global", 30.0),
        RuleResult("k", "s", "MemoryL2Compression", "OPT", "noise", "global", 90.0),
        RuleResult("other", "s", "CPIStall", "OPT", "other kernel", "global", 50.0),
        RuleResult("k", "s", "LaunchConfiguration", "OPT", "   ", "global", 40.0),  # no message
    ]
    picked = select_rules(rules, "k")
    assert [(r.rule, r.message) for r in picked] == [
        ("AchievedOccupancy", "occ"), ("CPIStall", "second"), ("SOLBottleneck", "sol"),
    ]  # fmt: skip
