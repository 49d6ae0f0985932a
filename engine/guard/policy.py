"""Guard policies: which rules refuse, and which only warn, for one run (DESIGN §3, "Guard policy").

Keeping an operator in PyTorch (a cuDNN convolution, a Linear, an addition) beside the candidate's own
kernels cannot fake a number: the timer sees that work. What fakes a number is hiding work from the
timer, caching, lazy outputs, patched torch, or an own kernel that does nothing. So:

- ``default`` follows KernelBench: the "PyTorch on the hot path" rules below are warnings, and the
  runtime share rule (``own-kernel-trivial``) refuses a candidate whose own kernels do no measurable work.
- ``strict`` demands full replacement: those rules refuse, as they did before policies existed.

Every other rule keeps the severity of its table (``engine.guard.rules``, ``engine.guard.runtime``).
Per run, ``relax`` turns a rule off (still reported, marked relaxed) and ``refuse`` turns a warning into
a refusal. Rule ids are a contract; an unknown id is an error that names the valid ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.config import GUARD_POLICIES

POLICIES: tuple[str, ...] = GUARD_POLICIES  # defined import-free in engine.config, for the TUI
DEFAULT_POLICY = "default"

# The rules that judge syntax ("PyTorch does this work"), not evidence; warnings under ``default``.
PARTIAL_REPLACEMENT_RULES: frozenset[str] = frozenset(
    {
        "torch-compute-in-forward",
        "functional-in-forward",
        "submodule-compute-in-forward",
        "tensor-arithmetic-in-forward",
        "torch-compute-in-extension",
    }
)


class GuardPolicyError(ValueError):
    """An unknown policy or rule id (a typo must not silently change what is enforced)."""


def all_rule_ids() -> dict[str, str]:
    """Every rule id (static and runtime) with its table severity."""
    from engine.guard.rules import RULES
    from engine.guard.runtime import RUNTIME_RULES

    return {**{rid: rule.severity for rid, rule in RULES.items()}, **RUNTIME_RULES}


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise GuardPolicyError(f"unknown guard policy {policy!r}; valid policies: {', '.join(POLICIES)}")
    return policy


def check_rule_ids(ids: Iterable[str], what: str = "guard rule") -> list[str]:
    """The ids in order, without duplicates; an unknown one raises, naming every valid id."""
    known = all_rule_ids()
    out: list[str] = []
    for rid in ids:
        if rid not in known:
            raise GuardPolicyError(f"unknown {what} id {rid!r}; valid rule ids: {', '.join(sorted(known))}")
        if rid not in out:
            out.append(rid)
    return out


def policy_severity(rule: str, policy: str, table_severity: str) -> str:
    """The severity of ``rule`` under ``policy`` before per-run changes."""
    if policy == "default" and rule in PARTIAL_REPLACEMENT_RULES:
        return "warn"
    return table_severity


@dataclass(frozen=True)
class GuardSettings:
    """One run's guard settings: the policy and the per-rule changes (relax wins over refuse)."""

    policy: str = DEFAULT_POLICY
    relax: tuple[str, ...] = ()
    refuse: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        check_policy(self.policy)
        object.__setattr__(self, "relax", tuple(check_rule_ids(self.relax)))
        object.__setattr__(self, "refuse", tuple(check_rule_ids(self.refuse)))

    def severity(self, rule: str) -> str:
        """``refuse`` or ``warn`` for this run (a relaxed rule keeps its severity but never blocks)."""
        if rule in self.refuse:
            return "refuse"
        return policy_severity(rule, self.policy, all_rule_ids()[rule])

    def changed(self) -> dict[str, list[str]]:
        """What differs from the policy's table: recorded in eval.json, session.toml and summaries."""
        return {"relax": list(self.relax), "refuse": list(self.refuse)}

    def label(self) -> str:
        """A short header text, e.g. ``guard default · relax output-cached · refuse timing-access``."""
        parts = [f"guard {self.policy}"]
        if self.relax:
            parts.append("relax " + ",".join(self.relax))
        if self.refuse:
            parts.append("refuse " + ",".join(self.refuse))
        return " · ".join(parts)


def severity_table(policy: str) -> dict[str, str]:
    """Every rule's severity under ``policy`` (for docs, ``check --json`` and tests)."""
    check_policy(policy)
    return {rid: policy_severity(rid, policy, sev) for rid, sev in sorted(all_rule_ids().items())}


def guard_label(policy: str, relax: Iterable[str] = (), refuse: Iterable[str] = ()) -> str:
    """``GuardSettings.label`` without validation (for displaying recorded settings)."""
    parts = [f"guard {policy or DEFAULT_POLICY}"]
    relax, refuse = list(relax), list(refuse)
    if relax:
        parts.append("relax " + ",".join(relax))
    if refuse:
        parts.append("refuse " + ",".join(refuse))
    return " · ".join(parts)
