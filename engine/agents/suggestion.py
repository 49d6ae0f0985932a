"""The Judge's advice as data: what the human approves or edits and the Coder receives.

A ``Suggestion`` keeps every field the Judge gave (unknown keys in ``extra``), the raw reply, and
whether JSON was found at all; a reply with no JSON still makes a usable suggestion (its text).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Mode = Literal["repair", "optimize"]

REPAIR_FIELDS = ("critical_issue", "why_it_matters", "minimal_fix_hint")
OPTIMIZE_FIELDS = ("key_metrics", "bottleneck", "optimization_method", "modification_plan")
_LABELS = {
    "critical_issue": "Critical issue",
    "why_it_matters": "Why it matters",
    "minimal_fix_hint": "Minimal fix hint",
    "key_metrics": "Key metrics",
    "bottleneck": "Bottleneck",
    "optimization_method": "Optimization method",
    "modification_plan": "Modification plan",
}


@dataclass
class Suggestion:
    mode: Mode
    critical_issue: str | None = None
    why_it_matters: str | None = None
    minimal_fix_hint: str | None = None
    key_metrics: list[str] = field(default_factory=list)
    bottleneck: str | None = None
    optimization_method: str | None = None
    modification_plan: str | None = None
    #: keys the Judge added beyond the schema, kept as given.
    extra: dict[str, Any] = field(default_factory=dict)
    #: the reply without thinking blocks (the suggestion itself when no JSON was found).
    text: str = ""
    #: the reply exactly as received.
    raw: str = ""
    #: True when a JSON object with at least one known field was found.
    parsed: bool = False
    note: str = ""

    @classmethod
    def from_text(cls, mode: Mode, text: str) -> Suggestion:
        """A suggestion written by a human (or any free text)."""
        return cls(mode=mode, text=text.strip(), raw=text, parsed=False, note="free text")

    def fields_present(self) -> list[str]:
        return [name for name in REPAIR_FIELDS + OPTIMIZE_FIELDS if getattr(self, name)]

    def headline(self) -> str:
        """One line for lists, status bars and commit messages."""
        main = self.critical_issue if self.mode == "repair" else self.bottleneck
        main = main or self.critical_issue or self.bottleneck or self.optimization_method or self.text
        first = (main or "").strip().splitlines()
        return first[0][:160] if first else "(empty suggestion)"

    def for_coder(self) -> str:
        """The text the Coder's prompt carries: labelled fields, or the free text."""
        if not self.parsed:
            return self.text.strip()
        lines: list[str] = []
        order = REPAIR_FIELDS + OPTIMIZE_FIELDS if self.mode == "repair" else OPTIMIZE_FIELDS + REPAIR_FIELDS
        for name in order:
            value = getattr(self, name)
            if not value:
                continue
            if name == "key_metrics":
                lines.append(f"{_LABELS[name]}:")
                lines.extend(f"  - {m}" for m in value)
            else:
                lines.append(f"{_LABELS[name]}: {value}")
        for key, value in self.extra.items():
            rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines.append(f"{key.replace('_', ' ').capitalize()}: {rendered}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Suggestion:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
