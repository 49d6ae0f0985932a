"""The own-kernel share on an H200 (engine.guard.share, worker launch_guard): measured, shown, and used
by the default policy to refuse an own kernel that does no measurable work."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate_files
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from engine.guard.policy import GuardSettings
from engine.guard.runtime import OWN_SHARE_MIN
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "guard"
CONV_TASK = FIXTURES / "tasks" / "conv_relu_scale.py"


def run(kernel: Path, cache: Path, task: Path = CONV_TASK, **overrides):
    options = EvalOptions(device="cuda", cache_root=cache, timing=TimingPlan(min_trials=30), **overrides)
    return evaluate_files(task, kernel, options)


def test_conv_in_cudnn_with_fused_epilogue_is_correct_and_its_share_measured(ext_cache: Path) -> None:
    result = run(FIXTURES / "partial_conv_epilogue.py", ext_cache)
    assert result.status == "correct", result.messages
    share = result.kernel_share
    assert share is not None and share["method"] == "cuda-profiler"
    own = [k for k in share["kernels"] if k["own"]]
    assert own and all("relu_scale_kernel" in k["name"] for k in own)
    assert any(not k["own"] for k in share["kernels"])  # the cuDNN convolution
    assert share["share"] > OWN_SHARE_MIN
    assert result.guard_policy == "default"
    print("conv+epilogue share", share["share"], [(k["name"][:40], k["ms"]) for k in share["kernels"]])


def test_conv_epilogue_is_refused_under_strict(ext_cache: Path) -> None:
    result = run(FIXTURES / "partial_conv_epilogue.py", ext_cache, guard=GuardSettings("strict"))
    assert result.status == "rejected" and result.stage == "guard"
    assert result.guard_policy == "strict"


def test_trivial_own_kernel_is_refused(ext_cache: Path) -> None:
    """Split-built (stock layout): the ablation refuses it; the share is still measured and tiny."""
    result = run(FIXTURES / "trivial_own_kernel.py", ext_cache)
    assert result.status == "rejected", result.messages
    refusing = {f["rule"] for f in result.findings if f["severity"] == "refuse" and not f["relaxed"]}
    assert refusing == {"own-kernel-unneeded"}
    assert result.kernel_share and result.kernel_share["share"] < OWN_SHARE_MIN
    print("trivial share", result.kernel_share["share"])


def test_full_replacement_kernel_has_a_share_near_one(ext_cache: Path) -> None:
    result = run(EXAMPLES / "kernels" / "relu_cuda.py", ext_cache, task=EXAMPLES / "tasks" / "relu_large.py")
    assert result.status == "correct", result.messages
    assert result.kernel_share and result.kernel_share["share"] > 0.9
