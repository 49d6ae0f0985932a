"""How an exploration's branches share the machine's GPUs (ARCHITECTURE.md §2, "Explore").

Branches run side by side, so their evaluations would meet on the same GPUs. They are split as an
evalset's are (engine.evalset.scheduler), and for the same reason, a timing disturbed by a neighbour
is no timing:

* **check**: the build and the correctness check (timing off) run beside other branches' checks, each
  holding its task's estimated footprint of one GPU's memory budget
  (:class:`engine.evalset.memory.GpuMemoryPool`). A check that ran out of memory beside others (the
  harness's fault, not the kernel's) runs once more, alone on a GPU.
* **time**: a correct kernel is then evaluated again with timing on, alone on a GPU: nothing else of
  this exploration runs there meanwhile. Its build comes from the cache; what the check found at
  other shapes is carried over.
* **profile**: Nsight Compute replays kernels and reads counters, so it also runs alone on a GPU.

On the CPU the machine is one slot: checks side by side, a timing alone. Every part's window (which
branch, which GPU, from when to when) is kept, so a summary can show that no two timings shared a
GPU, and how the wall time compares with the sum of the evaluations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalEvent, EvalOptions
from engine.eval.result import EvalResult
from engine.evalset.memory import BUDGET_FRACTION, GpuMemoryPool, estimate_footprint, gpu_free_bytes
from engine.evalset.scheduler import _oom_beside_others, carry_shapes

#: the parts of an evaluation (and the profile) a window records
CHECK, TIME, PROFILE = "check", "time", "profile"
#: parts that hold their GPU alone
ALONE = frozenset({TIME, PROFILE})
#: the CPU's one slot: its budget is never the limit (checks there hold no GPU memory)
_CPU_BUDGET = 1 << 62


@dataclass(frozen=True)
class Window:
    """One part of one evaluation: who ran what where, and when (``time.time()`` seconds)."""

    branch: str
    part: str  # check | time | profile
    gpu: int | str | None  # the CUDA_VISIBLE_DEVICES index (Ray: the node's); None on the CPU
    started_at: float
    finished_at: float
    alone: bool = False  # it held its GPU alone (a timing, a profile, a check run again alone)
    host: str = ""  # Ray: the node it ran on; "" here

    @property
    def seconds(self) -> float:
        return self.finished_at - self.started_at


class SharedDevices:
    """The GPUs (``gpus``, CUDA_VISIBLE_DEVICES indices; default GPU 0) or the CPU, shared by the
    branches of one exploration. ``device`` is resolved already (cpu or cuda). ``budget_bytes``: each
    GPU's memory budget for checks side by side (default: 90% of what is free when the first check
    starts)."""

    def __init__(self, device: str, gpus: list[int] | None = None, budget_bytes: int | None = None) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be resolved to cpu or cuda, not {device!r}")
        if device == "cpu" and gpus:
            raise ValueError("GPUs were named but kernels run on the CPU (--device cpu)")
        self.device = device
        self.gpus = list(gpus) if gpus else [0]
        self.budget_bytes = budget_bytes
        self.windows: list[Window] = []
        self._lock = threading.Lock()
        self._pool: GpuMemoryPool | None = None
        self._needs: dict[str, int] = {}  # task source -> the bytes a check of it reserves

    # ------------------------------------------------------------------ the pool

    @property
    def pool(self) -> GpuMemoryPool:
        with self._lock:
            if self._pool is None:
                if self.device == "cpu":
                    budgets = {0: _CPU_BUDGET}
                elif self.budget_bytes is not None:
                    budgets = dict.fromkeys(self.gpus, self.budget_bytes)
                else:
                    budgets = {gpu: int(gpu_free_bytes(gpu)[0] * BUDGET_FRACTION) for gpu in self.gpus}
                self._pool = GpuMemoryPool(budgets)
            return self._pool

    def _need(self, task_source: str) -> int:
        """What a check of this task reserves: its footprint estimated on the meta device, once."""
        if self.device == "cpu":
            return 0
        with self._lock:
            if task_source in self._needs:
                return self._needs[task_source]
        with tempfile.TemporaryDirectory(prefix="cudaforge-footprint-") as folder:
            path = Path(folder) / "task.py"
            path.write_text(task_source, encoding="utf-8")
            need = estimate_footprint(path).reserve_bytes
        with self._lock:
            self._needs[task_source] = need
        return need

    @contextlib.contextmanager
    def _hold(self, branch: str, part: str, need: int = 0, alone: bool = False) -> Iterator[int | None]:
        """A GPU for ``part``: beside others within the budget for a check, alone for a timing or a
        profile (or when ``alone``). Yields the GPU index to run on (None on the CPU) and records
        the window."""
        pool = self.pool
        alone = alone or part in ALONE
        picked = pool.acquire_alone() if alone else pool.acquire(need)
        assert picked is not None  # no stop event is passed: an evaluation waits for its turn
        gpu, reserved = picked
        where = None if self.device == "cpu" else gpu
        started = time.time()
        try:
            yield where
        finally:
            finished = time.time()
            pool.release(gpu, reserved)
            self._record(Window(branch, part, where, started, finished, alone))

    def _record(self, window: Window) -> None:
        with self._lock:
            self.windows.append(window)

    def _evaluate_part(
        self, branch: str, part: str, sources: tuple[str, str], options: EvalOptions, on_event: Any,
        names: dict[str, Any], need: int = 0, alone: bool = False,
    ) -> EvalResult:  # fmt: skip
        """One evaluation with ``options`` (timing on or off) on a GPU held as ``part`` needs."""
        with self._hold(branch, part, need, alone) as gpu:
            return evaluate(*sources, dataclasses.replace(options, gpu_index=gpu), on_event, **names)

    # ------------------------------------------------------------------ what the loops call

    def evaluator(self, branch: str) -> Callable[..., EvalResult]:
        """``evaluate`` for ``branch``'s loop (LoopOptions.evaluator): check beside others, time alone."""

        def run(
            task_source: str,
            kernel_source: str,
            options: EvalOptions | None = None,
            on_event: Callable[[EvalEvent], None] | None = None,
            **names: Any,
        ) -> EvalResult:
            options = options or EvalOptions()
            sources = (task_source, kernel_source)
            check = dataclasses.replace(options, do_timing=False)
            checked = self._evaluate_part(branch, CHECK, sources, check, on_event, names, self._need(task_source))
            if _oom_beside_others(checked):
                checked = self._evaluate_part(branch, CHECK, sources, check, on_event, names, alone=True)
                checked.messages.insert(
                    0, "checked again alone on its GPU: it ran out of memory beside other branches' checks"
                )
            if not checked.ok or not options.do_timing:
                return checked
            timing = dataclasses.replace(options, do_timing=True, shapes=False)  # the check did the shapes
            timed = self._evaluate_part(branch, TIME, sources, timing, on_event, names)
            _carry_check(timed, checked)
            return timed

        return run

    def profiler(self, inner: Any, branch: str) -> GatedProfiler:
        """``inner`` (a loop profiler, engine.profile.candidate.LoopProfiler) run alone on a GPU."""
        return GatedProfiler(inner, self, branch)

    # ------------------------------------------------------------------ what happened

    def close(self) -> None:
        """Nothing to let go here (RayDevices leaves its cluster)."""

    def overlaps(self) -> list[tuple[Window, Window]]:
        """Pairs of windows that shared a GPU while one of them needed it alone (should be none)."""
        with self._lock:
            windows = list(self.windows)
        found = []
        for i, a in enumerate(windows):
            for b in windows[i + 1 :]:
                shared = (a.host, a.gpu) == (b.host, b.gpu) and (a.alone or b.alone)
                if shared and a.started_at < b.finished_at and b.started_at < a.finished_at:
                    found.append((a, b))
        return found

    def stats(self) -> dict[str, Any]:
        """For the exploration's summary: the windows, their sums per part, and the overlaps."""
        with self._lock:
            windows = list(self.windows)
        sums = {
            part: round(sum(w.seconds for w in windows if w.part == part), 3)
            for part in (CHECK, TIME, PROFILE)
        }
        return {
            "device": self.device,
            "gpus": self.gpus if self.device == "cuda" else [],
            "evaluation_seconds": round(sums[CHECK] + sums[TIME], 3),
            "seconds_by_part": sums,
            "alone_overlaps": len(self.overlaps()),
            "windows": [{**dataclasses.asdict(w), "seconds": round(w.seconds, 3)} for w in windows],
        }


class GatedProfiler:
    """A loop profiler whose runs hold a GPU alone (see the module docstring). It has no ``prepare``:
    a profile started early, beside the check, would share the GPU it must have to itself."""

    def __init__(self, inner: Any, devices: SharedDevices, branch: str) -> None:
        self.inner = inner
        self.devices = devices
        self.branch = branch

    def cancel(self) -> None:
        cancel = getattr(self.inner, "cancel", None)
        if cancel is not None:
            cancel()

    def __call__(self, task_source: str, kernel_source: str, result: Any) -> Any:
        with self.devices._hold(self.branch, PROFILE) as gpu:
            options = getattr(self.inner, "options", None)
            if options is not None and gpu is not None:
                self.inner.options = dataclasses.replace(options, gpu_index=gpu)
            return self.inner(task_source, kernel_source, result)


def _carry_check(timed: EvalResult, checked: EvalResult) -> None:
    """The timed result keeps what the check found at other shapes (the timing run skips them)."""
    carry_shapes(timed, checked.to_dict())
