"""Runtime guards on CUDA: a side stream, a PyTorch fallback, a data-pointer cache, a kernel that never runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from engine.eval.timing import TimingPlan
from engine.guard.policy import GuardSettings
from tests.conftest import EXAMPLES

TASK = EXAMPLES / "tasks" / "relu_large.py"
KERNEL = EXAMPLES / "kernels" / "relu_cuda.py"

pytestmark = pytest.mark.gpu


def cheat(new_forward: str, init_extra: str = "") -> str:
    source = KERNEL.read_text().replace("return ext.relu(x)", new_forward)
    if init_extra:
        source = source.replace("super().__init__()", "super().__init__()\n        " + init_extra)
    return source


def run(source: str, cache: Path, **overrides) -> EvalResult:
    options = EvalOptions(device="cuda", cache_root=cache, timing=TimingPlan(min_trials=50), **overrides)
    return evaluate(TASK.read_text(), source, options, task_name="relu_large")


def rules(result: EvalResult) -> set[str]:
    return {f["rule"] for f in result.findings if f["severity"] == "refuse"}


SIDE_STREAM = (
    "s = torch.cuda.Stream()\n        with torch.cuda.stream(s):\n            for _ in range(8):\n"
    "                out = ext.relu(x)\n        return out"
)


def test_side_stream_is_refused_statically(ext_cache: Path) -> None:
    result = run(cheat(SIDE_STREAM), ext_cache)
    assert result.status == "rejected" and "stream-swap" in rules(result)


def test_side_stream_work_shows_as_a_timing_disagreement(ext_cache: Path) -> None:
    result = run(cheat(SIDE_STREAM), ext_cache, guard=GuardSettings(relax=("stream-swap",)))
    assert result.status == "rejected", (result.messages, result.timing)
    assert "timing-disagreement" in rules(result)
    print("side stream:", result.timing.candidate.median_ms, "ms by events,", result.timing.candidate.gap_median_ms, "ms gap")


HIGH_PRIORITY = SIDE_STREAM.replace("torch.cuda.Stream()", "torch.cuda.Stream(priority=-1)")


def test_work_put_ahead_of_the_flush_on_a_high_priority_stream_is_a_timing_disagreement(ext_cache: Path) -> None:
    """Its blocks are scheduled before the flush's: the flush ends later, the call's events see nothing. Eight
    ReLUs also outlast the flush, so the gap sees them after the end event as well; that the gap counts the
    stretched flush is pinned on CPU (test_guard_runtime.py); here the stretch itself is shown."""
    result = run(cheat(HIGH_PRIORITY), ext_cache, guard=GuardSettings(relax=("stream-swap",)))
    assert result.status == "rejected" and "timing-disagreement" in rules(result), (result.messages, result.timing)
    candidate, reference = result.timing.candidate, result.timing.reference
    assert candidate.flush_median_ms > reference.flush_median_ms, result.timing
    print("high priority: flush", candidate.flush_median_ms, "vs", reference.flush_median_ms, "gap", candidate.gap_median_ms)


BURSTS = """
import sys, time, torch
a = torch.randn(4096, 4096, device="cuda")
print("ready", flush=True)
while True:  # bursts of about 20 ms of matmuls, each synced so none queues past its burst, 20 ms apart
    started = time.monotonic()
    while time.monotonic() - started < 0.02:
        a @ a
        torch.cuda.synchronize()
    time.sleep(0.02)
"""


def test_an_honest_kernel_beside_another_process_s_bursts_of_work_is_not_hidden_work(ext_cache: Path) -> None:
    """A shared GPU (session 22: an honest ReLU refused with other GPU tests on the card): another process
    keeps the GPU busy about half the time, in bursts; the honest kernel stays correct."""
    import subprocess
    import sys

    other = subprocess.Popen([sys.executable, "-c", BURSTS], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "ready"
        result = run(KERNEL.read_text(), ext_cache)
    finally:
        other.kill()
        other.wait()
    assert result.status == "correct", (result.messages, result.timing)
    candidate, reference = result.timing.candidate, result.timing.reference
    print("beside bursts: gaps", candidate.gap_median_ms, reference.gap_median_ms, "flushes", candidate.flush_median_ms, reference.flush_median_ms)


def test_matmul_fallback_is_refused(ext_cache: Path) -> None:
    result = run(cheat("return torch.matmul(x, x.t())"), ext_cache)
    # default policy: the matmul is a warning, the kernel that is never called refuses
    assert result.status == "rejected" and "kernel-not-called" in rules(result)
    strict = run(cheat("return torch.matmul(x, x.t())"), ext_cache, guard=GuardSettings("strict"))
    assert strict.status == "rejected" and "torch-compute-in-forward" in rules(strict)


def test_output_cached_by_data_pointer_is_refused(ext_cache: Path) -> None:
    forward = "key = x.data_ptr()\n        if key not in self.cache:\n            self.cache[key] = ext.relu(x)\n        return self.cache[key]"
    result = run(cheat(forward, "self.cache = {}"), ext_cache)
    assert result.status == "rejected" and "output-cache" in rules(result)
    relaxed = run(cheat(forward, "self.cache = {}"), ext_cache, guard=GuardSettings(relax=("output-cache",)))
    assert relaxed.status in ("rejected", "incorrect")  # the runtime check or fresh inputs catch it too
    assert relaxed.status != "correct"


def test_kernel_that_never_launches_is_refused(ext_cache: Path) -> None:
    result = run(
        cheat("return torch.relu(x)"), ext_cache, guard=GuardSettings(relax=("kernel-not-called", "torch-compute-in-forward"))
    )
    assert result.status == "rejected", result.messages
    assert "no-own-kernel" in rules(result)


def test_honest_kernel_launches_its_own_kernel(ext_cache: Path) -> None:
    result = run(KERNEL.read_text(), ext_cache)
    assert result.status == "correct"
    assert any("relu_kernel" in m for m in result.messages)
