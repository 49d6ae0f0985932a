"""What an approval decision rests on: the iteration the suggestion is about, in a few lines.

The approval used to be a decision made blind: the modal covered the kernel, its status and speedup
and the profile the Judge cited. :func:`gather_evidence` collects those from the iteration the
Judge looked at (the branch's latest), so the approval view can show them beside the suggestion:

* status and speedup (or the stage and first message of a failure);
* the measured values (profile.json) of the metrics the Judge cited, found by name in its
  ``key_metrics`` text; when it cited none we know, the first few measured ones;
* the kernel lines the suggestion names: ``line N`` references, and lines holding an identifier
  from the suggestion's own fields (``relu_kernel``, ``blockDim``, a backticked name …).

Pure functions over plain data (no Textual), so they are tested directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.agents.suggestion import OPTIMIZE_FIELDS, REPAIR_FIELDS

MAX_METRICS = 5
MAX_LINES = 8
# Words that look like identifiers in prose but name nothing in a kernel.
_COMMON = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "this",
        "that",
        "from",
        "into",
        "each",
        "than",
        "then",
        "when",
        "where",
        "which",
        "while",
        "kernel",
        "loop",
        "loads",
        "load",
        "store",
        "stores",
        "memory",
        "bound",
        "use",
        "using",
        "global",
        "shared",
        "float",
        "half",
        "thread",
        "threads",
        "block",
        "blocks",
        "warp",
        "warps",
        "value",
        "values",
        "index",
        "data",
        "input",
        "output",
        "inputs",
        "outputs",
        "access",
        "accesses",
        "per",
    ]
)
_LINE_REF = re.compile(r"\blines?\s+(\d+)(?:\s*(?:-|–|to)\s*(\d+))?", re.IGNORECASE)
_BACKTICKED = re.compile(r"`([^`\n]{2,60})`")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class MeasuredMetric:
    kernel: str
    name: str
    value: Any
    unit: str = ""


@dataclass
class KernelLine:
    number: int
    text: str


@dataclass
class ApprovalEvidence:
    """The facts beside an approval: iteration, verdict, measured metrics, named kernel lines."""

    iteration: int | None = None
    status: str = ""
    stage: str = ""
    speedup: float | None = None
    problem: str = ""  # the failure's first message (repair mode)
    timing: str = ""  # "kernel 0.012 ms · reference 0.021 ms"
    metrics: list[MeasuredMetric] = field(default_factory=list)
    metrics_cited: bool = False  # True: the metrics are the ones the Judge named
    lines: list[KernelLine] = field(default_factory=list)
    lines_named: bool = False  # True: the suggestion named them; False: the kernel's entry points

    def headline(self) -> str:
        """One line that fits in a title bar: ``iter 2 · correct · 1.80x``."""
        parts = [f"iter {self.iteration}"] if self.iteration is not None else []
        if self.status:
            parts.append(self.status.replace("_", " "))
        if self.speedup is not None:
            parts.append(f"{self.speedup:.2f}x")
        elif self.status and self.status != "correct" and self.stage:
            parts.append(f"stage {self.stage}")
        return " · ".join(parts)


def mode_fields(suggestion: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields of the suggestion's own mode (optimize never shows repair fields, nor the reverse)."""
    return REPAIR_FIELDS if suggestion.get("mode") == "repair" else OPTIMIZE_FIELDS


def suggestion_words(suggestion: Mapping[str, Any]) -> str:
    """The suggestion's own-mode text, joined (what it names is looked for in the kernel)."""
    parts: list[str] = []
    for key in mode_fields(suggestion):
        value = suggestion.get(key)
        if isinstance(value, (list, tuple)):
            parts.extend(str(v) for v in value)
        elif value:
            parts.append(str(value))
    if not parts and suggestion.get("text"):
        parts.append(str(suggestion["text"]))
    return "\n".join(parts)


def named_lines(kernel_source: str, text: str, limit: int = MAX_LINES) -> list[KernelLine]:
    """Kernel lines the text names: explicit line numbers first, then lines holding its identifiers."""
    source_lines = kernel_source.splitlines()
    chosen: dict[int, None] = {}
    for match in _LINE_REF.finditer(text):
        first = int(match.group(1))
        last = int(match.group(2) or first)
        for number in range(first, min(last, first + limit) + 1):
            if 1 <= number <= len(source_lines):
                chosen.setdefault(number)
    names = {m for b in _BACKTICKED.findall(text) for m in _IDENT.findall(b)}
    names |= {
        word
        for word in _IDENT.findall(text)
        if word.lower() not in _COMMON
        and len(word) >= 3
        and ("_" in word or any(c.isupper() or c.isdigit() for c in word[1:]))
    }
    names = {n for n in names if n.lower() not in _COMMON and len(n) >= 3}
    if names:
        pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b")
        for number, line in enumerate(source_lines, start=1):
            if len(chosen) >= limit:
                break
            if pattern.search(line) and line.strip():
                chosen.setdefault(number)
    return [KernelLine(n, source_lines[n - 1]) for n in sorted(chosen)[:limit]]


def entry_lines(kernel_source: str, limit: int = MAX_LINES) -> list[KernelLine]:
    """The kernel's entry points (``__global__`` functions, ``forward``): shown when nothing is named."""
    wanted = re.compile(r"__global__|\bdef forward\b")
    return [
        KernelLine(n, line)
        for n, line in enumerate(kernel_source.splitlines(), start=1)
        if wanted.search(line)
    ][:limit]


def measured_metrics(
    profile: Mapping[str, Any] | None, cited: Sequence[str], limit: int = MAX_METRICS
) -> tuple[list[MeasuredMetric], bool]:
    """Profile values of the metrics named in ``cited``; else the first few measured; and which it is."""
    table = (profile or {}).get("metrics") or {}
    every: list[MeasuredMetric] = []
    for kernel, metrics in table.items():
        if not isinstance(metrics, Mapping):
            continue
        for name, measured in metrics.items():
            value, unit = (
                (list(measured) + [""])[:2] if isinstance(measured, (list, tuple)) else (measured, "")
            )
            every.append(MeasuredMetric(str(kernel), str(name), value, str(unit or "")))
    text = "\n".join(str(c) for c in cited)
    picked = [m for m in every if m.name in text or m.name.split(".")[0] in text]
    if picked:
        return picked[:limit], True
    return every[:limit], False


def gather_evidence(
    suggestion: Mapping[str, Any],
    iteration: int | None,
    eval_result: Mapping[str, Any] | None,
    profile: Mapping[str, Any] | None,
    kernel_source: str,
) -> ApprovalEvidence:
    """The evidence for ``suggestion`` from the iteration it is about."""
    result = eval_result or {}
    evidence = ApprovalEvidence(
        iteration=iteration,
        status=str(result.get("status") or ""),
        stage=str(result.get("stage") or ""),
        speedup=result.get("speedup"),
    )
    messages = [str(m) for m in result.get("messages") or []]
    if evidence.status and evidence.status != "correct" and messages:
        evidence.problem = messages[0]
    timing = result.get("timing") or {}
    try:
        evidence.timing = f"kernel {timing['candidate']['median_ms']:.4g} ms · reference {timing['reference']['median_ms']:.4g} ms"
    except (KeyError, TypeError):
        evidence.timing = ""
    if suggestion.get("mode") != "repair":
        evidence.metrics, evidence.metrics_cited = measured_metrics(
            profile, suggestion.get("key_metrics") or []
        )
    evidence.lines = named_lines(kernel_source, suggestion_words(suggestion))
    evidence.lines_named = bool(evidence.lines)
    if not evidence.lines:
        evidence.lines = entry_lines(kernel_source)
    return evidence
