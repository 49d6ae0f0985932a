"""Profiling on the GPU: NCU metrics for the candidate's own kernels, and the PyTorch-profiler fallback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engine.profile.candidate import ProfileOptions, profile_candidate
from engine.profile.metrics import filled_paper_slots
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu

TASK = (EXAMPLES / "tasks" / "relu_large.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cuda.py").read_text()


def test_ncu_profiles_only_the_candidates_kernels(ext_cache: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    result, spec = profile_candidate(TASK, KERNEL, options=ProfileOptions(cache_root=ext_cache))
    elapsed = time.monotonic() - started
    assert result.kind == "ncu", result.unavailable
    assert list(result.metrics) and all("relu_kernel" in name for name in result.metrics)
    metrics = next(iter(result.metrics.values()))
    slots = filled_paper_slots(metrics)
    missing = [m for m, filled in slots.items() if filled is None]
    print(f"ncu profile: {elapsed:.1f} s wall, {len(metrics)} metrics, missing of the 24: {missing}")
    print(result.summary.text)
    assert spec is not None
    (tmp_path / "profile.json").write_text(json.dumps(result.to_dict()))
    assert not missing


def test_torch_profiler_fallback(ext_cache: Path) -> None:
    result, spec = profile_candidate(
        TASK, KERNEL, options=ProfileOptions(cache_root=ext_cache, use_ncu=False)
    )
    assert result.kind == "torch-profiler", result.unavailable
    assert "relu_kernel" in result.summary.text
    print(result.summary.text)
