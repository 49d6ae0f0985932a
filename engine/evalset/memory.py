"""How much GPU memory a task's evaluation needs, and a pool that keeps concurrent checks within it.

Phase 1 checks kernels on the GPU several at a time. KernelBench-sized tasks take up to ~6 GB of
inputs each, so a fixed concurrency either wastes the GPU or runs out of memory (issue 18: two of
15 such evaluations did, run as six parallel ``cudaforge eval``). Instead each task's footprint is
estimated before anything runs, and an evaluation starts on a GPU only when its estimate fits in
what the other evaluations there have left.

**The estimate.** ``get_inputs()`` and the reference ``Model`` run on PyTorch's ``meta`` device
(shapes and dtypes, no storage; :mod:`engine.tasks` describes inputs the same way), which gives the
bytes of the inputs, of the parameters and of the output. The worker's check (``engine.eval.worker``)
holds at its peak three sets of inputs (the trial's, the reference's clone, and the previous
trial's while the next are made), five outputs (the candidate's before and after the reference,
the reference's, and the previous trial's two, kept alive on purpose) and both models' parameters,
so the reservation is ``PROCESS_OVERHEAD + MARGIN × (3·inputs + 5·outputs + 2·parameters)``, the
margin standing for the reference's intermediates and allocator rounding that we cannot see. It
is recorded with every result. A task whose forward does not run on ``meta`` counts its output as
large as its inputs; one whose inputs cannot be described at all reserves ``UNKNOWN_EXTRA`` on top
of the overhead.

**Measured peaks.** Every CUDA evaluation records its allocator's peak (``EvalResult.memory``). An
estimate from shapes cannot see a kernel's own workspaces or a reference's intermediates, so once a
task has been measured, its reservation is the larger of the estimate and ``PROCESS_OVERHEAD`` plus
the largest peak measured for it (:func:`measured_need`).

**The pool.** Per GPU, a budget of ``BUDGET_FRACTION`` of the memory free when the run starts. An
evaluation takes its reservation on the GPU with the most room that fits it; one larger than a
whole budget waits until its GPU is idle and then runs alone there. An evaluation that still ran
out of memory beside others (its result says ``oom-contention``) is run again alone
(:meth:`GpuMemoryPool.acquire_alone`): while it waits, nothing new starts.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GiB = 1 << 30
PROCESS_OVERHEAD = 1 * GiB  # a worker's CUDA context, allocator slack and library workspaces
INPUT_COPIES, OUTPUT_COPIES, PARAM_COPIES = 3, 5, 2  # what the check holds at its peak (see above)
MARGIN = 1.25
UNKNOWN_EXTRA = 4 * GiB
BUDGET_FRACTION = 0.9


@dataclass(frozen=True)
class Footprint:
    """Bytes of one task's tensors, as the meta device sees them (None where it could not tell)."""

    input_bytes: int | None
    output_bytes: int | None
    param_bytes: int | None
    note: str = ""

    @property
    def reserve_bytes(self) -> int:
        """What an evaluation of this task reserves on its GPU (see the module docstring)."""
        if self.input_bytes is None:
            return PROCESS_OVERHEAD + UNKNOWN_EXTRA
        outputs = self.output_bytes if self.output_bytes is not None else self.input_bytes
        working = (
            INPUT_COPIES * self.input_bytes + OUTPUT_COPIES * outputs + PARAM_COPIES * (self.param_bytes or 0)
        )
        return PROCESS_OVERHEAD + int(MARGIN * working)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reserve_bytes": self.reserve_bytes}


def measured_need(peak_reserved_bytes: int | None) -> int:
    """What an evaluation needs by its measured allocator peak (its CUDA context on top)."""
    return PROCESS_OVERHEAD + int(peak_reserved_bytes or 0) if peak_reserved_bytes else 0


def _tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (tensors, or lists/tuples/dicts of them)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


def estimate_footprint(task_path: Path) -> Footprint:
    """The task's footprint, from ``get_inputs()`` and ``Model`` on the meta device.

    Tasks are the user's trusted code (:mod:`engine.tasks`), so importing one here is fine.
    """
    import torch

    from engine.tasks import import_module_from_source

    try:
        module = import_module_from_source(task_path.read_text(encoding="utf-8"), str(task_path))
        with torch.device("meta"):
            inputs = list(module.get_inputs())
    except Exception as error:  # a task that builds inputs from real data: no estimate
        return Footprint(None, None, None, note=f"inputs not describable on meta: {type(error).__name__}")
    input_bytes = _tensor_bytes(inputs)
    try:
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
            param_bytes = _tensor_bytes(list(model.parameters())) + _tensor_bytes(list(model.buffers()))
    except Exception as error:
        return Footprint(
            input_bytes, None, None, note=f"Model not constructible on meta: {type(error).__name__}"
        )
    try:
        with torch.device("meta"), torch.no_grad():
            output_bytes: int | None = _tensor_bytes(model(*inputs))
        note = ""
    except Exception as error:  # an op without a meta kernel, or .item() on a meta tensor
        output_bytes, note = (
            None,
            f"forward not runnable on meta ({type(error).__name__}): output taken as input-sized",
        )
    return Footprint(input_bytes, output_bytes, param_bytes, note)


def gpu_free_bytes(index: int) -> tuple[int, int]:
    """(free, total) bytes of the GPU with this index (the index ``CUDA_VISIBLE_DEVICES`` takes).

    nvidia-smi first, so this process makes no CUDA context of its own; torch as the fallback.
    """
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [
                    smi,
                    "-i",
                    str(index),
                    "--query-gpu=memory.free,memory.total",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=20,
            )
            if out.returncode == 0 and out.stdout.strip():
                free, total = (
                    int(float(x)) * (1 << 20) for x in out.stdout.strip().splitlines()[0].split(",")
                )
                return free, total
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    import torch

    return torch.cuda.mem_get_info(index)


class GpuMemoryPool:
    """Reservations of GPU memory by concurrent evaluations, one budget per GPU (thread-safe)."""

    def __init__(self, budgets: dict[int, int]) -> None:
        if not budgets:
            raise ValueError("a GPU memory pool needs at least one GPU")
        self.budgets = dict(budgets)
        self.used = {gpu: 0 for gpu in budgets}
        self.running = {gpu: 0 for gpu in budgets}
        self.peak = {gpu: 0 for gpu in budgets}  # the largest total reserved at once, for the summary
        self.waiting_alone = 0  # evaluations waiting for an idle GPU: nothing new starts meanwhile
        self.waiting = 0  # evaluations waiting for room (an observable state: tests wait on it, not on a clock)
        self._cond = threading.Condition()

    def _pick(self, need: int, only: int | None = None) -> tuple[int, int] | None:
        if self.waiting_alone:
            return None
        fitting = [g for g in self.budgets if self.used[g] + need <= self.budgets[g] and only in (None, g)]
        if fitting:
            gpu = max(fitting, key=lambda g: self.budgets[g] - self.used[g])
            return gpu, need
        idle = [g for g in self.budgets if self.running[g] == 0 and need > self.budgets[g] and only in (None, g)]
        if idle:  # larger than a whole budget: alone on an idle GPU, holding all of it
            gpu = max(idle, key=lambda g: self.budgets[g])
            return gpu, max(need, self.budgets[gpu])
        return None

    def acquire(
        self, need: int, stop: threading.Event | None = None, only: int | None = None
    ) -> tuple[int, int] | None:
        """Block until ``need`` bytes fit on some GPU (``only`` that one, when given: its worker was started
        for it, has built and waits for it); (gpu, bytes reserved), or None when ``stop`` is set."""
        with self._cond:
            self.waiting += 1
            try:
                while True:
                    if stop is not None and stop.is_set():
                        return None
                    picked = self._pick(need, only)
                    if picked is not None:
                        gpu, reserved = picked
                        self.used[gpu] += reserved
                        self.running[gpu] += 1
                        self.peak[gpu] = max(self.peak[gpu], self.used[gpu])
                        return picked
                    self._cond.wait(timeout=0.5)
            finally:
                self.waiting -= 1

    def acquire_alone(
        self, stop: threading.Event | None = None, only: int | None = None
    ) -> tuple[int, int] | None:
        """Block until some GPU (``only`` that one, when given: its process was started for it) is idle,
        then hold all of its budget; None when ``stop`` is set."""
        with self._cond:
            self.waiting_alone += 1
            try:
                while True:
                    if stop is not None and stop.is_set():
                        return None
                    idle = [g for g in self.budgets if self.running[g] == 0 and only in (None, g)]
                    if idle:
                        gpu = max(idle, key=lambda g: self.budgets[g])
                        reserved = self.budgets[gpu]
                        self.used[gpu] += reserved
                        self.running[gpu] += 1
                        self.peak[gpu] = max(self.peak[gpu], self.used[gpu])
                        return gpu, reserved
                    self._cond.wait(timeout=0.5)
            finally:
                self.waiting_alone -= 1
                self._cond.notify_all()

    def release(self, gpu: int, reserved: int) -> None:
        with self._cond:
            self.used[gpu] -= reserved
            self.running[gpu] -= 1
            self._cond.notify_all()
