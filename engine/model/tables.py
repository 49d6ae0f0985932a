"""The terminal's view of a profile, an extraction and an apply: plain aligned text, 80 columns and up."""

from __future__ import annotations

from typing import Any

from engine.model import values


def ms(value: Any) -> str:
    """Milliseconds as every model view prints them (the terminal, the workbench, the report); "–" for none."""
    if not isinstance(value, (int, float)):
        return "–"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def pct(value: Any) -> str:
    """A share (0–1) as a percentage; "–" for none."""
    return f"{100 * value:.1f}%" if isinstance(value, (int, float)) else "–"


def tail(text: str, width: int) -> str:
    """``text`` in ``width`` columns, its end kept behind an ellipsis when cut: a kernel's path is told
    apart by its file name, not by the folders every path shares."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def short_type(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def rows_shown(profile: dict[str, Any], min_share: float, limit: int) -> list[dict[str, Any]]:
    """Modules in model order whose total share reaches ``min_share`` (the root always), at most ``limit``."""
    shown = [m for m in profile["modules"] if m["path"] == "" or m["share"]["total"] >= min_share]
    if len(shown) > limit:
        keep = {m["path"] for m in sorted(shown, key=lambda m: -m["share"]["total"])[:limit]}
        shown = [m for m in shown if m["path"] in keep]
    return shown


def label(path: str, shown: set[str]) -> tuple[int, str]:
    """(depth, name) of a row: its path from the nearest ancestor that is shown, indented under it."""
    if not path:
        return 0, "(model)"
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:cut]) in shown:
            return label(".".join(parts[:cut]), shown)[0] + 1, ".".join(parts[cut:])
    return 1, path


def profile_table(profile: dict[str, Any], min_share: float = 0.01, limit: int = 40) -> str:
    latency = profile["latency"]
    where = profile.get("gpu") or profile["device"]
    if profile["device"] == "cpu":  # operators' CPU time, inflated by the profiler on small operators
        spent = f"operators' time under the profiler {ms(profile['device_ms'])} ms per forward (its overhead inflates small operators: read the shares)"
    else:
        spent = f"device time {ms(profile['device_ms'])} ms per forward"
    lines = [
        f"{profile['model']} · {profile['dtype']} · {where}",
        f"forward {ms(latency['median_ms'])} ms (quartiles {ms(latency['q1_ms'])}–{ms(latency['q3_ms'])}, "
        f"{latency['runs']} runs) · {spent}",
        "",
        f"{'module':34} {'type':18} {'calls':>5} {'total':>6} {'self':>6} {'ms':>7} {'floor':>7} {'×floor':>6}  input",
    ]
    rows = rows_shown(profile, min_share, limit)
    shown = {m["path"] for m in rows}
    for m in rows:
        depth, text = label(m["path"], shown)
        name = ("  " * depth + text)[:34]
        floor = m.get("floor") or {}
        head = f"{m['headroom']:.1f}" if m.get("headroom") else "–"
        first = values.short(m["args"][0]) if m.get("args") else next((values.short(v) for v in (m.get("kwargs") or {}).values()), "")
        lines.append(
            f"{name:34} {short_type(m['type'])[:18]:18} {m['calls']:>5} {pct(m['share']['total']):>6} "
            f"{pct(m['share']['self']):>6} {ms(m['total_ms']):>7} {ms(floor.get('floor_ms')):>7} {head:>6}  {first[:28]}"
        )
    hidden = len(profile["modules"]) - len(rows_shown(profile, min_share, limit))
    if hidden:
        lines.append(f"({hidden} more modules under {100 * min_share:g}% of the device time; --json has every one)")
    if not profile.get("gpu_spec"):
        lines.append("floor: none (no spec-table GPU here); ×floor is the measured time over it where there is one")
    return "\n".join(lines)


def extraction_table(manifest: dict[str, Any]) -> str:
    lines = [f"{'task':24} {'modules':8} {'share':>6}  paths"]
    for task in manifest["tasks"]:
        paths = ", ".join(task["paths"][:4]) + (f", … ({len(task['paths'])})" if len(task["paths"]) > 4 else "")
        lines.append(f"{task['name'][:24]:24} {len(task['paths']):>8} {pct(task['share']):>6}  {paths}")
    for skip in manifest["skipped"]:
        lines.append(f"not extracted: {', '.join(skip['paths'][:3])} ({short_type(skip['type'])}, {pct(skip['share'])}): {skip['reason']}")
    return "\n".join(lines)


def _speedup(entry: dict[str, Any]) -> str:
    if entry.get("speedup") is None:
        return entry["status"]
    low_high = entry.get("interval")
    spread = f" ({low_high[0]:.2f}–{low_high[1]:.2f})" if low_high else ""
    return f"{entry['speedup']:.2f}x{spread}"


def apply_table(report: dict[str, Any]) -> str:
    lines = [f"{'kernel':28} {'task':20} {'modules':>7}  speedup on its task (quartile range)"]
    for k in report["kernels"]:
        lines.append(f"{tail(k['label'], 28):28} {tail(k['task'], 20):20} {len(k['paths']):>7}  {_speedup(k)}")
    whole = report.get("whole")
    if whole:
        lines.append("")
        lines.append(f"whole model: {whole['status']}" + (f" · end to end {_speedup(whole)} vs eager" if whole.get("speedup") else ""))
        tol = report.get("tolerance") or {}
        if tol.get("noise"):
            lines.append(
                f"  checked at {tol['dtype']} tolerance {tol['used']:.2g} (the eager model's own deviation from its "
                f"{tol['noise']['truth']} run is {tol['noise']['deviation']:.2g}; ×{tol['factor']:g}, never under the default {tol['default']:g})"
            )
        if whole.get("reference_ms"):
            lines.append(f"  eager {ms(whole['reference_ms'])} ms → with the kernels {ms(whole['candidate_ms'])} ms per forward")
        for mode, b in (whole.get("baselines") or {}).items():
            if b.get("speedup"):
                lines.append(f"  vs torch.compile {mode}: {b['speedup']:.2f}x (compiled {ms(b['compiled_ms'])} ms)")
            else:
                lines.append(f"  torch.compile {mode}: {b.get('error') or 'no usable measurement'}")
    if report.get("failure"):
        lines.append(f"refused: {report['failure']} (nothing was exported)")
    if report.get("exported"):
        lines.append(f"exported: {report['exported']}")
    return "\n".join(lines)
