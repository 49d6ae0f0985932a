"""Turn NCU metrics and rule results into a few lines for the Judge (and a JSON-able dict for the UI).

Why a summary rather than the dump: the paper's Judge did better with fewer numbers, and the raw numbers
mean little without the GPU's peaks. Per kernel we say where it sits on the roofline (achieved DRAM
bandwidth and FLOP/s against the datasheet peaks, arithmetic intensity against the ridge point), what
limits occupancy, the top stall reasons, and the few ncu rule results that are actionable. Anything not
measured is "n/a" — never 0, which would read as a measurement.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.profile.ncu_csv import MetricTable, RuleResult, Value
from engine.profile.specs import GpuSpec

LATENCY_THRESHOLD_PCT = 60.0

RULE_WHITELIST: tuple[str, ...] = (
    "SOLBottleneck",
    "CPIStall",
    "UncoalescedGlobalAccess",
    "UncoalescedSharedAccess",
    "SharedMemoryConflicts",
    "TheoreticalOccupancy",
    "AchievedOccupancy",
    "LaunchConfiguration",
    "WorkloadImbalance",
)

OCCUPANCY_LIMITS = {
    "launch__occupancy_limit_registers": "registers",
    "launch__occupancy_limit_shared_mem": "shared memory",
    "launch__occupancy_limit_warps": "warps per SM (block size)",
    "launch__occupancy_limit_blocks": "blocks per SM (blocks too small)",
    "launch__occupancy_limit_barriers": "barriers",
}
_STALL = re.compile(r"^smsp__warp_issue_stalled_(.+)_per_warp_active\.pct$")
_TIME_NS = {
    "nsecond": 1.0,
    "ns": 1.0,
    "usecond": 1e3,
    "us": 1e3,
    "msecond": 1e6,
    "ms": 1e6,
    "second": 1e9,
    "s": 1e9,
}
_BYTES = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12}
_PCT_KEYS_MEM = (
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)
_PCT_KEYS_COMPUTE = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
_PRECISIONS = {
    "fp32": ("fadd", "fmul", "ffma"),
    "fp64": ("dadd", "dmul", "dfma"),
    "fp16": ("hadd", "hmul", "hfma"),
}


@dataclass
class ProfileSummary:
    """What the Judge reads (`text`) and what the UI and profile.json keep (`data`)."""

    kind: str  # "ncu" | "torch-profiler" | "none"
    text: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "data": self.data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileSummary:
        return cls(kind=data["kind"], text=data["text"], data=dict(data.get("data", {})))


# ---------------------------------------------------------------------------------------------- helpers


def _num(metrics: Mapping[str, tuple[Value, str]], name: str) -> float | None:
    value = metrics.get(name, (None, ""))[0]
    return float(value) if isinstance(value, (int, float)) else None


def _scaled(metrics: Mapping[str, tuple[Value, str]], name: str, table: Mapping[str, float]) -> float | None:
    if name not in metrics:
        return None
    value, unit = metrics[name]
    if not isinstance(value, (int, float)):
        return None
    return float(value) * table.get(unit.strip().lower(), 1.0)


def _bytes_per_second(metrics: Mapping[str, tuple[Value, str]], name: str) -> float | None:
    if name not in metrics:
        return None
    value, unit = metrics[name]
    if not isinstance(value, (int, float)):
        return None
    prefix = unit.strip().lower().split("/")[0]
    return float(value) * _BYTES.get(prefix, 1.0)


def strip_markup(message: str) -> str:
    """ncu rule text without its link markup (`@section:Id:text@`, `@url:...@`, `@source:f:l:text@`)."""

    def repl(m: re.Match[str]) -> str:
        kind, body = m.group(1), m.group(2)
        parts = body.split(":")
        if kind == "url":
            words = [p for p in parts if p and p.lower() not in ("http", "https") and not p.startswith("//")]
            return ":".join(words)
        return parts[-1]

    text = re.sub(r"@(\w+):([^@]*)@", repl, message)
    return re.sub(r"\s+", " ", text).strip()


def format_time_ns(ns: float | None) -> str:
    """Nanoseconds as "8.2 µs" or "1.25 ms"; None as "n/a"."""
    if ns is None:
        return "n/a"
    if ns < 1e6:
        return f"{ns / 1e3:,.1f} µs"
    return f"{ns / 1e6:,.3g} ms"


def _fmt(v: float | None, fmt: str = ",.1f", suffix: str = "") -> str:
    return "n/a" if v is None else f"{v:{fmt}}{suffix}"


def _short(v: float | None) -> str:
    """67.0 -> "67", 4800 -> "4,800", 19.5 -> "19.5"."""
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def _pct(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return 100.0 * part / whole


# ---------------------------------------------------------------------------------------------- analysis


def kernel_facts(
    metrics: Mapping[str, tuple[Value, str]], spec: GpuSpec | None, time_ns: float | None = None
) -> dict[str, Any]:
    """The derived numbers for one kernel (None where an input is missing)."""
    if time_ns is None:
        time_ns = _scaled(metrics, "gpu__time_duration.sum", _TIME_NS)
    seconds = time_ns / 1e9 if time_ns else None

    dram_bytes = _dram_bytes(metrics)
    bw = (
        dram_bytes / seconds
        if dram_bytes is not None and seconds
        else _bytes_per_second(metrics, "dram__bytes.sum.per_second")
    )
    bw_gbs = bw / 1e9 if bw is not None else None
    peak_bw = spec.mem_bandwidth_gbs if spec else None

    flops_by_prec = _flops_by_precision(metrics)
    flops = sum(flops_by_prec.values()) if flops_by_prec else None
    precision = max(flops_by_prec, key=lambda p: flops_by_prec[p]) if flops_by_prec and flops else None
    tflops = flops / seconds / 1e12 if flops is not None and seconds else None
    peak_flops = spec.peak_tflops(precision) if spec and precision else None
    ai = flops / dram_bytes if flops is not None and dram_bytes else None
    ridge = spec.ridge_point(precision) if spec and precision else None

    bw_pct = _pct(bw_gbs, peak_bw)
    flop_pct = _pct(tflops, peak_flops)
    mem_candidates = [v for v in (bw_pct, *(_num(metrics, k) for k in _PCT_KEYS_MEM)) if v is not None]
    comp_candidates = [v for v in (flop_pct, *(_num(metrics, k) for k in _PCT_KEYS_COMPUTE)) if v is not None]
    mem_util = max(mem_candidates) if mem_candidates else None
    comp_util = max(comp_candidates) if comp_candidates else None

    limits, limiter = _occupancy_limits(metrics)
    stalls = _stalls(metrics)

    return {
        "time_ns": time_ns,
        "dram_bytes": dram_bytes,
        "dram_gbs": bw_gbs,
        "dram_pct_of_peak": bw_pct,
        "peak_bandwidth_gbs": peak_bw,
        "flops": flops,
        "flops_by_precision": flops_by_prec or None,
        "flop_precision": precision,
        "tflops": tflops,
        "peak_tflops": peak_flops,
        "flop_pct_of_peak": flop_pct,
        "arithmetic_intensity": ai,
        "ridge_point": ridge,
        "memory_util_pct": mem_util,
        "compute_util_pct": comp_util,
        "bound": classify_bound(mem_util, comp_util, ai, ridge),
        "tensor_pipe_pct": _num(metrics, "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active"),
        "occupancy_achieved_pct": _num(metrics, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        "occupancy_theoretical_pct": _num(metrics, "sm__maximum_warps_per_active_cycle_pct"),
        "occupancy_limits_blocks_per_sm": limits or None,
        "occupancy_limiter": limiter,
        "registers_per_thread": _num(metrics, "launch__registers_per_thread"),
        "top_stalls": stalls[:3],
    }


def roofline_position(facts: Mapping[str, Any]) -> tuple[str, float] | None:
    """(the roof that limits the kernel, the percentage of it reached) from its facts.

    With FLOPs counted: the lower of the compute roof (peak FLOP/s) and the memory roof (peak bandwidth
    × arithmetic intensity) at the kernel's intensity, and its achieved FLOP/s against that. With no
    FLOPs (a copy, a ReLU's compares), the memory roof: its DRAM bandwidth against the peak. None when
    neither can be said. The Judge, the workbench and the report all read it from here."""
    ai, tflops = facts.get("arithmetic_intensity"), facts.get("tflops")
    peak_flops, peak_bw = facts.get("peak_tflops"), facts.get("peak_bandwidth_gbs")
    if ai and tflops and peak_flops and peak_bw:
        memory_roof = peak_bw / 1000.0 * ai
        roof = min(peak_flops, memory_roof)
        return ("compute" if peak_flops <= memory_roof else "memory"), 100.0 * tflops / roof
    if facts.get("dram_pct_of_peak") is not None:
        return "memory", float(facts["dram_pct_of_peak"])
    return None


def _dram_bytes(metrics: Mapping[str, tuple[Value, str]]) -> float | None:
    """DRAM bytes moved: the total, or reads plus writes where only those were collected."""
    dram_bytes = _scaled(metrics, "dram__bytes.sum", _BYTES)
    if dram_bytes is None:
        read, write = (_scaled(metrics, f"dram__bytes_{d}.sum", _BYTES) for d in ("read", "write"))
        if read is not None and write is not None:
            dram_bytes = read + write
    return dram_bytes


def _flops_by_precision(metrics: Mapping[str, tuple[Value, str]]) -> dict[str, float]:
    """FLOPs per precision that has any instruction count (an FMA counts two); {} where none was collected."""
    flops_by_prec: dict[str, float] = {}
    for prec, (add, mul, fma) in _PRECISIONS.items():
        counts = [
            _num(metrics, f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum") for op in (add, mul, fma)
        ]
        if any(c is not None for c in counts):
            a, m, f = (c or 0.0 for c in counts)
            flops_by_prec[prec] = a + m + 2.0 * f
    return flops_by_prec


def _occupancy_limits(metrics: Mapping[str, tuple[Value, str]]) -> tuple[dict[str, float], str | None]:
    """(blocks per SM each resource allows, the lowest of them: "registers", or "a = b" on a tie)."""
    found = {label: _num(metrics, m) for m, label in OCCUPANCY_LIMITS.items()}
    limits = {k: v for k, v in found.items() if v is not None}
    limiter = None
    if limits:
        low = min(limits.values())
        limiter = " = ".join(k for k, v in limits.items() if v == low)
    return limits, limiter


def _stalls(metrics: Mapping[str, tuple[Value, str]]) -> list[tuple[str, float]]:
    """The warp stall reasons with their share, largest first."""
    stalls = []
    for name, (value, _unit) in metrics.items():
        m = _STALL.match(name)
        if m and isinstance(value, (int, float)):
            stalls.append((m.group(1), float(value)))
    stalls.sort(key=lambda s: -s[1])
    return stalls


def classify_bound(
    mem_util: float | None, comp_util: float | None, ai: float | None, ridge: float | None
) -> str:
    """ "memory-bound", "compute-bound", "latency-bound (neither > 60%)" or "unknown".

    A unit is busy when its utilisation (% of peak) exceeds 60%. Neither busy: the kernel waits on latency
    (too little parallelism, dependencies, launch overhead). One busy: that one bounds it. Both busy: the
    arithmetic intensity against the ridge point decides, or else the busier unit.
    """
    if mem_util is None and comp_util is None:
        return "unknown"
    mem_busy = mem_util is not None and mem_util > LATENCY_THRESHOLD_PCT
    comp_busy = comp_util is not None and comp_util > LATENCY_THRESHOLD_PCT
    if not mem_busy and not comp_busy:
        return "latency-bound (neither > 60%)"
    if mem_busy != comp_busy:
        return "memory-bound" if mem_busy else "compute-bound"
    if ai is not None and ridge is not None:
        return "memory-bound" if ai < ridge else "compute-bound"
    return "memory-bound" if (mem_util or 0) >= (comp_util or 0) else "compute-bound"


def select_rules(
    rules: Sequence[RuleResult], kernel: str, whitelist: Sequence[str] = RULE_WHITELIST
) -> list[RuleResult]:
    """The whitelisted rule results with a message for one kernel, one per rule, biggest speedup first."""
    by_rule: dict[str, RuleResult] = {}
    for r in rules:
        if r.kernel == kernel and r.rule in whitelist and r.message.strip():
            by_rule[r.rule] = r  # the last launch's result wins
    return sorted(by_rule.values(), key=lambda r: -(r.speedup_pct if r.speedup_pct is not None else -1.0))


def format_rule(rule: RuleResult, max_chars: int = 220) -> str:
    msg = strip_markup(rule.message)
    if len(msg) > max_chars:
        msg = msg[: max_chars - 1].rstrip() + "…"
    speed = f" (ncu est. speedup: up to {rule.speedup_pct:.0f}%)" if rule.speedup_pct else ""
    return f"[{rule.type or 'INF'}] {rule.rule}: {msg}{speed}"


def _kernel_lines(name: str, f: dict[str, Any], launches: int | None) -> list[str]:
    times = f" ×{launches} launches (last shown)" if launches and launches > 1 else ""
    head = f"- {name}{times}: {format_time_ns(f['time_ns'])}, {f['bound']}"
    if f["arithmetic_intensity"] is not None and f["ridge_point"] is not None:
        rel = "<" if f["arithmetic_intensity"] < f["ridge_point"] else "≥"
        head += (
            f" (AI {f['arithmetic_intensity']:.2f} FLOP/B {rel} {f['flop_precision'].upper()} ridge"
            f" {f['ridge_point']:.1f})"
        )
    position = roofline_position(f)
    if position is not None:
        head += f"; roofline: {position[1]:.0f}% of the {position[0]} roof"
    dram = f"DRAM {_fmt(f['dram_gbs'], ',.0f', ' GB/s')}"
    if f["dram_pct_of_peak"] is not None:
        dram += f" = {f['dram_pct_of_peak']:.0f}% of {_short(f['peak_bandwidth_gbs'])}"
    prec = f["flop_precision"].upper() if f["flop_precision"] else "FLOP/s"
    flop = f"{prec} {_fmt(f['tflops'], ',.2f', ' TFLOP/s')}" if f["tflops"] is not None else "FLOP/s n/a"
    if f["flop_pct_of_peak"] is not None:
        flop += f" = {f['flop_pct_of_peak']:.1f}% of {_short(f['peak_tflops'])}"
    elif f["tflops"] is not None:
        flop += " (peak n/a)"
    if f["tensor_pipe_pct"]:
        flop += f"; tensor pipe {f['tensor_pipe_pct']:.0f}% busy (tensor FLOPs not counted)"
    util = f"busy: memory {_fmt(f['memory_util_pct'], '.0f', '%')} / compute {_fmt(f['compute_util_pct'], '.0f', '%')}"
    occ = (
        f"occupancy {_fmt(f['occupancy_achieved_pct'], '.0f', '%')} achieved"
        f" / {_fmt(f['occupancy_theoretical_pct'], '.0f', '%')} theoretical,"
        f" limited by {f['occupancy_limiter'] or 'n/a'}; {_fmt(f['registers_per_thread'], '.0f')} regs/thread"
    )
    stalls = ", ".join(f"{n} {v:.0f}%" for n, v in f["top_stalls"]) or "n/a"
    return [head, f"  {dram} · {flop} · {util}", f"  {occ}; top stalls (% of active warps): {stalls}"]


def summarize(
    metrics_by_kernel: MetricTable,
    rules: Sequence[RuleResult],
    spec: GpuSpec | None,
    duration_ms: float | None = None,
    *,
    launches: Mapping[str, int] | None = None,
    max_lines: int = 12,
    rules_per_kernel: int = 2,
) -> ProfileSummary:
    """A few lines about the profiled kernels, slowest first.

    `duration_ms` is the candidate's forward time from the evaluator; it puts the kernels' own time in
    context, and stands in for a kernel's duration when ncu did not report one and only one kernel exists.
    """
    launches = launches or {}
    facts = {}
    for name, metrics in metrics_by_kernel.items():
        fallback_ns = duration_ms * 1e6 if duration_ms and len(metrics_by_kernel) == 1 else None
        if "gpu__time_duration.sum" in metrics and _num(metrics, "gpu__time_duration.sum") is not None:
            fallback_ns = None
        facts[name] = kernel_facts(metrics, spec, fallback_ns)
    order = sorted(facts, key=lambda k: -(facts[k]["time_ns"] or -1.0))

    gpu = spec.name if spec else "unknown GPU"
    header = f"Nsight Compute: {len(facts)} kernel(s) on {gpu}"
    if duration_ms:
        header += f"; the forward call takes {duration_ms:,.3g} ms"
    lines = [header + ". % = share of peak (busy = max of ncu SOL and datasheet rate); n/a = not measured."]
    if not facts:
        lines.append("No kernel results were collected.")

    budget = max_lines - 1
    for i, name in enumerate(order):
        remaining = len(order) - i - 1
        reserve = 1 if remaining else 0
        if budget - reserve < 3:
            rest = order[i:]
            lines.append(
                f"+ {len(rest)} more kernel(s): "
                + ", ".join(f"{k} ({format_time_ns(facts[k]['time_ns'])})" for k in rest[:4])
                + (" …" if len(rest) > 4 else "")
            )
            break
        block = _kernel_lines(name, facts[name], launches.get(name))
        selected = select_rules(rules, name)
        room = budget - reserve - len(block)
        if remaining:
            room -= 3  # leave the next kernel its three lines when possible
        for r in selected[: max(0, min(rules_per_kernel if i == 0 else 1, room))]:
            block.append("  " + format_rule(r))
        lines.extend(block)
        budget -= len(block)

    data = {
        "kind": "ncu",
        "gpu": gpu,
        "duration_ms": duration_ms,
        "kernels": [
            {
                "name": k,
                "launches": launches.get(k),
                **facts[k],
                "top_stalls": [list(s) for s in facts[k]["top_stalls"]],
                "rules": [r.to_dict() for r in select_rules(rules, k)],
            }
            for k in order
        ],
    }
    return ProfileSummary(kind="ncu", text="\n".join(lines), data=data)
