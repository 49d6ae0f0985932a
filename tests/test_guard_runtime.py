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
    assert rg.timing_disagreement(0.0017, 0.256) is not None
    assert rg.timing_disagreement(0.060, 0.020) is None  # an honest kernel's launch and sync latency
    assert rg.timing_disagreement(10.0, 0.2) is None
    assert rg.timing_disagreement(1.0, None) is None
    # a GPU shared with other work stretches the honest reference's gaps too: that is allowed for
    assert rg.timing_disagreement(0.060, 0.450, reference_gap_ms=0.430) is None
    assert rg.timing_disagreement(0.0017, 0.256, reference_gap_ms=0.02) is not None
    assert rg.timing_disagreement(0.0017, 0.256, reference_gap_ms=-0.3) is not None  # a negative control allows nothing


def test_own_kernel_matching_uses_whole_names() -> None:
    launched = [
        "relu_kernel(float const*, float*, long)",
        "void at::native::vectorized_elementwise_kernel<4>()",
    ]
    assert rg.own_kernels_in(launched, ["relu_kernel"]) == [launched[0]]
    assert rg.own_kernels_in(launched, ["elementwise"]) == []
    assert rg.own_kernels_in(["void ns::my_kernel<float>(float*)"], ["my_kernel"])


class _ScriptedClocks:
    """The clocks of a timing, scripted call by call. Each model's call takes 0.02 ms by its events after a
    0.05 ms flush; the host clock sees both plus 0.01 ms of launch and sync. ``hidden_ms`` more for the
    candidate: its work on a side stream, unseen by the events, which ``in_flush`` puts ahead of the flush
    (a higher-priority stream: the flush's events stretch instead). ``burst(name, k)``: another process's
    work in that model's k-th call, stretching its host span and flush (``stretches_call``: its events
    instead, as time slicing does)."""

    method = "scripted"
    flush_bytes = 0

    def __init__(self, candidate, hidden_ms: float, in_flush: bool = False, burst=None, stretches_call=False) -> None:
        self.candidate = candidate
        self.hidden_ms = hidden_ms
        self.in_flush = in_flush
        self.burst = burst or (lambda name, k: 0.0)
        self.stretches_call = stretches_call
        self.counts = {"candidate": 0, "reference": 0}

    def sync(self) -> None:
        pass

    def time_call(self, fn):
        from engine.eval.timing import CallTime

        fn()
        name = "candidate" if fn is self.candidate else "reference"
        extra = self.burst(name, self.counts[name])
        self.counts[name] += 1
        hidden = self.hidden_ms if name == "candidate" else 0.0
        event = 0.02 + (extra if self.stretches_call else 0.0)
        flush = 0.05 + (0.0 if self.stretches_call else extra) + (hidden if self.in_flush else 0.0)
        return CallTime(event, event + flush + 0.01 + (0.0 if self.in_flush else hidden), flush)

    def time_once(self, fn) -> float:
        return self.time_call(fn).event_ms


PLAN = TimingPlan(min_trials=20, warmup_calls=1, warmup_s=0.0)


def _scripted_timing(hidden_ms: float, **clocks):
    """A timing on the scripted clocks, with them and the candidate."""
    import torch

    from engine.eval.timing import time_models

    def candidate() -> None:
        pass

    clock = _ScriptedClocks(candidate, hidden_ms, **clocks)
    return time_models(candidate, lambda: None, torch.device("cpu"), PLAN, clock), clock, candidate


def _timing_with_hidden_work(hidden_ms: float, **clocks):
    return _scripted_timing(hidden_ms, **clocks)[0]


def test_work_hidden_from_the_events_in_every_call_is_still_found() -> None:
    from engine.eval.timing_stage import hidden_work

    message = hidden_work(_timing_with_hidden_work(0.4))
    assert message is not None and "outside the timed stream" in message
    assert hidden_work(_timing_with_hidden_work(0.0)) is None


def test_work_put_ahead_of_the_flush_is_found_by_the_flush_it_stretched() -> None:
    """A high-priority side stream's blocks run before the flush's: the call's events see nothing and the
    flush ends later. Against the candidate's own flush the gap would stay at launch latency."""
    from engine.eval.timing_stage import hidden_work

    timing = _timing_with_hidden_work(0.4, in_flush=True)
    assert timing.candidate.flush_median_ms > timing.reference.flush_median_ms
    message = hidden_work(timing)
    assert message is not None and "ahead of the flush" in message
    assert hidden_work(_timing_with_hidden_work(0.0, in_flush=True)) is None


def test_another_process_stretching_calls_of_both_models_is_not_hidden_work() -> None:
    """A shared GPU: another process's work in a third of each model's calls, stretching their flushes
    (the gaps see it, in both models alike) or the calls themselves (both clocks see it: no gap)."""
    from engine.eval.timing_stage import hidden_work

    def burst(name: str, k: int) -> float:
        return 3.0 if k % 3 == 0 else 0.0

    for stretches_call in (False, True):
        timing = _timing_with_hidden_work(0.0, burst=burst, stretches_call=stretches_call)
        assert hidden_work(timing) is None, timing
    assert hidden_work(_timing_with_hidden_work(0.4, burst=burst)) is not None
