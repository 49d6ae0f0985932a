"""The no-counter fallback: PyTorch-profiler times and a clearly labelled roofline estimate."""

from __future__ import annotations

import json

import pytest

from engine.profile.availability import ProfileUnavailable, classify_ncu_failure
from engine.profile.fallback import roofline_estimate, summarize_torch_profiler
from engine.profile.result import ProfileResult
from engine.profile.specs import lookup

H200 = lookup("NVIDIA H200")
KERNELS = [("copy_kernel", 40.0, 1), ("add_kernel", 120.0, 2)]


def test_fallback_summary_with_task_estimate() -> None:
    why = classify_ncu_failure(1, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission ...", "")
    s = summarize_torch_profiler(KERNELS, H200, bytes_moved=384e6, flops=32e6, unavailable=why)
    assert s.kind == "torch-profiler"
    lines = s.text.splitlines()
    assert "no hardware counters (no-permission:" in lines[0] and "ESTIMATES" in lines[0]
    assert lines[1] == "- add_kernel: 120.0 µs over 2 call(s) (60.0 µs/call), 75% of GPU time"
    assert lines[2] == "- copy_kernel: 40.0 µs over 1 call(s), 25% of GPU time"
    # 384 MB in 160 µs = 2,400 GB/s = 50 % of 4,800; 32 MFLOP / 160 µs = 0.2 TFLOP/s; AI 1/12 < 13.96.
    est = s.data["estimate"]
    assert est["dram_gbs"] == pytest.approx(2400.0) and est["dram_pct_of_peak"] == pytest.approx(50.0)
    assert est["tflops"] == pytest.approx(0.2) and est["arithmetic_intensity"] == pytest.approx(1 / 12)
    assert est["likely_bound"].startswith("likely memory-bound, but only 50% of that peak")
    assert "Roofline ESTIMATE" in lines[-1] and "~2,400 GB/s = 50% of 4,800 GB/s" in lines[-1]
    assert s.data["unavailable"]["reason"] == "no-permission"
    json.dumps(s.to_dict())  # JSON-able


def test_fallback_without_task_counts_or_spec() -> None:
    s = summarize_torch_profiler(KERNELS, None, unavailable=None)
    assert "n/a (the task's byte/FLOP counts are unknown)" in s.text
    assert s.data["estimate"]["dram_gbs"] is None and s.data["gpu"] is None


def test_compute_bound_estimate_and_kernel_overflow() -> None:
    est = roofline_estimate(1000.0, H200, bytes_moved=50e6, flops=50e12 * 1e-3, precision="fp32")
    # 50 GFLOP in 1 ms = 50 TFLOP/s = 74.6 % of 67; AI = 1000 FLOP/B > 13.96 → compute-bound, busy enough.
    assert (
        est["flop_pct_of_peak"] == pytest.approx(74.627, abs=1e-3)
        and est["likely_bound"] == "likely compute-bound"
    )
    many = [(f"k{i}", float(i + 1), 1) for i in range(10)]
    s = summarize_torch_profiler(many, H200, max_kernels=3)
    assert s.text.splitlines()[1].startswith("- k9:") and "+ 7 more kernel(s), 28.0 µs in total" in s.text


def test_result_records_the_kind_of_feedback_for_the_judge() -> None:
    why = ProfileUnavailable("no-ncu", "Nsight Compute (ncu) was not found on this machine", "install it")
    fallback = ProfileResult(
        kind="torch-profiler",
        summary=summarize_torch_profiler(KERNELS, H200, unavailable=why),
        unavailable=why,
    )
    line = fallback.feedback_kind_line()
    assert "roofline ESTIMATE" in line and "no hardware counters" in line and "no-ncu" in line
    assert (
        ProfileResult(kind="none", unavailable=why).feedback_kind_line().startswith("Hardware feedback: none")
    )
    assert "measured" in ProfileResult(kind="ncu").feedback_kind_line()
    again = ProfileResult.from_json(fallback.to_json())
    assert again.to_dict() == fallback.to_dict()


def test_judge_block_states_kind_then_gpu_then_summary() -> None:
    why = ProfileUnavailable("no-permission", "counters restricted", "run as root")
    result = ProfileResult(
        kind="torch-profiler",
        summary=summarize_torch_profiler(KERNELS, H200, unavailable=why),
        unavailable=why,
    )
    block = result.judge_block(H200)
    kind, gpu, summary = block.split("\n\n")
    assert kind.startswith("Hardware feedback: PyTorch profiler") and "no-permission" in kind
    assert gpu.startswith("GPU: NVIDIA H200") and summary.startswith("PyTorch profiler timings only")
    assert "run as root" not in block  # how-to-fix is for the human (doctor), not the Judge
    assert ProfileResult(kind="none", unavailable=why).judge_block(None).count("\n\n") == 0
