"""On the GPU (the H200): evaluation and the ncu profile stage under each sandbox mechanism."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions, EvaluationError
from engine.profile.candidate import ProfileOptions, profile_candidate
from engine.sandbox import available_mechanisms
from tests.conftest import EXAMPLES

TASK = (EXAMPLES / "tasks" / "relu_large.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cuda.py").read_text()

pytestmark = pytest.mark.gpu


def _landlock_blocks_cuda(cache: Path) -> str | None:
    from engine.sandbox import cudaprobe, prepare

    launch = prepare("landlock", ["true"], job_dir=cache / "probe-job", writable=[cache])
    why = cudaprobe.landlock_blocks_cuda(launch.env)
    print(f"landlock and CUDA here: {why or 'CUDA starts'}")
    return why


def _need(mechanism: str) -> None:
    why = available_mechanisms().get(mechanism)
    if why:
        pytest.skip(f"{mechanism} cannot run here: {why}")


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock", "off"])
def test_cuda_kernel_is_correct_and_timed_under_the_sandbox(mechanism: str, ext_cache: Path) -> None:
    _need(mechanism)
    if mechanism == "landlock" and _landlock_blocks_cuda(ext_cache):
        # As measured on the H200: then a CUDA run is refused with the remedy, never run to a false task error.
        with pytest.raises(EvaluationError, match="CUDA does not start under the Landlock sandbox"):
            evaluate(TASK, KERNEL, EvalOptions(device="cuda", cache_root=ext_cache, sandbox=mechanism))
        return
    result = evaluate(TASK, KERNEL, EvalOptions(device="cuda", cache_root=ext_cache, sandbox=mechanism))
    assert result.status == "correct", (result.messages, result.stderr_tail)
    assert result.sandbox == mechanism and result.speedup and result.speedup > 0
    print(
        f"{mechanism}: total {result.durations['total']:.2f} s, process_start {result.durations['process_start']:.2f} s"
    )


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_ncu_profile_runs_inside_the_sandbox(mechanism: str, ext_cache: Path) -> None:
    _need(mechanism)
    if mechanism == "landlock" and _landlock_blocks_cuda(ext_cache):
        pytest.skip(
            "CUDA does not start under Landlock on this machine (the evaluation test checks the refusal)"
        )
    result, spec = profile_candidate(
        TASK, KERNEL, options=ProfileOptions(cache_root=ext_cache, sandbox=mechanism)
    )
    assert result.kind == "ncu", result.unavailable
    assert spec is not None and result.metrics
    if mechanism == "bwrap":
        assert result.command and "ncu" in " ".join(result.command)
