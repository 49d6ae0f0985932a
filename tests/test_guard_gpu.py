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
    print(
        "side stream:",
        result.timing.candidate.median_ms,
        "ms by events,",
        result.timing.candidate.host_median_ms,
        "ms by host",
    )


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
