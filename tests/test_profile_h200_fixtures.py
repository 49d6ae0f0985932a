"""The parsers on real Nsight Compute 2025.3.1 output captured on an H200 (tests/fixtures/ncu/capture.sh)."""

from __future__ import annotations

from pathlib import Path

from engine.profile.metrics import ARCH_EQUIVALENTS, PAPER_24, filled_paper_slots
from engine.profile.ncu_csv import parse_details_csv, parse_raw_csv
from engine.profile.specs import lookup
from engine.profile.summary import roofline_position, summarize

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"


def test_default_capture_lacks_exactly_the_two_renamed_metrics() -> None:
    table = parse_raw_csv((FIXTURES / "h200_relu_default_raw.csv").read_text())
    assert list(table) == ["relu_kernel(const float *, float *, long)"]
    metrics = table["relu_kernel(const float *, float *, long)"]
    assert [m for m in PAPER_24 if m not in metrics] == list(ARCH_EQUIVALENTS)
    assert metrics["dram__bytes.sum"][1] == "byte" and metrics["dram__bytes.sum"][0] > 2e8


def test_every_paper_slot_is_filled_on_hopper_with_the_equivalents() -> None:
    table = parse_raw_csv((FIXTURES / "h200_relu_large_raw.csv").read_text())
    metrics = next(iter(table.values()))
    slots = filled_paper_slots(metrics)
    assert all(slots.values()), [m for m, v in slots.items() if v is None]


def test_details_rules_and_summary_on_real_output() -> None:
    rules = parse_details_csv((FIXTURES / "h200_relu_details.csv").read_text())
    assert "SOLBottleneck" in {r.rule for r in rules}
    table = parse_raw_csv((FIXTURES / "h200_relu_large_raw.csv").read_text())
    summary = summarize(table, rules, lookup("NVIDIA H200", (9, 0)))
    # under ncu (caches flushed, one launch) this relu reached 54% of DRAM peak: below the 60% line
    assert "relu_kernel" in summary.text and "latency-bound" in summary.text
    assert "DRAM 2,569 GB/s = 54% of 4,800" in summary.text and "SOLBottleneck" in summary.text


def test_the_judge_reads_which_roof_limits_the_kernel_and_how_close_it_is() -> None:
    """A ReLU counts no FLOPs: it sits under the memory roof, at its share of peak DRAM bandwidth; the
    summary's data keeps what the text says, for the workbench and the report."""
    table = parse_raw_csv((FIXTURES / "h200_relu_large_raw.csv").read_text())
    summary = summarize(table, [], lookup("NVIDIA H200", (9, 0)))
    [kernel] = summary.data["kernels"]
    roof, percent = roofline_position(kernel)
    assert roof == "memory" and percent == kernel["dram_pct_of_peak"]
    assert f"roofline: {percent:.0f}% of the memory roof" in summary.text


def test_the_roofline_share_agrees_with_ncus_own_speed_of_light_within_5_points() -> None:
    """Our memory-roof percentage (bytes / time against the spec table's 4,800 GB/s) against ncu's own
    DRAM speed-of-light figure from the same H200 captures."""
    for capture in ("h200_relu_default_raw.csv", "h200_relu_large_raw.csv"):
        table = parse_raw_csv((FIXTURES / capture).read_text())
        summary = summarize(table, [], lookup("NVIDIA H200", (9, 0)))
        [kernel] = summary.data["kernels"]
        [metrics] = table.values()
        ncu_sol = metrics["dram__throughput.avg.pct_of_peak_sustained_elapsed"][0]
        _, ours = roofline_position(kernel)
        assert abs(ours - ncu_sol) <= 5.0, (capture, ours, ncu_sol)
