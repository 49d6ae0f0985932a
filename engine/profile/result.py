"""`ProfileResult`: everything one profiling attempt produced, as stored in the session repo's profile.json.

Why one record for all three outcomes (ncu / torch-profiler fallback / none): the loop, the Judge prompt and
the UI can then handle profiling uniformly, and the kind of feedback is always explicit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.profile.availability import ProfileUnavailable
from engine.profile.ncu_csv import MetricTable, RuleResult
from engine.profile.specs import GpuSpec, format_for_prompt
from engine.profile.summary import ProfileSummary

Kind = Literal["ncu", "torch-profiler", "none"]

FEEDBACK_KIND_LINES = {
    "ncu": "Hardware feedback: Nsight Compute counters for the candidate's own kernels (measured).",
    "torch-profiler": (
        "Hardware feedback: PyTorch profiler kernel times plus a roofline ESTIMATE; no hardware counters."
    ),
    "none": "Hardware feedback: none — the kernel could not be profiled.",
}


@dataclass
class ProfileResult:
    kind: Kind
    metrics: MetricTable = field(default_factory=dict)
    rules: list[RuleResult] = field(default_factory=list)
    summary: ProfileSummary | None = None
    unavailable: ProfileUnavailable | None = None
    duration_s: float | None = None
    command: list[str] = field(default_factory=list)
    launches: dict[str, int] = field(default_factory=dict)
    # seconds per phase ("ncu": the profiled run, "import": reading the report back), for benchmarks
    phases: dict[str, float] = field(default_factory=dict)

    def feedback_kind_line(self) -> str:
        """The sentence the Judge prompt starts its hardware section with."""
        line = FEEDBACK_KIND_LINES[self.kind]
        if self.unavailable is not None and self.kind != "ncu":
            line += f" Reason: {self.unavailable.reason} — {self.unavailable.message.splitlines()[0]}"
        return line

    def judge_block(self, spec: GpuSpec | None) -> str:
        """The hardware section of the Judge prompt: which feedback this is, the GPU, then the summary."""
        parts = [self.feedback_kind_line()]
        if spec is not None:
            parts.append(format_for_prompt(spec))
        if self.summary is not None:
            parts.append(self.summary.text)
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "metrics": {k: {m: [v, u] for m, (v, u) in ms.items()} for k, ms in self.metrics.items()},
            "rules": [r.to_dict() for r in self.rules],
            "summary": self.summary.to_dict() if self.summary else None,
            "unavailable": self.unavailable.to_dict() if self.unavailable else None,
            "duration_s": self.duration_s,
            "command": list(self.command),
            "launches": dict(self.launches),
            "phases": dict(self.phases),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileResult:
        return cls(
            kind=data["kind"],
            metrics={
                k: {m: (vu[0], vu[1]) for m, vu in ms.items()} for k, ms in data.get("metrics", {}).items()
            },
            rules=[RuleResult.from_dict(r) for r in data.get("rules", [])],
            summary=ProfileSummary.from_dict(data["summary"]) if data.get("summary") else None,
            unavailable=ProfileUnavailable.from_dict(data["unavailable"])
            if data.get("unavailable")
            else None,
            duration_s=data.get("duration_s"),
            command=list(data.get("command", [])),
            launches=dict(data.get("launches", {})),
            phases={k: float(v) for k, v in data.get("phases", {}).items()},
        )

    @classmethod
    def from_json(cls, text: str) -> ProfileResult:
        return cls.from_dict(json.loads(text))
