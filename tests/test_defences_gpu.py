"""The adversarial defences on a GPU (issue 25): NaN-filled free memory, the own-kernel ablation of
split builds, TF32 switched on from C++, shapes. One shared split-built extension serves every test
(tests/fixtures/defences/cuda_family.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from engine.eval.timing import TimingPlan
from tests.conftest import EXAMPLES
from tests.fixtures.defences.cuda_family import candidate

pytestmark = pytest.mark.gpu

FIXTURES = Path(__file__).parent / "fixtures" / "defences"
RELU = EXAMPLES / "tasks" / "relu.py"


def run(task: Path, source: str, cache: Path, **options: object) -> EvalResult:
    settings = {"device": "cuda", "do_timing": False, "cache_root": cache, **options}
    return evaluate(task.read_text(), source, EvalOptions(**settings), task_name=task.stem)


def refusals(result: EvalResult) -> set[str]:
    return {f["rule"] for f in result.findings if f["severity"] == "refuse" and not f["relaxed"]}


def test_an_honest_split_kernel_needs_its_kernels_and_keeps_its_verdict_after_timing(ext_cache: Path) -> None:
    result = run(RELU, candidate("relu"), ext_cache, do_timing=True, timing=TimingPlan(min_trials=20), shapes=True)
    assert result.status == "correct" and result.speedup, result.messages
    assert result.build.extensions[0].path == "split"
    share = result.kernel_share
    assert share["test"] == "ablation" and share["ablation"]["outcome"] == "needed", share
    assert [v["status"] for v in result.shapes["variants"]] == ["correct"] * 3
    assert result.settings["nan_fill"]["calls"] >= 10
    print("ablation", share["ablation"], "shapes", result.shapes.get("seconds"), "fill", result.settings["nan_fill"])


def test_a_kernel_that_leaves_part_of_its_output_unwritten_fails_on_the_filled_memory(ext_cache: Path) -> None:
    result = run(RELU, candidate("relu_stale"), ext_cache)
    assert result.status == "incorrect", result.messages
    assert "non-finite" in result.messages[-1] and "filled with NaN" in result.messages[-1]


def test_an_own_kernel_the_result_does_not_need_is_refused_by_the_ablation(ext_cache: Path) -> None:
    result = run(RELU, candidate("touch_relu"), ext_cache)
    assert result.status == "rejected" and refusals(result) == {"own-kernel-unneeded"}, result.messages
    assert result.kernel_share["test"] == "ablation" and result.kernel_share["ablation"]["outcome"] == "unneeded"


def test_cudnn_kept_with_one_honest_elementwise_kernel_is_accepted_with_its_share(ext_cache: Path) -> None:
    result = run(FIXTURES / "conv_bias.py", candidate("add_bias"), ext_cache)
    assert result.status == "correct", result.messages
    share = result.kernel_share
    assert share["test"] == "ablation" and share["ablation"]["outcome"] == "needed"
    assert any(k["own"] for k in share["kernels"]) and any(not k["own"] for k in share["kernels"])
    print("conv+bias share", share["share"], "ablation", share["ablation"])


def test_tf32_switched_on_from_cpp_under_a_hidden_name_is_refused(ext_cache: Path) -> None:
    result = run(FIXTURES / "matmul.py", candidate("matmul_tf32"), ext_cache)
    assert result.status == "rejected" and "precision-changed" in refusals(result), result.messages
    assert "torch.backends.cuda.matmul.allow_tf32: False -> True" in result.messages[-1]


def test_a_kernel_built_with_its_own_launchers_keeps_the_share_rule(ext_cache: Path) -> None:
    conv = Path(__file__).parent / "fixtures" / "guard" / "tasks" / "conv_relu_scale.py"
    result = run(conv, (FIXTURES / "trivial_fast_format.py").read_text(), ext_cache)
    assert result.status == "rejected" and refusals(result) == {"own-kernel-trivial"}, result.messages
    assert result.kernel_share["test"] == "share"


def test_on_a_weak_task_the_ablation_judges_by_the_full_check_not_the_tolerance_alone(ext_cache: Path) -> None:
    """Without its kernel the output is zeros, which pass softmax_wide's tolerance: still needed."""
    result = run(FIXTURES / "softmax_wide.py", candidate("softmax_rows"), ext_cache)
    assert result.status == "correct", result.messages
    assert result.weak_outputs and result.kernel_share["ablation"]["outcome"] == "needed"
    assert "degenerate (zeros)" in result.kernel_share["ablation"]["how"]
