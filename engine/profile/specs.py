"""GPU specifications: the datasheet table, name matching, and live device properties.

Why both: the driver reports SMs, L2, shared memory and registers, but never the peak FLOP/s a roofline
needs, so peaks come from `engine/data/gpu_specs.toml`; and a table can be wrong or stale for the exact
board in the machine, so live properties override the table's per-SM facts when they are available.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

KIB = 1024
MIB = 1024 * 1024

# Per-SM limits that are facts of the compute capability (CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability"). Used to fill a spec for a GPU that is not in the table.
CC_LIMITS: dict[tuple[int, int], dict[str, float]] = {
    (7, 0): {
        "smem_per_sm_kib": 96,
        "smem_per_block_kib": 96,
        "max_threads_per_sm": 2048,
        "max_blocks_per_sm": 32,
    },
    (7, 5): {
        "smem_per_sm_kib": 64,
        "smem_per_block_kib": 64,
        "max_threads_per_sm": 1024,
        "max_blocks_per_sm": 16,
    },
    (8, 0): {
        "smem_per_sm_kib": 164,
        "smem_per_block_kib": 163,
        "max_threads_per_sm": 2048,
        "max_blocks_per_sm": 32,
    },
    (8, 6): {
        "smem_per_sm_kib": 100,
        "smem_per_block_kib": 99,
        "max_threads_per_sm": 1536,
        "max_blocks_per_sm": 16,
    },
    (8, 9): {
        "smem_per_sm_kib": 100,
        "smem_per_block_kib": 99,
        "max_threads_per_sm": 1536,
        "max_blocks_per_sm": 24,
    },
    (9, 0): {
        "smem_per_sm_kib": 228,
        "smem_per_block_kib": 227,
        "max_threads_per_sm": 2048,
        "max_blocks_per_sm": 32,
    },
    (10, 0): {
        "smem_per_sm_kib": 228,
        "smem_per_block_kib": 227,
        "max_threads_per_sm": 2048,
        "max_blocks_per_sm": 32,
    },
}

ARCH_BY_MAJOR = {7: "Volta/Turing", 8: "Ampere/Ada", 9: "Hopper", 10: "Blackwell", 12: "Blackwell (consumer)"}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's numbers. Any field may be None: unknown is shown as "n/a", never as 0."""

    key: str
    name: str
    arch: str | None = None
    compute_capability: tuple[int, int] | None = None
    sms: int | None = None
    memory_gb: float | None = None
    memory_type: str | None = None
    mem_bandwidth_gbs: float | None = None
    l2_mib: float | None = None
    fp32_tflops: float | None = None
    tf32_tflops: float | None = None
    bf16_tflops: float | None = None
    fp16_tflops: float | None = None
    fp8_tflops: float | None = None
    smem_per_sm_kib: float | None = None
    smem_per_block_kib: float | None = None
    regs_per_sm: int | None = None
    max_threads_per_sm: int | None = None
    max_blocks_per_sm: int | None = None
    measured_bandwidth_gbs: float | None = None
    measured_bf16_tflops: float | None = None
    source: str = ""
    match: tuple[str, ...] = field(default=(), repr=False)
    from_table: bool = True

    def peak_tflops(self, precision: str) -> float | None:
        """The dense peak for `precision` ("fp32", "tf32", "bf16", "fp16", "fp8"); None when unknown."""
        return getattr(self, f"{precision}_tflops", None)

    def ridge_point(self, precision: str = "fp32") -> float | None:
        """FLOP per DRAM byte where the roofline bends: peak FLOP/s ÷ peak bandwidth."""
        peak = self.peak_tflops(precision)
        if peak is None or not self.mem_bandwidth_gbs:
            return None
        return peak * 1e12 / (self.mem_bandwidth_gbs * 1e9)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("match")
        if self.compute_capability is not None:
            data["compute_capability"] = list(self.compute_capability)
        return data


_FIELDS = {f.name for f in dataclasses.fields(GpuSpec)}


def normalize_name(name: str) -> str:
    """Lower case, '-'/'_' to spaces, spaces collapsed: "NVIDIA A100-SXM4-80GB" -> "nvidia a100 sxm4 80gb"."""
    return re.sub(r"\s+", " ", re.sub(r"[-_]", " ", name.lower())).strip()


def _spec_from_table_entry(key: str, entry: Mapping[str, Any]) -> GpuSpec:
    values = {k: v for k, v in entry.items() if k in _FIELDS}
    unknown = set(entry) - _FIELDS
    if unknown:
        raise ValueError(f"gpu_specs.toml [{key}]: unknown fields {sorted(unknown)}")
    if "compute_capability" in values:
        values["compute_capability"] = tuple(values["compute_capability"])
    values["match"] = tuple(values.get("match", ()))
    return GpuSpec(key=key, **values)


def load_table(path: str | Path | None = None) -> list[GpuSpec]:
    """All table rows, in file order (the order matters for matching)."""
    if path is None:
        text = resources.files("engine.data").joinpath("gpu_specs.toml").read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    return [_spec_from_table_entry(key, entry) for key, entry in data.get("gpu", {}).items()]


_TABLE: list[GpuSpec] | None = None


def table() -> list[GpuSpec]:
    global _TABLE
    if _TABLE is None:
        _TABLE = load_table()
    return _TABLE


def lookup(
    device_name: str,
    compute_capability: tuple[int, int] | None = None,
    specs: list[GpuSpec] | None = None,
) -> GpuSpec | None:
    """The table row for a device name as the driver spells it, or None.

    A row matches when one of its patterns is found in the normalised name and, if the caller knows the
    compute capability, the row's capability agrees — that is what keeps "Quadro RTX 6000" (Turing) apart
    from "RTX 6000 Ada" and a future part with a reused name from borrowing the wrong peaks.
    """
    norm = normalize_name(device_name)
    for spec in table() if specs is None else specs:
        known = compute_capability is not None and spec.compute_capability is not None
        if known and tuple(compute_capability) != spec.compute_capability:
            continue
        if any(re.search(p, norm) for p in spec.match):
            return spec
    return None


def _get(props: Mapping[str, Any], *names: str) -> Any:
    for n in names:
        if n in props and props[n] is not None:
            return props[n]
    return None


def from_device_properties(props: Mapping[str, Any]) -> GpuSpec:
    """A partial spec from `torch.cuda.get_device_properties` fields (as a dict), for GPUs not in the table.

    Peak FLOP/s stay None (the driver does not report them); bandwidth is derived when the memory clock
    (kHz) and bus width (bits) are given: 2 transfers per clock (DDR) × clock × bus width / 8.
    """
    name = str(_get(props, "name") or "unknown GPU")
    major, minor = _get(props, "major"), _get(props, "minor")
    cc = (int(major), int(minor)) if major is not None and minor is not None else None
    limits = CC_LIMITS.get(cc, {}) if cc else {}

    bandwidth = None
    clock_khz = _get(props, "memory_clock_rate", "memoryClockRate")
    bus_bits = _get(props, "memory_bus_width", "memoryBusWidth")
    if clock_khz and bus_bits:
        bandwidth = round(2 * float(clock_khz) * 1e3 * float(bus_bits) / 8 / 1e9, 1)

    l2 = _get(props, "L2_cache_size", "l2_cache_size", "l2CacheSize")
    smem_sm = _get(props, "shared_memory_per_multiprocessor", "sharedMemPerMultiprocessor")
    smem_block = _get(props, "shared_memory_per_block_optin", "sharedMemPerBlockOptin")
    total = _get(props, "total_memory", "totalGlobalMem")
    return GpuSpec(
        key="device",
        name=name,
        arch=ARCH_BY_MAJOR.get(cc[0]) if cc else None,
        compute_capability=cc,
        sms=_int_or_none(_get(props, "multi_processor_count", "multiProcessorCount")),
        memory_gb=round(total / 1e9, 1) if total else None,
        mem_bandwidth_gbs=bandwidth,
        l2_mib=round(l2 / MIB, 2) if l2 else None,
        smem_per_sm_kib=smem_sm / KIB if smem_sm else limits.get("smem_per_sm_kib"),
        smem_per_block_kib=smem_block / KIB if smem_block else limits.get("smem_per_block_kib"),
        regs_per_sm=_int_or_none(_get(props, "regs_per_multiprocessor", "regsPerMultiprocessor")),
        max_threads_per_sm=_int_or_none(
            _get(props, "max_threads_per_multi_processor", "maxThreadsPerMultiProcessor")
        )
        or _int_or_none(limits.get("max_threads_per_sm")),
        max_blocks_per_sm=_int_or_none(_get(props, "max_blocks_per_multi_processor"))
        or _int_or_none(limits.get("max_blocks_per_sm")),
        source="live device properties (peak FLOP/s unknown: not reported by the driver)",
        from_table=False,
    )


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def spec_for_device(props: Mapping[str, Any]) -> GpuSpec:
    """Table row (peaks) overlaid with live per-device facts; or the live partial spec if not in the table.

    Live values win for what the driver knows exactly (SMs, L2, shared memory, registers, threads), because
    a cut-down or differently configured board (MIG, a variant SKU) differs from the datasheet.
    """
    live = from_device_properties(props)
    row = lookup(live.name, live.compute_capability)
    if row is None:
        return live
    overlay = {
        k: getattr(live, k)
        for k in (
            "sms",
            "l2_mib",
            "smem_per_sm_kib",
            "smem_per_block_kib",
            "regs_per_sm",
            "max_threads_per_sm",
        )
        if getattr(live, k) is not None
    }
    return dataclasses.replace(row, **overlay)


def _fmt(v: float | None, unit: str = "", digits: int = 1) -> str:
    """Thousands separators; integers without decimals; None as "n/a"."""
    if v is None:
        return "n/a"
    text = f"{int(v):,}" if float(v).is_integer() else f"{v:,.{digits}f}"
    return f"{text}{unit}"


def format_for_prompt(spec: GpuSpec) -> str:
    """A compact block for the Judge: what the kernel can at best reach, and the per-SM budgets."""
    cc = f"{spec.compute_capability[0]}.{spec.compute_capability[1]}" if spec.compute_capability else "n/a"
    mem = f"{_fmt(spec.memory_gb)} GB {spec.memory_type or ''}".strip() if spec.memory_gb else "n/a"
    bw = _fmt(spec.mem_bandwidth_gbs, " GB/s")
    if spec.measured_bandwidth_gbs:
        bw += f" (measured ~{_fmt(spec.measured_bandwidth_gbs)} GB/s)"
    peaks = ", ".join(
        f"{label} {_fmt(spec.peak_tflops(p))}"
        for label, p in (("FP32", "fp32"), ("TF32", "tf32"), ("BF16", "bf16"), ("FP16", "fp16"))
    )
    ridge = spec.ridge_point("fp32")
    lines = [
        f"GPU: {spec.name} ({spec.arch or 'unknown arch'}, compute capability {cc}, {_fmt(spec.sms)} SMs)",
        f"Memory: {mem}, bandwidth {bw}; L2 {_fmt(spec.l2_mib, ' MiB')}",
        f"Peak dense TFLOP/s: {peaks} (TF32/BF16/FP16 on tensor cores)",
        f"Per SM: {_fmt(spec.smem_per_sm_kib, ' KiB')} shared memory (max {_fmt(spec.smem_per_block_kib, ' KiB')}"
        f" per block), {_fmt(spec.regs_per_sm)} registers, {_fmt(spec.max_threads_per_sm)} threads,"
        f" {_fmt(spec.max_blocks_per_sm)} blocks",
    ]
    if ridge is not None:
        lines.append(f"FP32 ridge point: {ridge:.1f} FLOP/byte (below it a kernel is memory-bound)")
    return "\n".join(lines)
