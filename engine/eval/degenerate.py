"""Weak outputs and degenerate answers (ARCHITECTURE.md §3, "Defences"; runs inside the worker).

The value check passes an element when ``|got − expected| ≤ atol + rtol·|expected|``. When a task's
outputs are small next to ``atol`` (a softmax over 16384 elements gives ~6e-5 each, fp32's atol is
1e-4), an all-zeros kernel passes it: the task is *weak* for that output. This module

- finds, from the reference's own outputs, which outputs a degenerate answer would pass: all zeros,
  a constant (the reference's mean), or an input passed through unchanged (``weak_outputs``), and
  which ones the reference's answer to other inputs passes (``input_blind_outputs``: recorded only);
- for those outputs only, adds a comparison that such an answer fails: the candidate's error over the
  reference's spread, over every trial's outputs together, so that a scalar output (a loss) is judged
  by how it follows its inputs from trial to trial (``SpreadCheck``);
- names a candidate output that *is* degenerate where the reference's is not (``degenerate_kind``),
  which the worker refuses with the runtime rule ``output-degenerate``.

An output whose spread is below what its dtype resolves (values ``1 + 1e-6·noise`` in fp16) is weak
but cannot be judged by spread: it is recorded as ``unresolvable`` and gets no added comparison, so an
honest kernel is never failed by quantisation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A weak output's candidate must stay within this fraction of the reference's spread (RMS error over
# RMS deviation from the mean). A constant at the mean scores exactly 1, zeros at least 1; honest fp32
# kernels measure ~1e-6, bf16 ones ~1e-2 (benchmarks/RESULTS.md, issue 25).
SPREAD_LIMIT = 0.1
# Spread below this many units in the last place of the output's largest value: quantisation, not signal.
RESOLVABLE_ULPS = 8
SAMPLE_LIMIT = 1 << 20  # elements kept per output per call for the spread (a fixed stride beyond)


def leaves(value: Any, where: str = "output") -> list[tuple[str, Any]]:
    """Every tensor in a (nested) output with the path ``compare`` uses in its messages."""
    import torch

    if isinstance(value, torch.Tensor):
        return [(where, value)]
    if isinstance(value, (list, tuple)):
        return [leaf for i, v in enumerate(value) for leaf in leaves(v, f"{where}[{i}]")]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in leaves(v, f"{where}[{k!r}]")]
    return []


def _passes(expected: Any, answer: Any, tolerances: dict[str, float]) -> bool:
    from engine.eval.compare import tensor_passes

    return tensor_passes(expected, answer, tolerances)


def _resolvable(tensor: Any, baseline: Any = None) -> bool:
    """Whether the output's deviation (from its mean, or from ``baseline``, an input it nearly equals)
    is larger than what its dtype resolves at its magnitude."""
    import torch

    if tensor.numel() <= 1:
        return True  # a scalar's spread is across trials, which SpreadCheck judges
    work = tensor.detach().double()
    if baseline is None:
        deviation = float(work.std(unbiased=False)) if work.numel() > 1 else 0.0
    else:
        deviation = float((work - baseline.detach().double().to(work.device)).pow(2).mean().sqrt())
    ulp = float(torch.finfo(tensor.dtype).eps) * float(work.pow(2).mean().sqrt())
    return deviation > RESOLVABLE_ULPS * ulp


def weak_outputs(expected: Any, inputs: list[Any], tolerances: dict[str, float]) -> list[dict[str, Any]]:
    """The outputs of one reference call that a degenerate answer would pass, with which answers.

    ``[{"output": path, "passes": ["zeros", "constant", "input[0]"], "checks": ["spread", "input[0]"]}]``:
    ``checks`` are the added comparisons the output's precision allows ("spread": error over the
    deviation from the mean; "input[i]": over the deviation from that input). Empty when every output
    tells a degenerate answer from the right one.
    """
    import torch

    tensors = [(f"input[{i}]", x) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    weak: list[dict[str, Any]] = []
    for where, ref in leaves(expected):
        if not ref.is_floating_point() or ref.numel() == 0:
            continue  # integers and booleans compare exactly: nothing degenerate passes them
        passing, checks = [], []
        if _passes(ref, torch.zeros_like(ref), tolerances):
            passing.append("zeros")
        if _passes(ref, torch.full_like(ref, float(ref.mean(dtype=torch.float64))), tolerances):
            passing.append("constant")
        if passing and _resolvable(ref):
            checks.append("spread")
        for name, x in tensors:
            if x.shape == ref.shape and x.dtype == ref.dtype and _passes(ref, x.to(ref.device), tolerances):
                passing.append(name)
                if _resolvable(ref, x):
                    checks.append(name)
        if passing:
            weak.append({"output": where, "passes": passing, "checks": checks})
    return weak


KEEP_PREVIOUS_BYTES = 1 << 30  # the reference check keeps one seed's output to compare the next with


def input_blind_outputs(expected: Any, other: Any, tolerances: dict[str, float]) -> list[dict[str, Any]]:
    """Outputs for which the reference's answer to *other* inputs passes: the task barely depends on its
    inputs there, so a kernel that ignores them (or whose work is not used) passes. Recorded, with no
    added check: how far an honest kernel may stray from inputs the output hardly follows is unknown.
    """
    others = dict(leaves(other))
    weak = []
    for where, ref in leaves(expected):
        if not ref.is_floating_point() or ref.numel() == 0 or where not in others:
            continue
        if others[where].shape == ref.shape and _passes(ref, others[where], tolerances) and not bool(
            (others[where] == ref).all()
        ):
            weak.append({"output": where, "passes": ["other-inputs"], "checks": []})
    return weak


def merge_weak(found: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One record per output over several reference calls: weak where any call was weak."""
    merged: dict[str, dict[str, Any]] = {}
    for records in found:
        for record in records:
            entry = merged.setdefault(record["output"], dict(record))
            entry["passes"] = list(dict.fromkeys([*entry["passes"], *record["passes"]]))
            if record["passes"] != ["other-inputs"]:  # that record adds a kind, never removes a check
                entry["checks"] = [c for c in entry["checks"] if c in record["checks"]]
    for entry in merged.values():  # "other-inputs" says something only where no simpler answer passes
        if len(entry["passes"]) > 1 and "other-inputs" in entry["passes"]:
            entry["passes"].remove("other-inputs")
    return list(merged.values())


def degenerate_kind(got: Any, expected: Any, inputs: list[Any]) -> str | None:
    """What makes the candidate tensor ``got`` degenerate where the reference's ``expected`` is not:
    "zeros", "constant" or "input[i]" (an input returned unchanged); None when it is not."""
    import torch

    if not isinstance(got, torch.Tensor) or got.numel() < 2 or got.shape != expected.shape:
        return None
    if bool((got == 0).all()) and not bool((expected == 0).all()):
        return "zeros"
    if bool((got == got.reshape(-1)[0]).all()) and not bool((expected == expected.reshape(-1)[0]).all()):
        return "constant"
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.shape == got.shape and x.dtype == got.dtype:
            x = x.to(got.device)
            if torch.equal(got, x) and not torch.equal(expected, x):
                return f"input[{i}]"
    return None


def first_degenerate(
    weak: list[dict[str, Any]], expected: Any, outputs: list[Any], inputs: list[Any]
) -> tuple[str, str] | None:
    """The first weak output that one of ``outputs`` answered degenerately: (its path, the kind)."""
    paths = {w["output"] for w in weak}
    if not paths:
        return None
    reference = dict(leaves(expected))
    for got in outputs:
        for where, tensor in leaves(got):
            kind = where in paths and where in reference and degenerate_kind(tensor, reference[where], inputs)
            if kind:
                return where, kind
    return None


def weak_failure(weak: list[dict[str, Any]], expected: Any, got: Any, inputs: list[Any]) -> str:
    """Why one output that passes the value check fails the weak-output checks ("" when it does not):
    the judgement of a single call (the ablation's, a shape's), where a trial's spans every trial."""
    degenerate = first_degenerate(weak, expected, [got], inputs)
    if degenerate:
        return f"{degenerate[0]} is degenerate ({degenerate[1]})"
    spread = SpreadCheck.for_weak(weak)
    spread.add(expected, got, inputs)
    failed = spread.failures()
    return f"{failed[0]['output']} fails the weak-output check" if failed else ""


def _sample(tensor: Any) -> Any:
    flat = tensor.detach().reshape(-1)
    if flat.numel() > SAMPLE_LIMIT:
        flat = flat[:: -(-flat.numel() // SAMPLE_LIMIT)]
    return flat.double().cpu()


@dataclass
class SpreadCheck:
    """The added comparisons for weak outputs, over every trial's calls together.

    ``checks`` maps an output's path to its comparisons ("spread", "input[i]"); each measures the
    candidate's RMS error over the reference's RMS deviation from its baseline (its mean, or input i).
    """

    checks: dict[str, list[str]]
    samples: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    @classmethod
    def for_weak(cls, weak: list[dict[str, Any]]) -> SpreadCheck:
        return cls({w["output"]: list(w["checks"]) for w in weak if w["checks"]})

    def add(self, expected: Any, got: Any, inputs: list[Any], key: Any = None) -> None:
        """One candidate call's outputs beside the reference's for the same inputs; ``key`` names the
        call's inputs (the trial's seed), so the float64 arbiter can draw them again
        (``engine.eval.arbiter``)."""
        if not self.checks:
            return
        candidate = dict(leaves(got))
        for where, ref in leaves(expected):
            if where not in self.checks or where not in candidate or candidate[where].shape != ref.shape:
                continue
            kept = self.samples.setdefault(where, {})
            kept.setdefault("expected", []).append(_sample(ref))
            kept.setdefault("got", []).append(_sample(candidate[where]))
            kept.setdefault("keys", []).append(key)
            for check in self.checks[where]:
                if check.startswith("input["):
                    kept.setdefault(check, []).append(_sample(inputs[int(check[6:-1])]))

    def failures(self) -> list[dict[str, Any]]:
        """``[{"output", "check", "relative_error", "constant_across_trials"}]`` for each failed check."""
        import torch

        failed = []
        for where, kept in self.samples.items():
            ref, cand = torch.cat(kept["expected"]), torch.cat(kept["got"])
            for check in self.checks[where]:
                baseline = ref.mean() if check == "spread" else torch.cat(kept[check])
                deviation = float((ref - baseline).norm())
                if deviation == 0.0:
                    continue  # the reference never moves from its baseline: nothing to follow
                error = float((cand - ref).norm()) / deviation
                if error > SPREAD_LIMIT:
                    failed.append(
                        {
                            "output": where,
                            "check": check,
                            "relative_error": error,
                            "constant_across_trials": float((cand - cand.mean()).norm()) == 0.0,
                        }
                    )
        return failed


def describe_weak(weak: list[dict[str, Any]]) -> str:
    """One line for people: which outputs are weak, and what would pass them."""
    parts = []
    for record in weak:
        how = ", ".join(record["passes"])
        note = "" if record["checks"] else " (below the dtype's resolution: no added check can judge it)"
        parts.append(f"{record['output']} ({how} would pass){note}")
    return "weak task: a degenerate answer passes the value check for " + "; ".join(parts)
