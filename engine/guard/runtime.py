"""Runtime guards: what the worker checks while the candidate runs (the static part cannot see these).

Each check is a small pure function over tensors so the worker stays readable and the checks are
testable on CPU. Rule ids (stable; ``engine.guard.rules.RUNTIME_RULES`` lists them with the static ones,
and a test keeps that list and this table the same; relax them per rule in config, and each relaxation
is recorded):

| rule | severity | what it catches |
|---|---|---|
| input-mutated | refuse | the candidate changed its inputs (and the reference does not) |
| output-aliases-input | refuse | an output shares storage with an input (no work, or in-place tricks) |
| output-cached | refuse | an output's storage is a previous call's output (results cached across calls) |
| output-not-tensor | refuse | an output is a Tensor subclass or another object posing as a tensor |
| no-own-kernel | refuse | on CUDA, none of the source's own ``__global__`` kernels launched in a forward |
| timing-disagreement | refuse | the host clock (device-wide sync) saw far more time than the events and the flush: hidden work |
| kernel-launch-unverified | warn | the launch check could not run (profiler unavailable) |
| own-kernel-trivial | refuse | on CUDA, for a candidate not built on the split path: the source's own kernels launched but took under ``OWN_SHARE_MIN`` of the forward's device time: the work is all in PyTorch |
| own-kernel-unneeded | refuse | on CUDA, split-built: with every own kernel's launch switched off the output still passes (engine.eval.ablation) |
| output-degenerate | refuse | on a weak output (a degenerate answer passes the tolerance): the candidate's is all zeros, a constant, an input returned, or the same for every trial's inputs (engine.eval.degenerate) |
| precision-changed | refuse | a numeric-mode flag (TF32, matmul precision, reduced-precision reductions, cuDNN benchmark) changed by the candidate (engine.eval.precision) |
| extension-load-failed | refuse | a ``load_inline`` call of the candidate's failed (build or load) and the candidate went on and returned results: whatever it computed, it was not with that extension |
| output-replayed | refuse | timing that cannot be replayed (engine.eval.replay): a timed call returned another input set's result or the same storage as a call on other inputs, or calls on inputs it had seen ran far faster than on new ones (a value-keyed memo) |
| l2-persisting | warn | on CUDA (refuses under `strict`), the persisting-L2 limit changed after a candidate call: put back, and the persisting lines reset, before every timed call (engine.eval.l2) |
| shape-specific | warn | correct at the task's shape but not at perturbed sizes the reference accepts (engine.eval.shapes); ``refuse`` it to make it a refusal |

A speedup above the review threshold is a *flag* (``EvalResult.flags``), never a refusal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


# Provisional (issue 14): an own-kernel share below this fraction of the forward's device time counts as
# "no measurable work". The lead sets the final value from benchmarks/guard_share.py on the H200.
OWN_SHARE_MIN = 0.01

# Host-clock vs event disagreement: honest forwards differ by their CPU overhead (tens of µs);
# work hidden on a side stream shows as much more (1.7 µs by events vs 258 µs by the host clock
# for one matmul, measured on an H200).
DISAGREEMENT_ABS_MS = 0.1
DISAGREEMENT_REL = 0.5


def runtime_finding(rule: str, message: str, relax: Iterable[str], refuse: Iterable[str]) -> dict[str, Any]:
    """The result's record of a runtime finding, with its severity under the run's ``refuse`` list and
    whether ``relax`` turned it off (the worker's and, for a worker that died late, the supervisor's)."""
    from engine.guard.rules import RUNTIME_RULES

    return {
        "rule": rule,
        "severity": "refuse" if rule in refuse else RUNTIME_RULES[rule],
        "line": None,
        "message": message,
        "relaxed": rule in relax,
        "source": "runtime",
    }


def refuses(finding: dict[str, Any]) -> bool:
    """True when the finding refuses the kernel: a refusal that was not relaxed."""
    return finding["severity"] == "refuse" and not finding["relaxed"]


def flatten_tensors(value: Any) -> list[Any]:
    """Every tensor-like leaf of a (nested) output or input list, in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in flatten_tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in flatten_tensors(item)]
    return []


def _storage_ptr(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-style equality that treats NaN as equal to NaN (inputs may legitimately hold NaN)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def mutated_inputs(pristine: list[Any], after: list[Any]) -> list[int]:
    """Positions of tensor inputs whose values changed during a call."""
    import torch

    changed = []
    for index, (before, now) in enumerate(zip(pristine, after, strict=True)):
        if (
            isinstance(before, torch.Tensor)
            and isinstance(now, torch.Tensor)
            and not same_values(before, now)
        ):
            changed.append(index)
    return changed


def aliased_outputs(outputs: Any, inputs: Iterable[Any]) -> list[int]:
    """Positions of output tensors that share storage with an input tensor."""
    input_ptrs = {_storage_ptr(t) for t in flatten_tensors(list(inputs)) if t.numel()}
    return [
        i for i, out in enumerate(flatten_tensors(outputs)) if out.numel() and _storage_ptr(out) in input_ptrs
    ]


def reused_outputs(outputs: Any, earlier_outputs: Iterable[Any]) -> list[int]:
    """Positions of output tensors whose storage is that of an earlier call's output (still alive)."""
    earlier = {_storage_ptr(t) for t in flatten_tensors(list(earlier_outputs)) if t.numel()}
    return [
        i for i, out in enumerate(flatten_tensors(outputs)) if out.numel() and _storage_ptr(out) in earlier
    ]


def non_tensor_outputs(outputs: Any) -> list[str]:
    """Type names of outputs posing as tensors: subclasses of ``torch.Tensor`` (exact type required)."""
    import torch

    return [type(t).__name__ for t in flatten_tensors(outputs) if type(t) is not torch.Tensor]


def disagreement_allowance(event_ms: float) -> float:
    """How far (ms) a candidate's median gap may pass the reference's before ``timing-disagreement``."""
    return DISAGREEMENT_ABS_MS + DISAGREEMENT_REL * event_ms


def timing_disagreement(event_ms: float, gap_ms: float | None, reference_gap_ms: float | None = None) -> str | None:
    """A message when the candidate's calls took the host clock far longer than their events saw, else None.

    ``gap_ms`` is the median over the timed calls of host time less the call's events and the reference's
    flush (engine.eval.timing.gaps). The reference is the control: timed the same way, interleaved, it
    cannot hide work, so its own gap (launch and sync latency, other processes on a shared GPU) is allowed
    to the candidate too. Only a gap well beyond that is refused.
    """
    if gap_ms is None:
        return None
    allowance = disagreement_allowance(event_ms)
    control = max(0.0, reference_gap_ms) if reference_gap_ms is not None else 0.0
    if gap_ms - control > allowance:
        return (
            f"the host clock with a device-wide sync measured {gap_ms:.4f} ms per call beyond the call's "
            f"{event_ms:.4f} ms by CUDA events and the L2 flush before it, where the reference's own calls "
            f"had {control:.4f} ms (allowed beyond that: {allowance:.4f} ms): work is running outside the "
            "timed stream (e.g. on a side stream, or ahead of the flush)"
        )
    return None


def own_kernels_in(launched: Iterable[str], own_names: Iterable[str]) -> list[str]:
    """The launched kernel names that are one of the candidate's own ``__global__`` functions."""
    patterns = [re.compile(rf"(^|[\s:&*]){re.escape(name)}(\b|$)") for name in own_names]
    return [name for name in launched if any(p.search(name) for p in patterns)]
