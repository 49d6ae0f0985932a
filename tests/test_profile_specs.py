"""GPU spec table: name matching as drivers spell names, live-property specs, the prompt block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.profile import specs
from engine.profile.specs import format_for_prompt, from_device_properties, lookup, spec_for_device

REQUIRED_GPUS = {
    "h200", "h100_sxm", "h100_pcie", "a100_40gb", "a100_80gb", "l40s", "l4", "rtx_6000_ada",
    "quadro_rtx_6000", "rtx_4090", "rtx_3090", "t4", "a10g", "b200",
}  # fmt: skip


@pytest.mark.parametrize(
    ("device_name", "cc", "key"),
    [
        ("NVIDIA H200", (9, 0), "h200"),
        ("NVIDIA H100 80GB HBM3", (9, 0), "h100_sxm"),
        ("NVIDIA H100 PCIe", (9, 0), "h100_pcie"),
        ("NVIDIA A100-SXM4-80GB", (8, 0), "a100_80gb"),
        ("NVIDIA A100-SXM4-40GB", (8, 0), "a100_40gb"),
        ("NVIDIA A100 80GB PCIe", (8, 0), "a100_80gb_pcie"),
        ("Quadro RTX 6000", (7, 5), "quadro_rtx_6000"),
        ("NVIDIA RTX 6000 Ada Generation", (8, 9), "rtx_6000_ada"),
        ("NVIDIA GeForce RTX 4090", (8, 9), "rtx_4090"),
        ("NVIDIA GeForce RTX 3090", (8, 6), "rtx_3090"),
        ("Tesla T4", (7, 5), "t4"),
        ("NVIDIA A10G", (8, 6), "a10g"),
        ("NVIDIA L4", (8, 9), "l4"),
        ("NVIDIA L40S", (8, 9), "l40s"),
        ("NVIDIA B200", (10, 0), "b200"),
        ("NVIDIA H200", None, "h200"),
    ],
)
def test_lookup_matches_driver_names(device_name: str, cc: tuple[int, int] | None, key: str) -> None:
    spec = lookup(device_name, cc)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize(
    "device_name",
    [
        "NVIDIA GeForce RTX 3090 Ti",  # different board, different peaks
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA L40",  # not L40S
        "NVIDIA A10",  # not A10G
        "NVIDIA GH200 480GB",  # not H200
        "NVIDIA GB200",  # not B200
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",  # neither RTX 6000
        "NVIDIA H100 NVL",
    ],
)
def test_lookup_refuses_lookalikes(device_name: str) -> None:
    assert lookup(device_name) is None


def test_compute_capability_disagreement_rejects_a_name_match() -> None:
    # An "RTX 6000" reported with Ada's CC must not resolve to the Turing Quadro row.
    assert lookup("Quadro RTX 6000", (8, 9)) is None
    assert lookup("NVIDIA H200", (8, 0)) is None


def test_table_has_every_required_gpu_with_sources() -> None:
    rows = {s.key: s for s in specs.load_table()}
    assert set(rows) >= REQUIRED_GPUS
    for spec in rows.values():
        assert spec.source, spec.key
        assert spec.compute_capability is not None and spec.mem_bandwidth_gbs, spec.key
        assert spec.match, spec.key


def test_table_values_from_the_reference_notes() -> None:
    h200 = lookup("NVIDIA H200")
    assert (h200.sms, h200.mem_bandwidth_gbs, h200.l2_mib, h200.fp32_tflops, h200.bf16_tflops) == (
        132,
        4800,
        60,
        67,
        989,
    )
    quadro = lookup("Quadro RTX 6000")
    # Turing: no TF32 / BF16; the 261 "FP16" figure some tables carry is INT8 TOPS.
    assert quadro.tf32_tflops is None and quadro.bf16_tflops is None and quadro.fp16_tflops == 130.5
    assert lookup("NVIDIA A100-SXM4-40GB").mem_bandwidth_gbs == 1555
    # A10G compute peaks could not be confirmed: they are absent, not guessed.
    a10g = lookup("NVIDIA A10G")
    assert a10g.fp32_tflops is None and a10g.bf16_tflops is None and a10g.mem_bandwidth_gbs == 600


def test_ridge_point_is_peak_over_bandwidth() -> None:
    h200 = lookup("NVIDIA H200")
    assert h200.ridge_point("fp32") == pytest.approx(67e12 / 4800e9)
    assert h200.ridge_point("bf16") == pytest.approx(989e12 / 4800e9)
    assert lookup("NVIDIA A10G").ridge_point("fp32") is None


H200_PROPS = {
    "name": "NVIDIA H200",
    "major": 9,
    "minor": 0,
    "multi_processor_count": 132,
    "L2_cache_size": 62_914_560,
    "shared_memory_per_multiprocessor": 233_472,
    "shared_memory_per_block_optin": 232_448,
    "regs_per_multiprocessor": 65_536,
    "max_threads_per_multi_processor": 2048,
    "memory_clock_rate": 3_201_000,  # kHz
    "memory_bus_width": 6016,  # bits
    "total_memory": 150_110_011_392,
}


def test_from_device_properties_builds_a_partial_spec() -> None:
    props = dict(H200_PROPS, name="NVIDIA Future GPU 9000", major=12, minor=0)
    spec = from_device_properties(props)
    assert spec.compute_capability == (12, 0) and not spec.from_table
    assert spec.sms == 132 and spec.l2_mib == 60.0
    assert spec.smem_per_sm_kib == 228.0 and spec.smem_per_block_kib == 227.0
    assert spec.regs_per_sm == 65_536 and spec.max_threads_per_sm == 2048
    # 2 (DDR) × 3.201 GHz × 6016 bit / 8 = 4814.4 GB/s, as the reference notes compute for the H200.
    assert spec.mem_bandwidth_gbs == pytest.approx(4814.4, abs=0.1)
    assert spec.fp32_tflops is None and spec.bf16_tflops is None


def test_from_device_properties_without_memory_clock_leaves_bandwidth_unknown() -> None:
    props = {"name": "x", "major": 8, "minor": 6, "multi_processor_count": 80}
    spec = from_device_properties(props)
    assert spec.mem_bandwidth_gbs is None
    # CC facts fill what the properties lack.
    assert spec.smem_per_sm_kib == 100 and spec.max_threads_per_sm == 1536 and spec.max_blocks_per_sm == 16


def test_spec_for_device_overlays_live_values_on_the_table_row() -> None:
    props = dict(H200_PROPS, multi_processor_count=114)  # e.g. a MIG slice or a cut-down board
    spec = spec_for_device(props)
    assert spec.key == "h200" and spec.sms == 114 and spec.fp32_tflops == 67
    unknown = spec_for_device(dict(H200_PROPS, name="Mystery GPU", major=12))
    assert unknown.key == "device" and unknown.fp32_tflops is None


def test_format_for_prompt_is_compact_and_marks_unknowns() -> None:
    text = format_for_prompt(lookup("NVIDIA H200"))
    assert len(text.splitlines()) <= 6
    assert "NVIDIA H200" in text and "4,800 GB/s" in text and "FP32 67" in text and "BF16 989" in text
    assert "compute capability 9.0" in text and "132 SMs" in text
    assert "ridge point: 14.0 FLOP/byte" in text
    a10g = format_for_prompt(lookup("NVIDIA A10G"))
    assert re.search(r"FP32 n/a", a10g) and "SMs" in a10g and "n/a SMs" in a10g


def test_load_table_rejects_unknown_fields(tmp_path: Path) -> None:
    bad = tmp_path / "specs.toml"
    bad.write_text('[gpu.x]\nname = "X"\nmatch = ["x"]\nfp32_tflop = 1\n')
    with pytest.raises(ValueError, match="fp32_tflop"):
        specs.load_table(bad)
