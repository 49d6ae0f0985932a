"""Findings and their summary: the JSON-able record of what the guards saw.

A finding names the rule, where (1-based line in the candidate file), why, its severity, and whether
the rule was relaxed for this run. The summary is what the evaluator acts on: refused or not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from engine.guard.rules import Severity


@dataclass(frozen=True)
class Finding:
    """One thing a guard noticed in a candidate."""

    rule: str
    severity: Severity
    line: int
    message: str
    relaxed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def blocks(self) -> bool:
        """True when this finding alone is enough to refuse the candidate."""
        return self.severity == "refuse" and not self.relaxed

    def __str__(self) -> str:
        tag = f"{self.severity}{', relaxed' if self.relaxed else ''}"
        return f"line {self.line}: [{self.rule}] ({tag}) {self.message}"


class GuardSummary(NamedTuple):
    """The verdict over a list of findings.

    `relaxed_rules` lists every rule that was off for this run: those relaxed in config (when passed to
    `summarize`) and any relaxed rule that fired, so a result records each protection that was off."""

    refused: bool
    refusals: list[Finding]
    warnings: list[Finding]
    relaxed_rules: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "refused": self.refused,
            "refusals": [f.to_dict() for f in self.refusals],
            "warnings": [f.to_dict() for f in self.warnings],
            "relaxed_rules": list(self.relaxed_rules),
        }

    def message(self) -> str:
        """A short human-readable verdict (for logs and the Judge's repair prompt)."""
        if not self.refused:
            return "guards passed" + (f" with {len(self.warnings)} warning(s)" if self.warnings else "")
        return "refused by the guards:\n" + "\n".join(f"  {f}" for f in self.refusals)


def summarize(findings: Iterable[Finding], relax: Iterable[str] = ()) -> GuardSummary:
    """Split findings into refusals (blocking) and warnings (everything else, relaxed refusals included),
    and list the relaxed rules (`relax`: the run's configured relaxations, recorded even when silent)."""
    items = list(findings)
    refusals = [f for f in items if f.blocks]
    warnings = [f for f in items if not f.blocks]
    relaxed = sorted({f.rule for f in items if f.relaxed} | set(relax))
    return GuardSummary(bool(refusals), refusals, warnings, relaxed)
