"""GPU-memory-aware scheduling: footprints from the meta device, and a pool that keeps big tasks apart.

The pool is exercised with real threads (what phase 1 uses); no GPU is needed for either part.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from engine.evalset.memory import (
    MARGIN,
    PROCESS_OVERHEAD,
    UNKNOWN_EXTRA,
    GpuMemoryPool,
    estimate_footprint,
)

LINEAR_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, 2 * features)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    # 1.5 G floats: 6 GB that a meta-device estimate must not allocate
    return [torch.randn(3 * 2**19, 1024)]


def get_init_inputs():
    return [1024]
"""

DATA_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.nonzero()


def get_inputs():
    return [torch.tensor(list(range(10)))]  # a host list into a tensor: fine on meta; nonzero is not


def get_init_inputs():
    return []
"""


def test_footprint_of_a_six_gigabyte_task_is_estimated_without_allocating(tmp_path: Path) -> None:
    task = tmp_path / "linear.py"
    task.write_text(LINEAR_TASK)
    footprint = estimate_footprint(task)  # on the meta device: 6 GB were never allocated (the sizes say so)
    rows = 3 * 2**19
    assert footprint.input_bytes == rows * 1024 * 4
    assert footprint.output_bytes == rows * 2048 * 4
    assert footprint.param_bytes == (1024 * 2048 + 2048) * 4
    # the check's peak: three sets of inputs, five outputs, both models' parameters
    expected = PROCESS_OVERHEAD + int(
        MARGIN * (3 * footprint.input_bytes + 5 * footprint.output_bytes + 2 * footprint.param_bytes)
    )
    assert footprint.reserve_bytes == expected
    assert footprint.to_dict()["reserve_bytes"] == expected


def test_a_forward_that_meta_cannot_run_counts_its_output_as_input_sized(tmp_path: Path) -> None:
    task = tmp_path / "data.py"
    task.write_text(DATA_TASK)
    footprint = estimate_footprint(task)
    assert footprint.input_bytes == 10 * 8 and footprint.output_bytes is None
    assert "output taken as input-sized" in footprint.note
    assert footprint.reserve_bytes == PROCESS_OVERHEAD + int(MARGIN * (3 * 80 + 5 * 80))


def test_inputs_that_cannot_be_described_reserve_the_unknown_extra(tmp_path: Path) -> None:
    task = tmp_path / "file.py"
    task.write_text(
        DATA_TASK.replace("return [torch.tensor(list(range(10)))]", "return [open('/nonexistent').read()]")
    )
    footprint = estimate_footprint(task)
    assert footprint.input_bytes is None
    assert footprint.reserve_bytes == PROCESS_OVERHEAD + UNKNOWN_EXTRA


def _run(
    pool: GpuMemoryPool, jobs: list[tuple[str, int]], hold: float = 0.3
) -> dict[str, tuple[int, float, float]]:
    """Run each job on its own thread through the pool; (gpu, start, end) per job."""
    spans: dict[str, tuple[int, float, float]] = {}
    lock = threading.Lock()

    def job(name: str, need: int) -> None:
        picked = pool.acquire(need)
        assert picked is not None
        gpu, reserved = picked
        start = time.monotonic()
        time.sleep(hold)
        end = time.monotonic()
        pool.release(gpu, reserved)
        with lock:
            spans[name] = (gpu, start, end)

    threads = [threading.Thread(target=job, args=job_args) for job_args in jobs]
    for thread in threads:
        thread.start()
        time.sleep(0.02)  # submission order, as the phase-1 executor hands them out
    for thread in threads:
        thread.join(timeout=30)
    return spans


def _overlap(a: tuple[int, float, float], b: tuple[int, float, float]) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def test_tasks_that_do_not_fit_together_never_run_together() -> None:
    pool = GpuMemoryPool({0: 10})
    spans = _run(pool, [("big1", 6), ("big2", 6), ("small1", 2), ("small2", 2)])
    assert not _overlap(spans["big1"], spans["big2"])
    assert _overlap(spans["big1"], spans["small1"]) and _overlap(spans["small1"], spans["small2"])
    assert pool.peak[0] <= 10 and pool.used[0] == 0 and pool.running[0] == 0


def test_a_task_larger_than_the_budget_runs_alone_on_an_idle_gpu() -> None:
    pool = GpuMemoryPool({0: 10})
    spans = _run(pool, [("small", 2), ("huge", 25), ("after", 2)])
    assert not _overlap(spans["huge"], spans["small"]) and not _overlap(spans["huge"], spans["after"])
    assert pool.peak[0] == 25  # it held the whole GPU (its own estimate, above the budget)


def test_work_spreads_over_gpus_by_free_room() -> None:
    pool = GpuMemoryPool({0: 10, 1: 10})
    spans = _run(pool, [("a", 6), ("b", 6), ("c", 3)])
    assert spans["a"][0] != spans["b"][0]  # the second 6 fits only on the other GPU
    assert _overlap((0, spans["a"][1], spans["a"][2]), (0, spans["b"][1], spans["b"][2]))  # at the same time


def test_acquire_gives_up_when_stopping() -> None:
    pool = GpuMemoryPool({0: 10})
    held = pool.acquire(8)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert pool.acquire(8, stop) is None
    assert held is not None
    pool.release(*held)
