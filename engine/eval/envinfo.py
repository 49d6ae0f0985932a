"""Facts about the machine an evaluation ran on, recorded with every result.

Speedups only mean something next to the GPU, driver and library versions that produced them.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version, from /proc (cheap) or nvidia-smi; None without one."""
    proc = Path("/proc/driver/nvidia/version")
    if proc.is_file():
        match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", proc.read_text(errors="replace"))
        if match:
            return match.group(1)
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            return None
    return None


def collect(device: str) -> dict[str, Any]:
    """Environment of this process: Python, torch, CUDA and, on CUDA, the GPU it uses."""
    import torch

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": device,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(
            gpu=props.name,
            gpu_index=index,
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            gpu_memory_bytes=props.total_memory,
            l2_cache_bytes=getattr(props, "L2_cache_size", None),
            driver=driver_version(),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
    return info
