"""What moved between two iterations (engine/profile/diff.py): kernels paired by name, every metric of
the Judge's table side by side, largest relative change first; timing with both spreads; the share."""

from __future__ import annotations

from pathlib import Path

from engine.eval.result import EvalResult, Timing, TimingStats
from engine.profile.diff import diff_lines, iteration_diff, pair_kernels
from engine.profile.metrics import METRIC_SETS
from engine.profile.ncu_csv import parse_raw_csv

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"


def _profile(csv_name: str) -> dict:
    """A profile.json record from a real H200 capture (tests/fixtures/ncu), as the loop writes it."""
    table = parse_raw_csv((FIXTURES / csv_name).read_text())
    command = ["ncu", "--metrics", ",".join(METRIC_SETS["large"]), "python", "bench.py"]
    return {
        "kind": "ncu",
        "metrics": {k: {m: list(v) for m, v in ms.items()} for k, ms in table.items()},
        "command": command,
    }


def _result(kernel_ms: list[float], share: float | None = None) -> dict:
    timing = Timing(
        "cuda-events", TimingStats.from_samples(kernel_ms), TimingStats.from_samples([2.0, 2.1, 1.9])
    )
    result = EvalResult(status="correct", timing=timing, speedup=2.0 / sorted(kernel_ms)[len(kernel_ms) // 2])
    if share is not None:
        result.kernel_share = {"share": share, "own_ms": 1.0, "library_ms": 0.1, "method": "profiler"}
    return result.to_dict()


def test_two_real_captures_compare_metric_by_metric_largest_change_first() -> None:
    old, new = _profile("h200_relu_default_raw.csv"), _profile("h200_relu_large_raw.csv")
    diff = iteration_diff(_result([1.0, 1.1, 0.9]), old, _result([0.5, 0.6, 0.4]), new)
    [kernel] = diff.kernels
    assert kernel.name == kernel.old_name == "relu_kernel(const float *, float *, long)"
    names = [c.metric for c in kernel.changes]
    assert not any(n.startswith(("c2clink__", "device__attribute", "thread Domain")) for n in names)
    assert "gpu__time_duration.sum" in names and "dram__throughput.avg.pct_of_peak_sustained_elapsed" in names
    raw_old = old["metrics"][kernel.name]["gpu__time_duration.sum"][0]
    raw_new = new["metrics"][kernel.name]["gpu__time_duration.sum"][0]
    duration = next(c for c in kernel.changes if c.metric == "gpu__time_duration.sum")
    assert (duration.old, duration.new) == (raw_old, raw_new)
    numeric = [abs(c.relative) for c in kernel.changes if c.relative is not None]
    assert numeric == sorted(numeric, reverse=True) and len(numeric) > 20
    first_missing = next(i for i, c in enumerate(kernel.changes) if c.relative is None)
    assert all(c.relative is None for c in kernel.changes[first_missing:])  # n/a after every number
    text = "\n".join(diff_lines(diff, "iter 1", "iter 2", limit=5))
    assert "kernel time: 1 ms (IQR 0.1 ms) → 0.5 ms (IQR 0.1 ms)  -50.0%" in text
    assert "speedup: 2.00x → 4.00x" in text
    assert "smaller changes not shown" in text


def test_kernels_pair_by_name_then_by_a_unique_base_name() -> None:
    pairs, old, new = pair_kernels(
        ["scale(float *, int)", "sum<128>(const float *)", "gone()"],
        ["scale(float *, long)", "sum<256>(const float *)", "sum<64>(const float *)", "fresh()"],
    )
    assert pairs == [("scale(float *, int)", "scale(float *, long)")]  # sum is ambiguous on the new side
    assert old == ["sum<128>(const float *)", "gone()"]
    assert new == ["sum<256>(const float *)", "sum<64>(const float *)", "fresh()"]


def test_a_missing_value_is_not_a_change_of_zero_and_share_moves_in_points() -> None:
    old = {"kind": "ncu", "metrics": {"k": {"a": [10.0, "%"], "b": [0, ""], "c": [5.0, "%"]}}}
    new = {"kind": "ncu", "metrics": {"k": {"a": [20.0, "%"], "b": [3, ""], "d": [1.0, "%"]}}}
    diff = iteration_diff(_result([1.0], 0.42), old, _result([1.0], 0.97), new)
    changes = {c.metric: c for c in diff.kernels[0].changes}
    assert changes["a"].change_text() == "+100.0%" and changes["b"].change_text() == "from 0"
    assert changes["c"].change_text() == "n/a" and changes["d"].new == 1.0
    assert [c.metric for c in diff.kernels[0].changes][-2:] == ["c", "d"]
    assert diff.share == "own-kernel share: 42% → 97%  (+55 points)"


def test_an_unprofiled_side_is_said_not_compared() -> None:
    diff = iteration_diff(_result([1.0]), None, _result([1.0]), _profile("h200_relu_default_raw.csv"))
    assert not diff.kernels and diff.missing == "no Nsight Compute metrics for the old iteration"
    assert diff.missing in diff_lines(diff, "iter 0", "iter 1")
