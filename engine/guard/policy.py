"""Guard policies: which rules refuse, and which only warn, for one run (ARCHITECTURE.md §3, "Guard policy").

Keeping an operator in PyTorch (a cuDNN convolution, a Linear, an addition) beside the candidate's own
kernels cannot fake a number: the timer sees that work. What fakes a number is hiding work from the
timer, caching, lazy outputs, patched torch, or an own kernel that does nothing. So:

- ``default`` follows KernelBench: the "PyTorch on the hot path" rules below are warnings, and the
  runtime share rule (``own-kernel-trivial``) refuses a candidate whose own kernels do no measurable work.
- ``strict`` demands full replacement: those rules refuse, as they did before policies existed.

Every other rule keeps the severity of its table (``engine.guard.rules``, ``engine.guard.runtime``).
Per run, ``relax`` turns a rule off (still reported, marked relaxed) and ``refuse`` turns a warning into
a refusal. Rule ids are a contract; an unknown id is an error that names the valid ones. The names (policies, rule
ids, which rules the policies treat differently) live in the import-free ``engine.guard.rules``, which the
config validates against; this module is what a run does with them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.guard.rules import (
    DEFAULT_POLICY,
    KERNELBENCH_LEVEL_RULES,
    PARTIAL_REPLACEMENT_RULES,
    RULES,
    RUNTIME_RULES,
    GuardPolicyError,
    all_rule_ids,
    check_policy,
    check_rule_ids,
)


def policy_severity(rule: str, policy: str, table_severity: str) -> str:
    """The severity of ``rule`` under ``policy`` before per-run changes."""
    if policy == "default" and (rule in PARTIAL_REPLACEMENT_RULES or rule in KERNELBENCH_LEVEL_RULES):
        return "warn"
    if policy == "strict" and rule in KERNELBENCH_LEVEL_RULES:
        return "refuse"
    return table_severity


@dataclass(frozen=True)
class GuardSettings:
    """One run's guard settings: the policy and the per-rule changes (relax wins over refuse).

    Built once per run from the config and the flags, it validates every id, and it partitions the ids
    for the two halves of the guard: the static guard (before the build) and the worker's runtime checks.
    """

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

    @property
    def static_relax(self) -> list[str]:
        return [r for r in self.relax if r in RULES]

    @property
    def runtime_relax(self) -> list[str]:
        return [r for r in self.relax if r in RUNTIME_RULES]

    @property
    def static_refuse(self) -> list[str]:
        return [r for r in self.refuse if r in RULES]

    @property
    def runtime_refuse(self) -> list[str]:
        """The runtime rules that refuse beyond their table severity: this run's ``refuse`` list, and
        under ``strict`` the KernelBench-level ones (the worker knows no policy, only this list)."""
        extra = [r for r in sorted(KERNELBENCH_LEVEL_RULES & RUNTIME_RULES.keys()) if self.severity(r) == "refuse"]
        return list(dict.fromkeys([*(r for r in self.refuse if r in RUNTIME_RULES), *extra]))

    def changed(self) -> dict[str, list[str]]:
        """What differs from the policy's table: recorded in eval.json, session.toml and summaries."""
        return {"relax": list(self.relax), "refuse": list(self.refuse)}

    def label(self) -> str:
        """A short header text, e.g. ``guard default · relax output-cached · refuse timing-access``."""
        return guard_label(self.policy, self.relax, self.refuse)


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


__all__ = ["GuardPolicyError", "GuardSettings", "guard_label", "policy_severity", "severity_table"]
