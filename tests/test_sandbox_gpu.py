"""On the GPU (the H200): evaluation and the ncu profile stage under each sandbox mechanism."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.evaluate import EvalOptions, evaluate
from engine.profile.candidate import ProfileOptions, profile_candidate
from engine.sandbox import available_mechanisms
from tests.conftest import EXAMPLES

TASK = (EXAMPLES / "tasks" / "relu_large.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cuda.py").read_text()

pytestmark = pytest.mark.gpu


def _need(mechanism: str) -> None:
    why = available_mechanisms().get(mechanism)
    if why:
        pytest.skip(f"{mechanism} cannot run here: {why}")


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock", "off"])
def test_cuda_kernel_is_correct_and_timed_under_the_sandbox(mechanism: str, ext_cache: Path) -> None:
    _need(mechanism)
    result = evaluate(TASK, KERNEL, EvalOptions(device="cuda", cache_root=ext_cache, sandbox=mechanism))
    assert result.status == "correct", (result.messages, result.stderr_tail)
    assert result.sandbox == mechanism and result.speedup and result.speedup > 0
    print(
        f"{mechanism}: total {result.durations['total']:.2f} s, process_start {result.durations['process_start']:.2f} s"
    )


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_ncu_profile_runs_inside_the_sandbox(mechanism: str, ext_cache: Path) -> None:
    _need(mechanism)
    result, spec = profile_candidate(
        TASK, KERNEL, options=ProfileOptions(cache_root=ext_cache, sandbox=mechanism)
    )
    assert result.kind == "ncu", result.unavailable
    assert spec is not None and result.metrics
    if mechanism == "bwrap":
        assert result.command and "ncu" in " ".join(result.command)
