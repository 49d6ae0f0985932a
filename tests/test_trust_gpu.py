"""Issue 45's trust holes on a GPU: kernels attributed from the binary, a value memo refused, the
persisting-L2 limit put back through the real driver. The full case table is benchmarks/trust_gpu.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from engine.guard.policy import GuardSettings
from tests.fixtures.trust.cuda_trust import CASES, task

pytestmark = pytest.mark.gpu

BY_NAME = {case[0]: case for case in CASES}


def run(case: str, cache: Path):
    _, task_name, source, policy, _, _ = BY_NAME[case]
    options = EvalOptions(device="cuda", cache_root=cache, guard=GuardSettings(policy), timing=TimingPlan(min_trials=30))
    return evaluate(task(task_name), source, options, task_name=task_name)


def runtime_rules(result) -> list[str]:
    return [f["rule"] for f in result.findings if f.get("source") == "runtime"]


def test_an_honest_kernel_is_credited_from_its_binary(ext_cache: Path) -> None:
    result = run("honest kernel", ext_cache)
    assert result.status == "correct", result.messages
    share = result.kernel_share or {}
    assert share["attribution"] == "binary" and share["share"] > 0.5
    assert [k["name"] for k in share["kernels"] if k["own"]] == ["hardsigmoid_kernel(float const*, float*, long)"]


def test_atens_kernel_under_the_source_kernels_name_is_not_the_candidates(ext_cache: Path) -> None:
    result = run("ATen kernel under the source kernel's name", ext_cache)
    assert result.status == "rejected" and runtime_rules(result)[-1] == "no-own-kernel", result.messages
    assert "not compiled into its extensions" in result.messages[-1]


def test_a_value_keyed_memo_is_refused_on_the_gpu(ext_cache: Path) -> None:
    result = run("value-keyed memo from call 25", ext_cache)
    evidence = (result.messages, result.settings.get("replay"), (result.kernel_share or {}).get("ablation"), result.durations)
    assert result.status == "rejected" and runtime_rules(result)[-1] == "output-replayed", evidence


def test_the_persisting_l2_limit_is_put_back_through_the_driver() -> None:
    import ctypes

    import torch

    from engine.eval.l2 import CU_LIMIT_PERSISTING_L2_CACHE_SIZE, PersistingL2

    torch.zeros(1, device="cuda")  # a context
    l2 = PersistingL2()
    assert l2.available, "libcuda's limit calls should be reachable on a GPU machine"
    driver = ctypes.CDLL("libcuda.so.1")
    driver.cuCtxSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
    assert driver.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(4 << 20)) == 0
    assert l2.limit() != l2.baseline
    assert l2.restore() and l2.limit() == l2.baseline and l2.restores == 1


def test_a_stock_built_value_keyed_memo_is_refused_by_the_profilers_evidence(ext_cache: Path) -> None:
    """No split build, so no ablation switch: the probe's suspect seen call is profiled, and launches no
    kernel of the candidate's binary."""
    result = run("value-keyed memo from call 25, stock build", ext_cache)
    assert result.status == "rejected" and runtime_rules(result)[-1] == "output-replayed", result.messages
    assert result.settings["replay"]["seen_call_own_kernels"] == [], result.settings["replay"]
    honest = run("honest naive matmul, stock build", ext_cache)
    assert honest.status == "correct", honest.messages
