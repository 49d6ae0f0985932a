"""How an exploration's branches share the machine's GPUs (ARCHITECTURE.md §2, "Explore").

Branches run side by side, so their evaluations would meet on the same GPUs. They are split as an
evalset's are (engine.evalset.scheduler), and for the same reason, a timing disturbed by a neighbour
is no timing:

* **build**: the check's worker first builds the extensions its source names, holding no GPU at all
  (a gated job: engine.eval.pipe, ``GPU_WAIT``), so a build of twenty seconds never keeps a timing or
  a profile from a GPU. What its source does not name statically is built at its import, inside the
  check.
* **check**: the correctness check (timing off) then runs beside other branches' checks, each
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

**Started ahead.** A process's start (Python, torch, cudaforge: seconds) needs no GPU, so it is not
done on the GPU's clock. When a branch's check starts, its timing's worker starts too
(engine.eval.spare), and when the loop asks its profiler to ``prepare``, the profile's ncu and target
start (engine.profile.candidate, ``early``): both wait, importing, for their GPU, and neither touches
CUDA before it is theirs alone. A process starts with its GPU set, so each is promised one GPU (the
one with the fewest promises) and later waits for that one: a check's worker, started while its
Coder writes, builds and then waits for its share of that GPU. What was started and not needed (the
check failed) is given up.
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

from engine.eval import spare
from engine.eval.evaluate import evaluate, start_worker_for
from engine.eval.options import EvalEvent, EvalOptions
from engine.eval.result import EvalResult
from engine.evalset.memory import BUDGET_FRACTION, GpuMemoryPool, estimate_footprint, gpu_free_bytes
from engine.evalset.scheduler import _oom_beside_others, carry_shapes

#: the parts of an evaluation (and the profile) a window records
BUILD, CHECK, TIME, PROFILE = "build", "check", "time", "profile"
#: parts that hold their GPU alone
ALONE = frozenset({TIME, PROFILE})
#: parts that hold a GPU at all (a build ahead of its check holds none)
HOLDING = frozenset({CHECK, TIME, PROFILE})
#: the CPU's one slot: its budget is never the limit (checks there hold no GPU memory)
_CPU_BUDGET = 1 << 62


@dataclass(frozen=True)
class Window:
    """One part of one evaluation: who ran what where, and when (``time.time()`` seconds)."""

    branch: str
    part: str  # build | check | time | profile
    gpu: int | str | None  # the CUDA_VISIBLE_DEVICES index (Ray: the node's); None on the CPU
    started_at: float
    finished_at: float
    alone: bool = False  # it held its GPU alone (a timing, a profile, a check run again alone)
    host: str = ""  # Ray: the node it ran on; "" here

    @property
    def seconds(self) -> float:
        return self.finished_at - self.started_at


@dataclass
class Ahead:
    """A GPU promised to one coming part, and the worker started for it meanwhile (None: none could
    start, or none is started for this kind of part)."""

    gpu: int  # the pool's key (0 on the CPU)
    worker: spare.Spare | None = None

    def take_worker(self) -> spare.Spare | None:
        worker, self.worker = self.worker, None
        return worker


class SharedDevices:
    """The GPUs (``gpus``, CUDA_VISIBLE_DEVICES indices; default GPU 0) or the CPU, shared by the
    branches of one exploration. ``device`` is resolved already (cpu or cuda). ``budget_bytes``: each
    GPU's memory budget for checks side by side (default: 90% of what is free when the first check
    starts)."""

    #: whether processes start before their GPU is theirs (the module docstring, "Started ahead")
    starts_ahead = True

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
        self._promised: dict[int, int] = {}  # GPU -> coming parts whose process was started for it
        self._warm: dict[str, Ahead] = {}  # branch -> the worker started for its next check

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

    # ------------------------------------------------------------------ started ahead

    def _promise(self) -> int:
        """A GPU for a coming part whose process starts now: the one with the fewest such promises."""
        keys = list(self.pool.budgets)
        with self._lock:
            gpu = min(keys, key=lambda g: (self._promised.get(g, 0), keys.index(g)))
            self._promised[gpu] = self._promised.get(gpu, 0) + 1
        return gpu

    def _where(self, gpu: int) -> int | None:
        return None if self.device == "cpu" else gpu

    def _ahead(self, options: EvalOptions) -> Ahead | None:
        """A GPU promised to an evaluation with ``options``, its worker started now (None when this
        kind of devices starts nothing ahead)."""
        if not self.starts_ahead:
            return None
        gpu = self._promise()
        return Ahead(gpu, start_worker_for(dataclasses.replace(options, gpu_index=self._where(gpu))))

    def _let_go(self, ahead: Ahead | None) -> None:
        """The promise kept or given up: an unused worker killed, the GPU's promise returned."""
        if ahead is None:
            return
        spare.release(ahead.take_worker())
        with self._lock:
            self._promised[ahead.gpu] -= 1

    def warm(self, branch: str, options: EvalOptions) -> None:
        """The worker of ``branch``'s next check started now, while its Coder writes (the loop's
        ``warm_worker``, here one per branch and on the GPU it will probably run on)."""
        ahead = self._ahead(dataclasses.replace(options, do_timing=False))
        with self._lock:
            ahead, self._warm[branch] = self._warm.pop(branch, None), ahead
        self._let_go(ahead)

    # ------------------------------------------------------------------ holding a GPU

    @contextlib.contextmanager
    def _hold(
        self, branch: str, part: str, need: int = 0, alone: bool = False, ahead: Ahead | None = None
    ) -> Iterator[int | None]:
        """A GPU for ``part``: beside others within the budget for a check, alone for a timing or a
        profile (or when ``alone``); the one promised to ``ahead`` when given (its process was started
        set to that GPU). Yields the GPU index to run on (None on the CPU) and records the window."""
        pool = self.pool
        alone = alone or part in ALONE
        promised = ahead.gpu if ahead is not None else None
        picked = pool.acquire_alone(only=promised) if alone else pool.acquire(need, only=promised)
        assert picked is not None  # no stop event is passed: an evaluation waits for its turn
        gpu, reserved = picked
        where = self._where(gpu)
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
        names: dict[str, Any], need: int = 0, alone: bool = False, ahead: Ahead | None = None,
    ) -> EvalResult:  # fmt: skip
        """One evaluation with ``options`` (timing on or off) on a GPU held as ``part`` needs, with the
        worker started ``ahead`` for it when that one's GPU is the one held."""
        with self._hold(branch, part, need, alone, ahead) as gpu:
            worker = ahead.take_worker() if ahead is not None else None
            return evaluate(*sources, dataclasses.replace(options, gpu_index=gpu), on_event, worker=worker, **names)

    # ------------------------------------------------------------------ what the loops call

    def evaluator(self, branch: str) -> BranchEvaluator:
        """``evaluate`` for ``branch``'s loop (LoopOptions.evaluator): check beside others, time alone."""
        return BranchEvaluator(self, branch)

    def _built_then_checked(
        self, branch: str, sources: tuple[str, str], options: EvalOptions, on_event: Any,
        names: dict[str, Any], need: int, ahead: Ahead,
    ) -> EvalResult:  # fmt: skip
        """A check whose worker (started ahead, set to the promised GPU) builds first, holding nothing
        (a BUILD window), and gets its share of that GPU only once built (its CHECK window)."""
        where = self._where(ahead.gpu)
        held = contextlib.ExitStack()
        started, built = time.time(), None

        def gate() -> None:
            nonlocal built
            built = time.time()
            held.enter_context(self._hold(branch, CHECK, need, ahead=ahead))

        with held:
            try:
                gated = dataclasses.replace(options, gpu_index=where)
                return evaluate(*sources, gated, on_event, worker=ahead.take_worker(), gate=gate, **names)
            finally:
                self._record(Window(branch, BUILD, where, started, built or time.time()))

    def _run(
        self, branch: str, sources: tuple[str, str], options: EvalOptions, on_event: Any, names: dict[str, Any]
    ) -> EvalResult:
        check = dataclasses.replace(options, do_timing=False)
        timing = dataclasses.replace(options, do_timing=True, shapes=False)  # the check did the shapes
        with self._lock:
            warmed = self._warm.pop(branch, None)
        warmed = warmed or self._ahead(check)  # no warm worker (the first round): one started now
        timing_ahead = self._ahead(timing) if options.do_timing else None  # waits while the check runs
        try:
            try:
                need = self._need(sources[0])
                if warmed is not None:
                    checked = self._built_then_checked(branch, sources, check, on_event, names, need, warmed)
                else:  # nothing starts ahead here (Ray): the check holds its share from its start
                    checked = self._evaluate_part(branch, CHECK, sources, check, on_event, names, need)
            finally:
                self._let_go(warmed)
            if _oom_beside_others(checked):
                checked = self._evaluate_part(branch, CHECK, sources, check, on_event, names, alone=True)
                checked.messages.insert(
                    0, "checked again alone on its GPU: it ran out of memory beside other branches' checks"
                )
            if not checked.ok or not options.do_timing:
                return checked
            timed = self._evaluate_part(branch, TIME, sources, timing, on_event, names, ahead=timing_ahead)
            _carry_check(timed, checked)
            return timed
        finally:
            self._let_go(timing_ahead)

    def profiler(self, inner: Any, branch: str) -> GatedProfiler:
        """``inner`` (a loop profiler, engine.profile.candidate.LoopProfiler) run alone on a GPU."""
        return GatedProfiler(inner, self, branch)

    # ------------------------------------------------------------------ what happened

    def branch_done(self, branch: str) -> None:
        """``branch``'s loop has ended: a worker started for a check that will not come is killed."""
        with self._lock:
            warmed = self._warm.pop(branch, None)
        self._let_go(warmed)

    def close(self) -> None:
        """Workers started for checks that never came are killed (RayDevices leaves its cluster)."""
        with self._lock:
            branches = list(self._warm)
        for branch in branches:
            self.branch_done(branch)

    def overlaps(self) -> list[tuple[Window, Window]]:
        """Pairs of windows that shared a GPU while one of them needed it alone (should be none)."""
        with self._lock:
            windows = list(self.windows)
        windows = [w for w in windows if w.part in HOLDING]
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
            for part in (BUILD, CHECK, TIME, PROFILE)
        }
        return {
            "device": self.device,
            "gpus": self.gpus if self.device == "cuda" else [],
            # an evaluation's time: its build ahead, its check and its timing (not its waits for a GPU)
            "evaluation_seconds": round(sums[BUILD] + sums[CHECK] + sums[TIME], 3),
            "seconds_by_part": sums,
            "alone_overlaps": len(self.overlaps()),
            "windows": [{**dataclasses.asdict(w), "seconds": round(w.seconds, 3)} for w in windows],
        }


class BranchEvaluator:
    """What a branch's loop calls to evaluate (``LoopOptions.evaluator``): the check beside other
    branches' checks, then the timing alone; ``warm`` starts the next check's worker while the Coder
    writes."""

    def __init__(self, devices: SharedDevices, branch: str) -> None:
        self.devices = devices
        self.branch = branch

    def warm(self, options: EvalOptions) -> None:
        self.devices.warm(self.branch, options)

    def __call__(
        self,
        task_source: str,
        kernel_source: str,
        options: EvalOptions | None = None,
        on_event: Callable[[EvalEvent], None] | None = None,
        **names: Any,
    ) -> EvalResult:
        options = options or EvalOptions(device=self.devices.device)  # the loop always passes its own
        return self.devices._run(self.branch, (task_source, kernel_source), options, on_event, names)


class GatedProfiler:
    """A loop profiler whose runs hold a GPU alone (see the module docstring). ``prepare`` starts the
    profile's processes early (the inner profiler's own ``prepare``) on a promised GPU; they wait for
    it without touching CUDA, and the profile itself runs only once that GPU is held alone."""

    def __init__(self, inner: Any, devices: SharedDevices, branch: str) -> None:
        self.inner = inner
        self.devices = devices
        self.branch = branch
        self._ahead: Ahead | None = None

    def _set_gpu(self, gpu: int | None) -> None:
        options = getattr(self.inner, "options", None)
        if options is not None and gpu is not None:
            self.inner.options = dataclasses.replace(options, gpu_index=gpu)

    def prepare(self, task_source: str, kernel_source: str) -> None:
        prepare = getattr(self.inner, "prepare", None)
        if prepare is None or not self.devices.starts_ahead:
            return
        self.cancel()
        self._ahead = Ahead(self.devices._promise())
        self._set_gpu(self.devices._where(self._ahead.gpu))
        prepare(task_source, kernel_source)

    def cancel(self) -> None:
        cancel = getattr(self.inner, "cancel", None)
        if cancel is not None:
            cancel()
        ahead, self._ahead = self._ahead, None
        self.devices._let_go(ahead)

    def __call__(self, task_source: str, kernel_source: str, result: Any) -> Any:
        ahead, self._ahead = self._ahead, None
        try:
            with self.devices._hold(self.branch, PROFILE, ahead=ahead) as gpu:
                self._set_gpu(gpu)
                return self.inner(task_source, kernel_source, result)
        finally:
            self.devices._let_go(ahead)


def _carry_check(timed: EvalResult, checked: EvalResult) -> None:
    """The timed result keeps what the check found at other shapes (the timing run skips them)."""
    carry_shapes(timed, checked.to_dict())
