"""The evaluator on a CUDA GPU: every status with real CUDA kernels, and the timing's fidelity.

Run on the GPU machine: ``pytest -m "gpu and not timing" -n 4`` (builds in parallel), then
``pytest -m "gpu and timing"`` alone, since concurrent work on the GPU would disturb the timings.
The failing kernels are the example with one Python line changed, so they share its build.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions, StageTimeouts
from engine.eval.result import EvalResult
from engine.eval.timing import TimingPlan
from tests.conftest import EXAMPLES

TASK = EXAMPLES / "tasks" / "relu_large.py"
KERNEL = EXAMPLES / "kernels" / "relu_cuda.py"
STOCK_KERNEL = EXAMPLES / "kernels" / "relu_cuda_stock.py"

pytestmark = pytest.mark.gpu


def variant(old: str, new: str) -> str:
    source = KERNEL.read_text()
    assert old in source
    return source.replace(old, new)


def run(source: str, cache: Path, **overrides) -> EvalResult:
    overrides.setdefault("timing", TimingPlan(min_trials=100))
    return evaluate(
        TASK.read_text(),
        source,
        EvalOptions(device="cuda", cache_root=cache, **overrides),
        task_name=TASK.stem,
    )


def test_correct_cuda_kernel(ext_cache: Path) -> None:
    result = run(KERNEL.read_text(), ext_cache)
    assert result.status == "correct", (result.messages, result.stderr_tail)
    assert result.timing.method == "cuda-events"
    assert result.timing.l2_flush_bytes >= 256 * 1024 * 1024
    assert result.timing.candidate.n >= 100
    assert result.build.extensions[0].path == "fast"
    assert result.env["gpu"] and result.env["compute_capability"]
    assert result.speedup and result.speedup > 0


def test_stock_layout_still_builds_and_says_so(ext_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAFORGE_BUILD_SPLIT", "0")  # the split build (default) is tested in test_build_split_gpu.py
    result = run(STOCK_KERNEL.read_text(), ext_cache, do_timing=False)
    assert result.status == "correct", (result.messages, result.stderr_tail)
    assert result.build.extensions[0].path == "stock"


def test_incorrect_cuda_kernel(ext_cache: Path) -> None:
    result = run(variant("return ext.relu(x)", "return ext.leaky_relu_bug(x)"), ext_cache)
    assert result.status == "incorrect"
    assert "mismatch at index" in result.messages[-1]


def test_cuda_compile_error_keeps_nvcc_message(ext_cache: Path) -> None:
    result = run(
        variant("out[i] = v > 0.0f ? v : 0.0f;", "out[i] = v > 0.0f ? v : undeclared_in_cuda;"), ext_cache
    )
    assert result.status == "compile_error"
    assert "undeclared_in_cuda" in result.build.log


def test_python_exception_in_forward(ext_cache: Path) -> None:
    # guards off: the static guard would refuse a forward that never calls the kernel before it runs
    result = run(variant("return ext.relu(x)", "raise RuntimeError('deliberate')"), ext_cache, guards=False)
    assert result.status == "runtime_error"
    assert result.error["type"] == "RuntimeError"


def test_native_crash_on_the_host(ext_cache: Path) -> None:
    result = run(variant("return ext.relu(x)", "return ext.host_crash(x)"), ext_cache)
    assert result.status == "runtime_error"
    assert result.signal == "SIGSEGV"


def test_illegal_memory_access_is_a_runtime_error(ext_cache: Path) -> None:
    result = run(variant("return ext.relu(x)", "return ext.out_of_bounds(x)"), ext_cache)
    assert result.status == "runtime_error", result.messages
    text = " ".join(result.messages) + (result.error or {}).get("message", "")
    assert "illegal memory access" in text.lower()


def test_hung_kernel_times_out(ext_cache: Path) -> None:
    result = run(
        variant("return ext.relu(x)", "return ext.spin(x)"), ext_cache, timeouts=StageTimeouts(check=10.0)
    )
    # the kernel never ends: only the stage's limit gives this verdict (no assertion on wall time: a loaded
    # box may take longer to end the worker, and the verdict is what the limit promises)
    assert result.status == "timeout"
    assert result.stage == "check"


@pytest.mark.timing
def test_twice_the_work_measures_twice_the_time(ext_cache: Path) -> None:
    fast = run(KERNEL.read_text(), ext_cache)
    slow = run(variant("return ext.relu(x)", "return ext.relu_twice(x)"), ext_cache)
    assert fast.status == slow.status == "correct"
    ratio = slow.timing.candidate.median_ms / fast.timing.candidate.median_ms
    print(f"2x variant: {ratio:.3f}x slower")
    assert 1.8 <= ratio <= 2.2


@pytest.mark.timing
def test_speedup_is_stable_across_separate_evaluations(ext_cache: Path) -> None:
    speedups = []
    for _ in range(5):
        result = run(KERNEL.read_text(), ext_cache)
        assert result.status == "correct"
        speedups.append(result.speedup)
    spread = (max(speedups) - min(speedups)) / statistics.median(speedups)
    print(f"speedups over 5 evaluations: {[round(s, 4) for s in speedups]} spread {spread:.2%}")
    assert spread <= 0.02


def test_an_honest_kernel_is_within_the_hardware_floor_and_a_time_below_it_is_flagged(ext_cache: Path) -> None:
    """relu_large moves 2 × 128 MiB: at the H200's 4.8 TB/s that takes 0.0559 ms at best, and an honest
    kernel (~3.8-4.3 TB/s) takes longer; the same result with a quarter of that time is flagged."""
    from engine.eval.plausibility import gpu_spec, judge

    result = run(KERNEL.read_text(), ext_cache)
    assert result.status == "correct", (result.messages, result.stderr_tail)
    floor = result.hardware_floor
    assert floor is not None and floor["note"] == "", floor
    assert floor["input_bytes"] == floor["output_bytes"] == 4096 * 8192 * 4
    assert floor["flops"] == 0 and floor["param_bytes"] == 0 and floor["dtype"] == "float32"
    assert floor["seconds"] >= 0, floor  # recorded; its cost is benchmarks/profile_overhead.py's to say
    print(f"hardware floor: {floor}")
    if gpu_spec(result.env) is None:  # a GPU the spec table lacks: recorded, never judged
        assert floor["implausible"] is None and "not in the spec table" in floor["unjudged"]
        assert not any("implausible" in flag for flag in result.flags)
        pytest.skip(f"{result.env.get('gpu')} is not in the spec table: nothing to judge")
    assert floor["bound"] == "bandwidth" and floor["implausible"] is False
    assert floor["kernel_ms"] == result.timing.candidate.median_ms >= floor["floor_ms"]
    assert not any("implausible" in flag for flag in result.flags)
    # the same evaluation with a time no GPU of this kind can give
    faked = EvalResult.from_dict(result.to_dict())
    faked.flags = []
    faked.timing.candidate.median_ms = floor["floor_ms"] / 4
    judge(faked, 0.9)
    assert faked.hardware_floor["implausible"] is True
    assert len(faked.flags) == 1 and "physically implausible" in faked.flags[0]
