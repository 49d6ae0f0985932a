"""What moved between two iterations: each own kernel's metrics side by side, the timing and the share.

Why (ARCHITECTURE.md §6, "What moved between two iterations"): a person comparing two kernel versions wants Nsight Compute's
baseline comparison, not two tables to read against each other. ``iteration_diff`` pairs the kernels
of two ``profile.json`` records by name and lists every collected metric with its change, largest
relative change first; the EvalResults give the timing change with both spreads and the own-kernel
share change. ``diff_lines`` is the text the workbench's diff view and the export show.

Kernels pair by their full name first; a kernel left over pairs with the other side's only kernel of
the same base name (the name before its parameter and template lists), so a changed signature still
compares. The metrics are those the Judge's table shows (``engine.profile.metric_table``): the raw page's
device attributes are left out. A value missing on one side, or not a number, is listed after the
numeric changes, never as a change of 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.profile.metric_table import _pair, format_value, metric_rows, requested_metrics

_BASE_NAME = re.compile(r"^[^(<]*")
VALUE_COLUMN = 13  # characters of a value column in ``diff_lines`` ("2.541 Tbyte/s")


@dataclass
class MetricChange:
    """One metric of one kernel on both sides; ``relative`` is (new - old) / |old| when both are numbers."""

    metric: str
    old: Any
    new: Any
    unit: str = ""
    note: str = ""

    @property
    def relative(self) -> float | None:
        if not (_is_number(self.old) and _is_number(self.new)):
            return None
        if self.old == 0:
            return 0.0 if self.new == 0 else float("inf")
        return (float(self.new) - float(self.old)) / abs(float(self.old))

    def change_text(self) -> str:
        relative = self.relative
        if relative is None:
            return (
                "n/a"
                if self.old is None or self.new is None
                else ("same" if self.old == self.new else "changed")
            )
        if relative == float("inf"):
            return "from 0"
        if self.old == self.new:
            return "same"
        return f"{relative:+.1%}"


@dataclass
class KernelDiff:
    """One kernel present on both sides (``old_name`` differs when it paired by base name)."""

    name: str
    old_name: str
    changes: list[MetricChange] = field(default_factory=list)


@dataclass
class IterationDiff:
    kernels: list[KernelDiff] = field(default_factory=list)
    only_old: list[str] = field(default_factory=list)  # kernels profiled only in the old iteration
    only_new: list[str] = field(default_factory=list)
    timing: list[str] = field(default_factory=list)  # lines: kernel time, reference time, speedup
    share: str = ""  # the own-kernel share change ("" when neither side measured it)
    missing: str = ""  # why there is no metric comparison (a side was not profiled)


_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"))


def compact_value(value: Any, unit: str = "") -> str:
    """A value short enough for a column beside its change: 4 significant digits, or whole numbers
    below a million, and a prefix above (2,541,292,388,108 byte/s is 2.541 Tbyte/s). The Judge's
    table keeps the full digits."""
    if not _is_number(value):
        return format_value(value, unit)
    unit = unit.strip()
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}".rstrip()
    text = f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return f"{text}%" if unit == "%" else (f"{text} {unit}" if unit else text)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _metrics(profile: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    if not profile or profile.get("kind") != "ncu":
        return {}
    return {str(k): dict(v or {}) for k, v in (profile.get("metrics") or {}).items()}


def _base(name: str) -> str:
    return _BASE_NAME.match(name).group(0).strip()  # type: ignore[union-attr]


def pair_kernels(old: list[str], new: list[str]) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(old, new) pairs, then the old and the new kernels left unpaired."""
    pairs = [(name, name) for name in new if name in old]
    left_old = [n for n in old if n not in new]
    left_new = [n for n in new if n not in old]
    for name in list(left_new):
        same_old = [o for o in left_old if _base(o) == _base(name)]
        same_new = [n for n in left_new if _base(n) == _base(name)]
        if len(same_old) == 1 and len(same_new) == 1:
            pairs.append((same_old[0], name))
            left_old.remove(same_old[0])
            left_new.remove(name)
    return pairs, left_old, left_new


def _order(change: MetricChange) -> tuple[int, float]:
    relative = change.relative
    if relative is None:
        return (1, 0.0)
    return (0, -abs(relative))


def _ms(value: Any) -> str:
    return f"{value:.4g} ms" if _is_number(value) else "n/a"


def _timing_lines(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    lines = []
    for side, label in (("candidate", "kernel time"), ("reference", "reference time")):
        a = ((old.get("timing") or {}).get(side)) or {}
        b = ((new.get("timing") or {}).get(side)) or {}
        if not a and not b:
            continue
        text = f"{label}: {_ms(a.get('median_ms'))} (IQR {_ms(a.get('iqr_ms'))}) → "
        text += f"{_ms(b.get('median_ms'))} (IQR {_ms(b.get('iqr_ms'))})"
        change = MetricChange(label, a.get("median_ms"), b.get("median_ms"))
        if change.relative is not None:
            text += f"  {change.change_text()}"
        lines.append(text)
    speedups = [r.get("speedup") for r in (old, new)]
    if any(_is_number(s) for s in speedups):
        lines.append("speedup: " + " → ".join(f"{s:.2f}x" if _is_number(s) else "n/a" for s in speedups))
    return lines


def _share_text(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    shares = [((r.get("kernel_share") or {}).get("share")) for r in (old, new)]
    if not any(_is_number(s) for s in shares):
        return ""
    text = "own-kernel share: " + " → ".join(f"{s:.0%}" if _is_number(s) else "n/a" for s in shares)
    if all(_is_number(s) for s in shares):
        text += f"  ({(shares[1] - shares[0]) * 100:+.0f} points)"
    return text


def iteration_diff(
    old_result: Mapping[str, Any],
    old_profile: Mapping[str, Any] | None,
    new_result: Mapping[str, Any],
    new_profile: Mapping[str, Any] | None,
) -> IterationDiff:
    """What moved from the old iteration to the new one (EvalResult and profile.json dicts)."""
    diff = IterationDiff(
        timing=_timing_lines(old_result, new_result), share=_share_text(old_result, new_result)
    )
    old_metrics, new_metrics = _metrics(old_profile), _metrics(new_profile)
    if not old_metrics or not new_metrics:
        unprofiled = [label for label, m in (("old", old_metrics), ("new", new_metrics)) if not m]
        diff.missing = f"no Nsight Compute metrics for the {' and the '.join(unprofiled)} iteration"
        return diff
    pairs, diff.only_old, diff.only_new = pair_kernels(list(old_metrics), list(new_metrics))
    requested = requested_metrics((new_profile or {}).get("command")) or requested_metrics(
        (old_profile or {}).get("command")
    )
    for old_name, new_name in pairs:
        both = {old_name: old_metrics[old_name], new_name: new_metrics[new_name]}
        present = {*old_metrics[old_name], *new_metrics[new_name]}
        rows = [(m, note) for m, note in metric_rows(both, requested) if m in present]
        if not rows:  # names the Judge's table does not know (a hand-made profile): all of them
            rows = [(m, "") for m in dict.fromkeys([*old_metrics[old_name], *new_metrics[new_name]])]
        kernel = KernelDiff(name=new_name, old_name=old_name)
        for metric, note in rows:
            a, unit_a = _pair(old_metrics[old_name].get(metric))
            b, unit_b = _pair(new_metrics[new_name].get(metric))
            if a is None and b is None:
                continue
            kernel.changes.append(MetricChange(metric, a, b, unit_b or unit_a, note))
        kernel.changes.sort(key=_order)
        diff.kernels.append(kernel)
    return diff


def diff_lines(diff: IterationDiff, old_label: str, new_label: str, limit: int | None = None) -> list[str]:
    """The comparison as text: timing and share first, then per kernel ``old → new  change  metric``,
    largest relative change first (``limit`` rows per kernel, the cut said)."""
    lines = [f"{old_label} → {new_label}"]
    lines += diff.timing or ["timing: not measured on either side"]
    if diff.share:
        lines.append(diff.share)
    if diff.missing:
        lines.append(diff.missing)
    for kernel in diff.kernels:
        lines.append("")
        renamed = f" (was {kernel.old_name})" if kernel.old_name != kernel.name else ""
        lines.append(f"kernel {kernel.name}{renamed}")
        shown = kernel.changes if limit is None else kernel.changes[:limit]
        # columns as wide as their values, to VALUE_COLUMN: a longer value ("16 register/thread") pushes
        # only its own row, so the metric names fit beside the values at 120 columns
        width_a = min(VALUE_COLUMN, max((len(compact_value(c.old, c.unit)) for c in shown), default=0))
        width_b = min(VALUE_COLUMN, max((len(compact_value(c.new, c.unit)) for c in shown), default=0))
        for change in shown:
            lines.append(
                f" {change.change_text():>8}  {compact_value(change.old, change.unit):>{width_a}}"
                f" → {compact_value(change.new, change.unit):>{width_b}}  {change.metric}"
            )
        if len(shown) < len(kernel.changes):
            lines.append(f" [... {len(kernel.changes) - len(shown)} smaller changes not shown ...]")
    for label, names in (("only in " + old_label, diff.only_old), ("only in " + new_label, diff.only_new)):
        if names:
            lines.append("")
            lines.append(f"{label}: " + ", ".join(names))
    return lines
