"""The parsers on real Nsight Compute 2025.3.1 output captured on an H200 (tests/fixtures/ncu/capture.sh)."""

from __future__ import annotations

from pathlib import Path

from engine.profile.metrics import ARCH_EQUIVALENTS, PAPER_24, filled_paper_slots
from engine.profile.ncu_csv import parse_details_csv, parse_raw_csv
from engine.profile.specs import lookup
from engine.profile.summary import summarize

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
