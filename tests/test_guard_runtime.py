"""Runtime guards on CPU: each cheat is refused with its rule id, by the real worker.

The cheats are the honest example with its Python changed (same C++, same cached build). Where the
static guard would already refuse a cheat, that static rule is relaxed so the runtime check is
what is tested — and the relaxation shows up in the result, as it must.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from engine.eval.timing import TimingPlan
from engine.guard import runtime as rg
from engine.guard.policy import GuardPolicyError, GuardSettings
from tests.conftest import EXAMPLES

TASK = EXAMPLES / "tasks" / "relu.py"
KERNEL = EXAMPLES / "kernels" / "relu_cpu.py"


def cheat(new_forward: str, init_extra: str = "", prelude: str = "") -> str:
    source = KERNEL.read_text().replace("return ext.relu(x)", new_forward)
    if init_extra:
        source = source.replace("super().__init__()", "super().__init__()\n        " + init_extra)
    if prelude:
        source = source.replace("class ModelNew(", prelude + "\n\n\nclass ModelNew(")
    return source


def run(source: str, cache: Path, **overrides) -> EvalResult:
    options = EvalOptions(device="cpu", cache_root=cache, timing=TimingPlan(min_trials=10), **overrides)
    return evaluate(TASK.read_text(), source, options, task_name="relu")


def rules(result: EvalResult) -> dict[str, dict]:
    return {f["rule"]: f for f in result.findings}


@pytest.mark.slow
def test_mutated_input_is_refused(ext_cache: Path) -> None:
    source = cheat("y = ext.relu(x)\n        x.mul_(2.0)\n        return y")
    result = run(source, ext_cache, guard=GuardSettings(relax=("torch-compute-in-forward",)))
    assert result.status == "rejected"
    assert rules(result)["input-mutated"]["severity"] == "refuse"
    assert "torch-compute-in-forward" in result.relaxed_rules


@pytest.mark.slow
def test_output_aliasing_an_input_is_refused(ext_cache: Path) -> None:
    result = run(cheat("y = ext.relu(x)\n        x.copy_(y)\n        return x"), ext_cache)
    assert result.status == "rejected"
    assert "output-aliases-input" in rules(result)


@pytest.mark.slow
def test_output_cached_across_calls_is_refused(ext_cache: Path) -> None:
    source = cheat(
        "if self.out is None:\n            self.out = ext.relu(x)\n        return self.out", "self.out = None"
    )
    result = run(source, ext_cache)
    assert result.status == "rejected"
    assert "output-cached" in rules(result)
    assert rules(result)["state-in-forward"]["severity"] == "warn"  # static warnings travel with the result


@pytest.mark.slow
def test_tensor_subclass_output_is_refused(ext_cache: Path) -> None:
    source = cheat("return ext.relu(x).as_subclass(Fake)", prelude="class Fake(torch.Tensor):\n    pass")
    result = run(source, ext_cache, guard=GuardSettings(relax=("tensor-subclass", "torch-compute-in-forward")))
    assert result.status == "rejected"
    assert "output-not-tensor" in rules(result)


@pytest.mark.slow
def test_relaxed_runtime_rule_is_reported_not_enforced(ext_cache: Path) -> None:
    relax = ("output-aliases-input", "input-mutated")
    result = run(cheat("y = ext.relu(x)\n        x.copy_(y)\n        return x"), ext_cache, guard=GuardSettings(relax=relax))
    assert result.status == "correct"  # the values are right; only the relaxed rules saw the trick
    assert rules(result)["output-aliases-input"]["relaxed"] is True
    assert set(relax) <= set(result.relaxed_rules)


@pytest.mark.slow
def test_honest_kernel_passes_and_a_big_speedup_is_flagged_not_refused(ext_cache: Path) -> None:
    result = run(KERNEL.read_text(), ext_cache, flag_speedup_above=1e-6)
    assert result.status == "correct"
    assert not [f for f in result.findings if f["severity"] == "refuse"]
    assert result.flags and "review threshold" in result.flags[0]


def test_unknown_rule_is_an_error_before_any_evaluation() -> None:
    """A typo cannot reach an evaluation: the one GuardSettings a run carries refuses it when made, and
    the options take no loose rule lists that an evaluation would have to validate again."""
    with pytest.raises(GuardPolicyError, match="unknown guard rule"):
        GuardSettings(relax=("no-such-rule",))
    with pytest.raises(TypeError):
        EvalOptions(device="cpu", relax=("no-such-rule",))  # type: ignore[call-arg]


def test_static_refusal_needs_no_worker() -> None:
    source = KERNEL.read_text().replace("return ext.relu(x)", "return torch.relu(x)")
    result = run(source, Path("/nonexistent-cache"))
    assert result.status == "rejected" and result.stage == "guard"
    assert "torch-compute-in-forward" in rules(result)


def test_timing_disagreement_threshold() -> None:
    # measured on an H200: 1.7 µs by events vs 258 µs by the host clock for a matmul on a side stream
    assert rg.timing_disagreement(0.0017, 0.258) is not None
    assert rg.timing_disagreement(0.060, 0.080) is None  # an honest kernel plus its launch overhead
    assert rg.timing_disagreement(10.0, 10.2) is None
    assert rg.timing_disagreement(1.0, None) is None
    # a GPU shared with other work inflates the honest reference's host time too: that is allowed for
    assert rg.timing_disagreement(0.060, 0.500, reference_event_ms=0.055, reference_host_ms=0.490) is None
    assert rg.timing_disagreement(0.0017, 0.258, reference_event_ms=0.25, reference_host_ms=0.27) is not None


def test_own_kernel_matching_uses_whole_names() -> None:
    launched = [
        "relu_kernel(float const*, float*, long)",
        "void at::native::vectorized_elementwise_kernel<4>()",
    ]
    assert rg.own_kernels_in(launched, ["relu_kernel"]) == [launched[0]]
    assert rg.own_kernels_in(launched, ["elementwise"]) == []
    assert rg.own_kernels_in(["void ns::my_kernel<float>(float*)"], ["my_kernel"])


class _ScriptedClocks:
    """The two clocks of a timing, scripted: the events see each model's own 0.02 ms; the host clock sees
    that plus 0.01 ms of launch, and ``hidden_ms`` more for the candidate: its work on a side stream,
    which the events do not see."""

    method = "scripted"
    flush_bytes = 0

    def __init__(self, candidate, hidden_ms: float) -> None:
        self.candidate = candidate
        self.hidden_ms = hidden_ms

    def sync(self) -> None:
        pass

    def time_once(self, fn) -> float:
        fn()
        return 0.02

    def host_time_once(self, fn) -> float:
        fn()
        return 0.03 + (self.hidden_ms if fn is self.candidate else 0.0)


def _timing_with_hidden_work(hidden_ms: float):
    import torch

    from engine.eval.timing import TimingPlan, time_models

    def candidate() -> None:
        pass

    plan = TimingPlan(min_trials=20, warmup_calls=1, warmup_s=0.0)
    clock = _ScriptedClocks(candidate, hidden_ms)
    return time_models(candidate, lambda: None, torch.device("cpu"), plan, clock)


def test_work_hidden_from_the_events_in_every_call_is_still_found() -> None:
    from engine.eval.timing_stage import hidden_work

    message = hidden_work(_timing_with_hidden_work(0.4))
    assert message is not None and "outside the timed stream" in message
    assert hidden_work(_timing_with_hidden_work(0.0)) is None
