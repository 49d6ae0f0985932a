"""The standing facts every prompt of a session carries: the target, the correctness bar, the guard policy.

Why here and not in the templates: each of these is a setting that can change (another GPU, a
tolerance from ``cudaforge.toml``, ``--trials``, ``--guard strict``, a relaxed rule), and a template
that repeats a literal would silently tell the agents a different bar from the one the harness
applies. The loop fills a :class:`PromptContext` from the real settings (``EvalOptions``, the
EvalResult's recorded ``settings``, the spec table); the builders in :mod:`engine.agents.prompts`
only place the text. See ARCHITECTURE.md, "What each agent receives at each step".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.config import EvalConfig
from engine.eval.tolerances import DEFAULT_TOLERANCES
from engine.guard.rules import POLICIES

#: the trials count when nothing says otherwise: the config's default, which EvalOptions also takes
DEFAULT_TRIALS = EvalConfig.trials


def format_tolerance(tol: float) -> str:
    """1e-4 as "1e-4" (not "0.0001"), 0.05 as "5e-2": the way tolerances are usually written."""
    mantissa, exponent = f"{tol:e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


LOW_PRECISION = ("bfloat16", "float16")


def task_precision(source: str) -> tuple[str, ...]:
    """The 16-bit floating dtypes a task's source names (``torch.bfloat16``, ``torch.half``, …), in order.

    A task extracted from a bf16 or fp16 model says so in its own text (``self.to(torch.bfloat16)``, the
    dtype of every ``get_inputs()`` tensor), as KernelBench's precision option makes every tensor of a task
    that dtype; the agents are told, since the bar and the right accumulation follow from it.
    """
    import ast

    aliases = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16"}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            name = aliases.get(node.attr)
            if name and name not in found:
                found.append(name)
    return tuple(found)


@dataclass(frozen=True)
class Contract:
    """The correctness bar as the evaluator applies it: trials and a tolerance per output dtype, and the
    16-bit dtypes the task computes in, when it names any (``task_precision``)."""

    trials: int = DEFAULT_TRIALS
    tolerances: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    precision: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None, task_source: str = "") -> Contract:
        """From ``EvalOptions.settings()`` or an EvalResult's ``settings`` (missing keys: the defaults)."""
        settings = settings or {}
        tolerances = {**DEFAULT_TOLERANCES, **dict(settings.get("tolerances") or {})}
        trials = int(settings.get("trials") or DEFAULT_TRIALS)
        return cls(trials=trials, tolerances=tolerances, precision=task_precision(task_source))

    def precision_text(self) -> list[str]:
        if not self.precision:
            return []
        bars = ", ".join(f"{d} {format_tolerance(self.tolerances.get(d, DEFAULT_TOLERANCES[d]))}" for d in self.precision)
        return [
            f"- This task computes in {' and '.join(self.precision)}: its weights and floating inputs are that dtype,"
            f" and its outputs are compared at that dtype's tolerance ({bars}). Keep the outputs in that dtype;"
            " accumulate sums, norms and matmuls in float32 and round where the reference rounds (its"
            " intermediate results are that dtype too), so the rounding error stays the reference's own.",
        ]

    def text(self) -> str:
        tols = ", ".join(f"{dtype} {format_tolerance(tol)}" for dtype, tol in self.tolerances.items())
        fp32 = self.tolerances.get("float32", DEFAULT_TOLERANCES["float32"])
        return "\n".join(
            [
                "Correctness bar (what the harness checks on every version you write):",
                f"- {self.trials} trials, each with fresh random inputs from `get_inputs()` under a new seed;"
                " Model and ModelNew are built from the same seed, so their parameters match. The first"
                " failing trial fails the version.",
                "- Every output is compared (all tensors of a tuple, list or dict): same structure, shape and"
                " dtype, then elementwise |got - expected| <= tol + tol * |expected|, with tol per output"
                f" dtype: {tols}. Integer and bool outputs must match exactly; NaN or Inf never passes.",
                f"- With float32 at {format_tolerance(fp32)}, keep float32 arithmetic for float32 outputs: fast-math,"
                " TF32 or half-precision accumulation, or approximate functions that drift past that bar"
                " fail the check.",
                "- Your forward runs before and after the reference on the same inputs: it must not modify"
                " its inputs, and must return fresh outputs on every call.",
                *self.precision_text(),
            ]
        )


@dataclass(frozen=True)
class GuardChanges:
    """Rules a session changed from its policy: turned into refusals, or turned off."""

    refuse: tuple[str, ...] = ()
    relaxed: tuple[str, ...] = ()

    @classmethod
    def from_result(cls, result: Mapping[str, Any] | Any | None) -> GuardChanges:
        """From an EvalResult (object or dict); the fields may be absent in older results."""
        if result is None:
            return cls()
        get = result.get if isinstance(result, Mapping) else lambda k, d=None: getattr(result, k, d)
        return cls(tuple(get("guard_refuse", None) or ()), tuple(get("relaxed_rules", None) or ()))


@dataclass(frozen=True)
class PromptContext:
    """What a round's prompts carry beside the reference and the kernel.

    ``target``: the GPU spec block (or the CPU line); "" when nothing is known.
    ``history``: the rendered table of the branch's earlier rounds; "" before the first.
    """

    target: str = ""
    contract: Contract = field(default_factory=Contract)
    guard: GuardChanges = field(default_factory=GuardChanges)
    history: str = ""


def check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ValueError(f"guard policy must be one of {POLICIES}, not {policy!r}")


def _rule_list(rules: Iterable[str]) -> str:
    return ", ".join(f"`{r}`" for r in rules)


def guard_changes_text(changes: GuardChanges) -> str:
    lines = []
    if changes.refuse:
        lines.append(
            f"- This session refuses, beyond the policy: {_rule_list(changes.refuse)}; avoid what they name."
        )
    if changes.relaxed:
        lines.append(
            f"- This session does not enforce: {_rule_list(changes.relaxed)} (reported, not refused)."
        )
    return "\n".join(lines)
