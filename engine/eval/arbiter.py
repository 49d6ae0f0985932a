"""The float64 arbiter for weak outputs (ARCHITECTURE.md §3, "Defences"; runs inside the worker).

A weak output (``engine.eval.degenerate``) is judged by the candidate's error over the float32
reference's spread. Where the exact answer is constant (KernelBench level 2 problem 41 ends in the mean
of group-normalized values: exactly 0), the float32 reference is its own rounding noise (~1e-8), so its
"spread" is noise too, and an honest kernel that rounds differently scores ~1.2: the spread rule cannot
tell rounding from a wrong answer. A float64 evaluation of the reference on the same inputs can: it is
the exact answer to rounding. This module

- runs the reference cast to float64 on inputs cast to float64 (``Float64Reference``), only when a weak
  output's check would fail the candidate, so honest ordinary tasks pay nothing;
- accepts the candidate for that output when its error to the float64 output is at most
  ``ROUNDING_MULTIPLE`` times the float32 reference's own error to it, plus ``FLOOR_ULPS`` units in the
  last place of the float64 output for the case where the float32 reference is exact (``judge``);
- says whether the exact answer is constant to rounding (the float32 reference deviates from its own
  mean no more than the multiple of its error to float64): then any output within rounding passes, and
  a speedup on the task is no evidence, which the result records (``EvalResult.arbiter``, a review flag).

Why it cannot rescue a wrong answer: acceptance needs the candidate within a few times the float32
reference's *rounding* error of the float64 truth. All zeros on a wide softmax (outputs ~6e-5, a float32
error ~1e-12) misses by seven orders of magnitude; a constant 1e-3 or noise 1000x the rounding on the
constant task misses too. A degenerate answer (zeros, a constant, an input) is rescued only where the
exact answer itself is constant to rounding. Where the float64 run is impossible (the reference fails or
does not compute in double, or gives another answer for the same seed), nothing changes and the verdict
says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

# Honest float32 reorderings of the KB L2-41 computation (two-pass and one-pass variance, sequential
# and reversed sums) measure 0.6-1.2x the float32 reference's own error to float64: independent
# roundings over many elements concentrate near 1x. 4x leaves room for a less careful honest kernel;
# a wrong answer on such a task is off by orders of magnitude (tests/test_arbiter_cpu.py).
ROUNDING_MULTIPLE = 4.0
# The floor where the float32 reference is exact (its error to float64 is 0): a few units in the last
# place of the output's dtype at the float64 output's magnitude, what a correctly rounded answer may miss.
FLOOR_ULPS = 8
CONSTANT_MESSAGE = "the exact answer is constant to rounding; any output within rounding passes"
# How reports mark such a task's results, and the legend line that says what the mark means.
CONSTANT_MARK = "≈0"
CONSTANT_LEGEND = (
    f"{CONSTANT_MARK}: the exact answer is constant to rounding (a float64 evaluation of the reference); "
    "any output within rounding passes, so the speedup is not evidence"
)


def review_flag(record: dict[str, Any]) -> str:
    """The review flag of a correct kernel whose task's exact answer is constant to rounding."""
    outputs = record.get("outputs") or []
    where = ", ".join(dict.fromkeys(o["output"] for o in outputs if o.get("constant") and o.get("accepted")))
    return (
        f"{where or 'an output'}: {CONSTANT_MESSAGE} (a float64 evaluation of the reference shows it), "
        "so a speedup on this task is not evidence of a faster correct kernel"
    )


def _to_double(value: Any) -> Any:
    """A floating tensor (nested in lists, tuples, dicts) cast to float64; anything else unchanged."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().double() if value.is_floating_point() else value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_double(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_double(v) for k, v in value.items()}
    return value


class Float64Reference:
    """The task's reference module cast to float64 (a private copy, made at the first call).

    ``unavailable`` says why it cannot serve (the copy or the double run raised, or the output it gives
    is not float64); then every call returns None and the spread rule decides alone."""

    def __init__(self, reference: Any, sync: Callable[[], None]) -> None:
        self.reference = reference
        self.sync = sync
        self.model: Any = None
        self.unavailable: str | None = None
        self.runs = 0

    def __call__(self, inputs: list[Any]) -> Any | None:
        import torch

        if self.unavailable is not None:
            return None
        previous = torch.get_default_dtype()
        try:
            if self.model is None:
                self.model = copy.deepcopy(self.reference).double()
            torch.set_default_dtype(torch.float64)  # tensors the forward makes itself are double too
            with torch.no_grad():
                output = self.model(*_to_double(inputs))
            self.sync()
        except Exception as error:  # noqa: BLE001 - an op without double support: the spread rule decides
            self.unavailable = f"the reference failed in float64: {type(error).__name__}: {str(error)[:300]}"
            return None
        finally:
            torch.set_default_dtype(previous)
        self.runs += 1
        return output

    def refuse_output(self, where: str, tensor: Any) -> None:
        """Mark the arbiter unavailable when the double run's output at ``where`` is not float64."""
        import torch

        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float64:
            kind = str(getattr(tensor, "dtype", type(tensor).__name__)).replace("torch.", "")
            self.unavailable = f"the reference does not compute {where} in float64 (it returns {kind})"


@dataclass
class Ruling:
    """The arbiter's judgement of one weak output, errors as root-mean-square over every value judged."""

    output: str
    accepted: bool
    constant: bool  # the exact answer is constant to rounding
    candidate_error: float  # the candidate's RMS error to the float64 output
    reference_error: float  # the float32 reference's RMS error to the float64 output
    allowed: float  # ROUNDING_MULTIPLE x reference_error + the floor

    def message(self) -> str:
        """One sentence for the result's messages."""
        ratio = self.candidate_error / self.reference_error if self.reference_error else float("inf")
        measured = (
            f"its error to a float64 evaluation of the reference is {self.candidate_error:.3g} RMS, "
            f"{ratio:.3g}x the float32 reference's own {self.reference_error:.3g} "
            f"(at most {ROUNDING_MULTIPLE:g}x passes)"
        )
        if not self.accepted:
            return f"{self.output}: the float64 arbiter does not rescue it: {measured}"
        case = f"{CONSTANT_MESSAGE}" if self.constant else "its error is at the level of rounding"
        return f"{self.output} passes by the float64 arbiter: {case}; {measured}"

    def record(self) -> dict[str, Any]:
        return asdict(self)


def judge(where: str, expected: Any, got: Any, truth: Any, dtype: Any) -> Ruling:
    """Rule on one output from float64 samples of the float32 reference (``expected``), the candidate
    (``got``) and the float64 reference (``truth``), all of one shape; ``dtype`` is the output's own."""
    import torch

    count = max(1, truth.numel())

    def rms(value: Any) -> float:
        return float(value.norm()) / count**0.5

    reference_error = rms(expected - truth)
    floor = FLOOR_ULPS * float(torch.finfo(dtype).eps) * rms(truth)
    allowed = ROUNDING_MULTIPLE * reference_error + floor
    candidate_error = rms(got - truth)
    deviation = rms(expected - expected.mean()) if expected.numel() else 0.0
    return Ruling(
        output=where,
        accepted=candidate_error <= allowed,
        constant=deviation <= ROUNDING_MULTIPLE * reference_error,
        candidate_error=candidate_error,
        reference_error=reference_error,
        allowed=allowed,
    )


@dataclass
class Arbitration:
    """What the arbiter found over one evaluation: ``EvalResult.arbiter``'s content."""

    rulings: list[Ruling]
    unavailable: str | None = None

    def accepts(self, where: str, degenerate: bool = False) -> bool:
        """Whether the candidate passes at ``where``; a degenerate answer only where the exact answer is
        constant to rounding (never on a task whose true output varies)."""
        return any(r.output == where and r.accepted and (r.constant or not degenerate) for r in self.rulings)

    def record(self) -> dict[str, Any]:
        return {
            "outputs": [r.record() for r in self.rulings],
            "constant_to_rounding": any(r.constant and r.accepted for r in self.rulings),
            "unavailable": self.unavailable,
        }


def judge_call(
    paths: list[str], expected: Any, outputs: list[Any], truth: Any, float64: Float64Reference
) -> Arbitration:
    """Rule on the outputs at ``paths`` of one call (``outputs``: the candidate's answers to it)."""
    import torch

    from engine.eval.degenerate import leaves

    reference, exact = dict(leaves(expected)), dict(leaves(truth))
    rulings = []
    for where in paths:
        if where not in reference or float64.unavailable:
            continue
        float64.refuse_output(where, exact.get(where))
        if float64.unavailable:
            break
        ref = reference[where]
        answers = [dict(leaves(got)).get(where) for got in outputs]
        if any(not isinstance(a, torch.Tensor) or a.shape != ref.shape for a in answers):
            continue
        rulings.append(
            judge(
                where,
                torch.cat([ref.detach().double().cpu().reshape(-1)] * len(answers)),
                torch.cat([a.detach().double().cpu().reshape(-1) for a in answers]),
                torch.cat([exact[where].detach().cpu().reshape(-1)] * len(answers)),
                ref.dtype,
            )
        )
    return Arbitration(rulings, float64.unavailable)


def judge_spread(
    spread: Any, paths: list[str], rerun: Callable[[Any], tuple[Any, Any] | None], float64: Float64Reference
) -> Arbitration:
    """Rule on the weak outputs at ``paths`` over every trial a ``SpreadCheck`` kept.

    ``rerun(key)`` draws that trial's inputs again (the same seed) and returns the float32 reference's
    output and the float64 reference's (None when the float64 run failed). The float32 one must equal the
    kept sample exactly, or the inputs or the reference are not reproducible and nothing is judged."""
    import torch

    from engine.eval.degenerate import _sample, leaves

    runs: dict[Any, tuple[dict[str, Any], dict[str, Any]] | None] = {}
    rulings = []
    for where in paths:
        kept = spread.samples.get(where)
        if not kept or float64.unavailable:
            continue
        truths, dtype = [], None
        for index, key in enumerate(kept["keys"]):
            if key not in runs:
                found = rerun(key)
                runs[key] = None if found is None else (dict(leaves(found[0])), dict(leaves(found[1])))
            if runs[key] is None:
                return Arbitration(rulings, float64.unavailable or "the float64 reference gave no output")
            again, exact = runs[key]
            if where not in again or not torch.equal(_sample(again[where]), kept["expected"][index]):
                float64.unavailable = (
                    "the reference's output was not the same when its inputs were drawn again from the "
                    "same seed (its inputs or its forward are not reproducible)"
                )
                return Arbitration(rulings, float64.unavailable)
            float64.refuse_output(where, exact.get(where))
            if float64.unavailable:
                return Arbitration(rulings, float64.unavailable)
            dtype = again[where].dtype
            truths.append(_sample(exact[where]))
        rulings.append(
            judge(where, torch.cat(kept["expected"]), torch.cat(kept["got"]), torch.cat(truths), dtype)
        )
    return Arbitration(rulings, float64.unavailable)
