"""Parse Nsight Compute's CSV exports: `--csv --page raw` (numbers) and `--csv --page details` (rule results).

Formats (ncu 2025.3.1, measured on an H200; see /work/shared/reference/ncu-timing-compile.md §1.6):
- raw: one header row (`"ID","Process ID",...,"Kernel Name",...,"<metric>",...`), one units row (empty for
  the launch-description columns, a unit such as "byte", "nsecond", "%" for each metric), then one row per
  profiled launch. Numbers may carry thousands separators ("2,097,152"); an uncollected value is "n/a".
- details: columns `ID, Process ID, Process Name, Host Name, Kernel Name, Context, Stream, Block Size,
  Grid Size, Device, CC, Section Name, Metric Name, Metric Unit, Metric Value, Rule Name, Rule Type,
  Rule Description, Estimated Speedup Type, Estimated Speedup`; rows with a Rule Name are rule results.
ncu mixes its own `==PROF==`/`==WARNING==`/`==ERROR==` lines, and the profiled program may print lines, into
the same stream; everything before the header row and every `==XXX==` line is ignored.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Value = int | float | str | None
MetricTable = dict[str, dict[str, tuple[Value, str]]]

# Launch-description columns of the raw page (anything else is a metric).
INFO_COLUMNS = {
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Kernel Time",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
    "Function Name",
    "Demangled Name",
    "Mangled Name",
}
_TOOL_LINE = re.compile(r"^\s*==[A-Z]+==")
_NUMBER = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][-+]?\d+)?$|^[-+]?\.\d+([eE][-+]?\d+)?$")


def parse_value(text: str) -> Value:
    """ "1,234" -> 1234, "12.5" -> 12.5, "n/a"/"" -> None, anything else stays a string."""
    s = text.strip()
    if s == "" or s.lower() in {"n/a", "na", "nan"}:
        return None
    if _NUMBER.match(s):
        plain = s.replace(",", "")
        if re.fullmatch(r"[-+]?\d+", plain):
            return int(plain)
        return float(plain)
    return s


def _csv_rows(text: str, required: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    """Header and data rows, skipping tool lines and anything printed before the header."""
    kept = "\n".join(line for line in text.splitlines() if not _TOOL_LINE.match(line))
    rows = list(csv.reader(io.StringIO(kept)))
    for idx, row in enumerate(rows):
        if all(col in row for col in required):
            header = row
            body = [r for r in rows[idx + 1 :] if len(r) == len(header)]
            return header, body
    return [], []


@dataclass
class Launch:
    """One profiled kernel launch from the raw page."""

    id: str
    kernel: str
    info: dict[str, str]
    metrics: dict[str, tuple[Value, str]]


def parse_raw_launches(text: str) -> list[Launch]:
    """Every launch row of a `--page raw --csv` export, in file order."""
    header, body = _csv_rows(text, ("ID", "Kernel Name"))
    if not header:
        return []
    units = [""] * len(header)
    if body and body[0][header.index("ID")].strip() == "":
        units, body = body[0], body[1:]
    launches = []
    for row in body:
        info: dict[str, str] = {}
        metrics: dict[str, tuple[Value, str]] = {}
        for col, unit, cell in zip(header, units, row, strict=True):
            if col in INFO_COLUMNS:
                info[col] = cell
            else:
                metrics[col] = (parse_value(cell), unit)
        launches.append(
            Launch(id=info.get("ID", ""), kernel=info.get("Kernel Name", ""), info=info, metrics=metrics)
        )
    return launches


def parse_raw_csv(text: str, repeated: Literal["last", "mean"] = "last") -> MetricTable:
    """`{kernel: {metric: (value, unit)}}` from a raw-page CSV.

    A kernel launched several times (several rows with the same Kernel Name) is folded into one entry:
    - "last" (default, as CudaForge does): the last launch's row. With a warm-up before the profiled call,
      the last launch is the one least affected by first-launch effects.
    - "mean": numeric metrics averaged over the launches that have a value; other values from the last row.
    `launch_counts()` tells how many rows each kernel had.
    """
    if repeated not in ("last", "mean"):
        raise ValueError(f"repeated must be 'last' or 'mean', not {repeated!r}")
    grouped: dict[str, list[Launch]] = {}
    for launch in parse_raw_launches(text):
        grouped.setdefault(launch.kernel, []).append(launch)
    table: MetricTable = {}
    for kernel, launches in grouped.items():
        merged = dict(launches[-1].metrics)
        if repeated == "mean" and len(launches) > 1:
            for metric, (_, unit) in merged.items():
                values = [
                    launch.metrics[metric][0]
                    for launch in launches
                    if metric in launch.metrics and isinstance(launch.metrics[metric][0], (int, float))
                ]
                if values:
                    merged[metric] = (sum(values) / len(values), unit)
        table[kernel] = merged
    return table


def launch_counts(text: str) -> dict[str, int]:
    """How many profiled launches each kernel had in a raw-page CSV."""
    counts: dict[str, int] = {}
    for launch in parse_raw_launches(text):
        counts[launch.kernel] = counts.get(launch.kernel, 0) + 1
    return counts


@dataclass
class RuleResult:
    """One rule result from the details page: ncu's own advice about one launch."""

    kernel: str
    section: str
    rule: str
    type: str
    message: str
    speedup_type: str | None = None
    speedup_pct: float | None = None
    launch_id: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleResult:
        return cls(**data)


def parse_details_csv(text: str) -> list[RuleResult]:
    """The rule-result rows of a `--page details --csv` export (section-metric rows are skipped)."""
    header, body = _csv_rows(text, ("Kernel Name", "Rule Name"))
    results = []
    for row in body:
        rec = dict(zip(header, row, strict=True))
        rule = rec.get("Rule Name", "").strip()
        if not rule:
            continue
        speedup = parse_value(rec.get("Estimated Speedup", "").replace("%", ""))
        results.append(
            RuleResult(
                kernel=rec.get("Kernel Name", ""),
                section=rec.get("Section Name", ""),
                rule=rule,
                type=rec.get("Rule Type", "").strip(),
                message=rec.get("Rule Description", "").strip(),
                speedup_type=(rec.get("Estimated Speedup Type") or "").strip() or None,
                speedup_pct=float(speedup) if isinstance(speedup, (int, float)) else None,
                launch_id=rec.get("ID", ""),
                extra={k: rec[k] for k in ("Block Size", "Grid Size") if rec.get(k)},
            )
        )
    return results
