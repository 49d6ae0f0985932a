"""Run an evalset in two phases: build + check in parallel, then timing one kernel at a time per GPU.

Every evaluation is the real evaluator, :func:`engine.eval.evaluate.evaluate`, which already runs the
candidate in its own worker process; so threads suffice here, and this module only decides *what
runs where and when*:

* **Phase 1** (``--build-workers`` at once): each pair is built and checked with timing off. On
  CUDA an evaluation first reserves its task's estimated footprint on a GPU
  (:class:`engine.evalset.memory.GpuMemoryPool`), so a task with gigabytes of inputs never starts
  beside others that would not fit; the check runs on that GPU.
* An evaluation that ran out of GPU memory while others held it (a ``harness_error`` of kind
  ``oom-contention``: the scheduler's fault, not the kernel's) is run once more, alone on its GPU,
  and the result says so. Any other ``harness_error`` is kept apart and redone by the next run.
* **Phase 2** times the correct kernels, one at a time on each GPU (one at a time in all on CPU),
  with nothing else running there: a full evaluation again, whose build comes from the cache.
  Timing in phase 1 would be disturbed by its neighbours' builds and checks, which is why the
  phases are apart.

With ``--ray`` the command hands the evalset a :class:`RemoteRunner` and both phases are Ray tasks
instead (:mod:`engine.evalset.ray_runner`). Results go to
``OUT`` as they arrive (:mod:`engine.evalset.store`); what a rerun finds there is not redone.
"""

from __future__ import annotations

import dataclasses
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from engine.eval import faults
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalEvent, EvalOptions
from engine.eval.result import EvalResult
from engine.evalset import store
from engine.evalset.memory import (
    BUDGET_FRACTION,
    Footprint,
    GpuMemoryPool,
    estimate_footprint,
    gpu_free_bytes,
    measured_need,
)
from engine.evalset.pairs import Pair
from engine.evalset.progress import EvalsetLines, make_progress


@dataclass
class EvalsetOptions:
    """How to run the set; ``eval_options.device`` is already resolved to ``cpu`` or ``cuda``."""

    out: Path
    eval_options: EvalOptions
    gpus: list[int] | None = None  # CUDA: the GPUs to use (CUDA_VISIBLE_DEVICES indices)
    build_workers: int = 1
    ray: str | None = None
    redo: bool = False
    gpu_budget_bytes: int | None = None  # per GPU; default: BUDGET_FRACTION of the memory free at start
    progress: str = "auto"
    stream: TextIO = field(default_factory=lambda: sys.stdout)

    @property
    def device(self) -> str:
        return self.eval_options.device


@dataclass
class PairState:
    """A pair and what the output folder already holds for it."""

    pair: Pair
    ident: dict[str, Any]
    check: dict[str, Any] | None = None  # current phase-1 document
    final: dict[str, Any] | None = None  # current final document
    footprint: Footprint | None = None


@dataclass
class RunStats:
    """What this invocation did, for ``summary.json`` (wall time against the sum of evaluations)."""

    wall_seconds: float = 0.0
    estimate_seconds: float = 0.0
    phase1_wall_seconds: float = 0.0
    phase2_wall_seconds: float = 0.0
    phase1_evaluations: int = 0
    phase2_evaluations: int = 0
    phase1_sum_seconds: float = 0.0
    phase2_sum_seconds: float = 0.0
    already_done: int = 0
    resumed_to_timing: int = 0
    errors: list[str] = field(default_factory=list)
    retried_alone: list[str] = field(default_factory=list)  # pairs rerun alone after an OOM beside others
    interrupted: bool = False
    gpu_budgets_bytes: dict[str, int] = field(default_factory=dict)
    gpu_peak_reserved_bytes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["sum_evaluation_seconds"] = self.phase1_sum_seconds + self.phase2_sum_seconds
        data["parallel_gain"] = (
            data["sum_evaluation_seconds"] / self.wall_seconds if self.wall_seconds > 0 else None
        )
        return data


def describe(result: EvalResult, seconds: float) -> str:
    """One progress line for a verdict."""
    parts = [result.status]
    if result.speedup is not None and result.timing is not None:
        c = result.timing.candidate
        spread = f" (IQR {100 * c.iqr_ms / c.median_ms:.1f}%)" if c.median_ms > 0 else ""
        parts.append(f"{result.speedup:.2f}x · kernel {c.median_ms:.4g} ms{spread}")
    elif result.ok:
        cached = " (build cached)" if result.build.cached else ""
        parts.append(f"checked{cached}")
    elif result.messages:
        parts.append(result.messages[-1][:120])
    parts.append(f"{seconds:.1f} s")
    return " · ".join(parts)


class RemoteRunner(Protocol):
    """Runs both phases somewhere else (``--ray``: ``engine.evalset.ray_runner.RayRunner``), recording
    each result through the evalset; without one the evalset runs them on this machine."""

    def phase1(self, states: list[PairState]) -> list[PairState]:
        """Build and check ``states``; the ones found correct."""
        ...

    def phase2(self, states: list[PairState]) -> None:
        """Time ``states``, one per GPU at a time."""
        ...

    def close(self) -> None: ...


class Evalset:
    """Judges ``pairs`` into ``options.out``; :meth:`run` does what the output folder still lacks.

    ``remote``: made with this evalset when a run starts, it runs the phases instead of this machine.
    """

    def __init__(
        self,
        pairs: Sequence[Pair],
        options: EvalsetOptions,
        remote: Callable[[Evalset], RemoteRunner] | None = None,
    ) -> None:
        self.pairs = list(pairs)
        self.options = options
        self.remote = remote
        self.stopping = threading.Event()
        self.stats = RunStats()
        self.lock = threading.Lock()
        self._announced = False
        self.peaks: dict[str, int] = {}  # task SHA-256 -> the largest allocator peak measured for it

    # -- planning ---------------------------------------------------------------------------
    def states(self) -> list[PairState]:
        """Each pair with the current documents the output folder holds for it."""
        out, device = self.options.out, self.options.device
        states = []
        for pair in self.pairs:
            state = PairState(pair, store.identity(pair))
            final = store.read(store.result_path(out, pair.name))
            check = store.read(store.check_path(out, pair.name))
            for data in (final, check):
                self._note_peak(state.ident["task_sha256"], data)
            if not self.options.redo:  # a harness error is no verdict: it is redone
                state.final = final if store.is_current(final, state.ident, device) and not _harness(final) else None
                state.check = check if store.is_current(check, state.ident, device) and not _harness(check) else None
            states.append(state)
        return states

    def _note_peak(self, task_sha: str, data: dict[str, Any] | None) -> None:
        peak = ((data or {}).get("memory") or {}).get("peak_reserved_bytes")
        if isinstance(peak, int) and peak > self.peaks.get(task_sha, 0):
            with self.lock:
                self.peaks[task_sha] = peak

    def need_bytes(self, state: PairState) -> int:
        """The reservation: the larger of the task's estimate and what was measured for it (memory.py)."""
        estimate = state.footprint.reserve_bytes if state.footprint else 0
        return max(estimate, measured_need(self.peaks.get(state.ident["task_sha256"])))

    def say(self, text: str) -> None:
        print(text, file=self.options.stream, flush=True)

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> RunStats:
        """Both phases; a Ctrl-C (SIGINT) during them is handled by :meth:`_on_sigint`."""
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, self._on_sigint) if in_main else None
        try:
            return self._run()
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous)
                self.announce_stop()

    def _run(self) -> RunStats:
        started = time.monotonic()
        states = self.states()
        done = [s for s in states if s.final is not None]
        to_time = [
            s
            for s in states
            if s.final is None and s.check is not None and s.check.get("status") == "correct"
        ]
        timing_ids = {id(s) for s in to_time}
        to_check = [s for s in states if s.final is None and id(s) not in timing_ids]
        if not self.options.eval_options.do_timing:  # --no-timing: a correct check is the verdict
            for state in to_time:
                self._promote(state)
            done, to_time = done + to_time, []
        self.stats.already_done, self.stats.resumed_to_timing = len(done), len(to_time)
        if done or to_time:
            self.say(
                f"resuming {self.options.out}: {len(done)} finished result(s) kept, "
                f"{len(to_time)} checked kernel(s) go straight to timing"
            )
        if self.options.device == "cuda" and (to_check or to_time):
            self._estimate([*to_check, *to_time])
        timing = self.options.eval_options.do_timing
        runner = self.remote(self) if self.remote else None
        try:
            if to_check:
                phase_started = time.monotonic()
                self.say(
                    f"phase 1 · build + check {len(to_check)} kernel(s), "
                    + (f"Ray at {self.options.ray}" if runner else f"{self.options.build_workers} at a time")
                )
                checked = runner.phase1(to_check) if runner else self._phase1_local(to_check)
                to_time += [s for s in checked if timing]
                self.stats.phase1_wall_seconds = time.monotonic() - phase_started
            if to_time and timing and not self.stopping.is_set():
                phase_started = time.monotonic()
                where = (
                    f"Ray at {self.options.ray}"
                    if runner
                    else (
                        f"one at a time on GPU {', '.join(map(str, self.options.gpus))}"
                        if self.options.gpus
                        else "one at a time"
                    )
                )
                self.say(f"phase 2 · time {len(to_time)} correct kernel(s), {where}")
                runner.phase2(to_time) if runner else self._phase2_local(to_time)
                self.stats.phase2_wall_seconds = time.monotonic() - phase_started
        finally:
            if runner:
                runner.close()
        self.stats.wall_seconds = time.monotonic() - started
        return self.stats

    def _estimate(self, states: list[PairState]) -> None:
        """Footprints of the tasks to run (each task once) and the GPUs' budgets."""
        started = time.monotonic()
        by_task: dict[Path, Footprint] = {}
        for state in states:
            if state.pair.task not in by_task:
                by_task[state.pair.task] = estimate_footprint(state.pair.task)
            state.footprint = by_task[state.pair.task]
        self.stats.estimate_seconds = time.monotonic() - started
        largest = max(by_task.values(), key=lambda f: f.reserve_bytes)
        self.say(
            f"memory: {len(by_task)} task(s) estimated on the meta device in {self.stats.estimate_seconds:.1f} s; "
            f"largest reservation {largest.reserve_bytes / 2**30:.1f} GiB"
        )

    def _promote(self, state: PairState) -> None:
        """Make a stored correct check the final result (a ``--no-timing`` run after a timed one)."""
        assert state.check is not None
        meta = dict(state.check.get("evalset") or {})
        meta.pop("written_at", None)
        store.write(
            store.result_path(self.options.out, state.pair.name), EvalResult.from_dict(state.check), meta
        )
        state.final = store.read(store.result_path(self.options.out, state.pair.name))

    def _record(
        self, state: PairState, result: EvalResult, phase: int, seconds: float, meta: dict[str, Any]
    ) -> None:
        """Store a verdict (checks/ and, when final, results/) and count its seconds."""
        out, name = self.options.out, state.pair.name
        meta = {**state.ident, **meta, "phase": phase}
        if state.footprint is not None:
            meta["footprint"] = state.footprint.to_dict()
        if phase == 1:
            meta["phase1_seconds"] = seconds
            store.write(store.check_path(out, name), result, meta)
            state.check = store.read(store.check_path(out, name))
            final = not result.ok or not self.options.eval_options.do_timing
            if not final:  # a result from an older version of these files must not outlive their new check
                store.result_path(out, name).unlink(missing_ok=True)
        else:
            carry_shapes(result, state.check or {})
            previous = (state.check or {}).get("evalset") or {}
            meta["phase1_seconds"] = previous.get("phase1_seconds")
            meta["phase2_seconds"] = seconds
            final = True
        if final:
            store.write(store.result_path(out, name), result, meta)
            state.final = store.read(store.result_path(out, name))
        with self.lock:
            if phase == 1:
                self.stats.phase1_evaluations += 1
                self.stats.phase1_sum_seconds += seconds
            else:
                self.stats.phase2_evaluations += 1
                self.stats.phase2_sum_seconds += seconds

    def options_for(self, phase: int, gpu: int | None) -> EvalOptions:
        """Phase 2 times; the shape re-check was phase 1's and is carried over (``_record``)."""
        shapes = self.options.eval_options.shapes and phase == 1
        return dataclasses.replace(self.options.eval_options, do_timing=phase == 2, gpu_index=gpu, shapes=shapes)

    def evaluate_here(
        self,
        state: PairState,
        phase: int,
        gpu: int | None,
        progress: EvalsetLines,
        meta: dict[str, Any],
        note: str = "",
    ) -> EvalResult | None:
        """One evaluation in a worker process of this host; None when the evaluator refused to start.

        ``note`` goes first into the result's messages (why this evaluation was run again)."""
        pair = state.pair
        progress.started(pair.name, f"GPU {gpu}" if gpu is not None else "", False)

        def on_event(event: EvalEvent) -> None:
            if event.kind == "stage":
                progress.stage(pair.name, event.stage)

        started, started_at = time.monotonic(), time.time()
        try:
            result = evaluate(
                pair.task.read_text(encoding="utf-8"),
                pair.kernel.read_text(encoding="utf-8"),
                self.options_for(phase, gpu),
                on_event,
                task_name=pair.task.stem,
            )
        except Exception as error:  # EvaluationError, an unreadable file, a full disk
            message = f"{pair.name}: phase {phase} could not run: {type(error).__name__}: {error}"
            with self.lock:
                self.stats.errors.append(message)
            progress.finished(pair.name, f"error: {type(error).__name__}: {error}")
            return None
        seconds = time.monotonic() - started
        times = {"started_at": started_at, "finished_at": time.time()}
        if note:
            result.messages.insert(0, note)
        self._note_peak(state.ident["task_sha256"], result.to_dict())
        self._record(state, result, phase, seconds, {**meta, **times, "gpu": gpu})
        progress.finished(pair.name, describe(result, seconds))
        return result

    # -- local execution --------------------------------------------------------------------
    def _wait(self, futures: list[Any]) -> None:
        """Wait for ``futures``, saying so once when a Ctrl-C asked to stop."""
        for future in futures:
            while True:
                try:
                    future.result(timeout=0.5)
                    break
                except FuturesTimeout:
                    self.announce_stop()

    def _on_sigint(self, _signum: int, _frame: Any) -> None:
        """First Ctrl-C: start nothing new, let running evaluations finish and keep them. Second: leave."""
        if self.stopping.is_set():
            raise KeyboardInterrupt
        self.stopping.set()
        self.stats.interrupted = True

    def announce_stop(self) -> None:
        if self.stopping.is_set() and not self._announced:
            self._announced = True
            self.say("stopping: running evaluations finish and are kept (Ctrl-C again to leave now)")

    def _phase1_local(self, states: list[PairState]) -> list[PairState]:
        progress = make_progress(self.options.progress, len(states), self.options.stream)
        pool = self._memory_pool()
        correct: list[PairState] = []

        def job(state: PairState) -> None:
            if self.stopping.is_set():
                return
            gpu, reserved = None, 0
            if pool is not None:
                picked = pool.acquire(self.need_bytes(state), self.stopping)
                if picked is None:
                    return
                gpu, reserved = picked
            try:
                result = self.evaluate_here(state, 1, gpu, progress, {"reserved_bytes": reserved})
            finally:
                if pool is not None and gpu is not None:
                    pool.release(gpu, reserved)
            if result is not None and pool is not None and _oom_beside_others(result):
                result = self._retry_alone(state, result, pool, progress)
            if result is not None and result.ok:
                with self.lock:
                    correct.append(state)

        try:
            with ThreadPoolExecutor(max_workers=max(1, self.options.build_workers)) as executor:
                self._wait([executor.submit(job, s) for s in states])
        finally:
            progress.close()
        if pool is not None:
            self.stats.gpu_peak_reserved_bytes = {str(g): b for g, b in pool.peak.items()}
        order = {id(s): i for i, s in enumerate(states)}
        return sorted(correct, key=lambda s: order[id(s)])

    def _retry_alone(
        self, state: PairState, first: EvalResult, pool: GpuMemoryPool, progress: EvalsetLines
    ) -> EvalResult | None:
        """Run an evaluation that ran out of memory beside others again, with its GPU to itself."""
        picked = pool.acquire_alone(self.stopping)
        if picked is None:
            return first
        gpu, reserved = picked
        with self.lock:
            self.stats.retried_alone.append(state.pair.name)
        note = (
            "retried alone on its GPU: the first attempt ran out of GPU memory beside other evaluations "
            f"({(first.harness_fault or {}).get('message', '')})"
        )
        meta = {"reserved_bytes": reserved, "retried_alone": True, "first_attempt": first.harness_fault}
        try:
            return self.evaluate_here(state, 1, gpu, progress, meta, note=note)
        finally:
            pool.release(gpu, reserved)

    def _memory_pool(self) -> GpuMemoryPool | None:
        if self.options.device != "cuda":
            return None
        budgets = {}
        for gpu in self.options.gpus or [0]:
            if self.options.gpu_budget_bytes is not None:
                budgets[gpu] = self.options.gpu_budget_bytes
            else:
                free, _total = gpu_free_bytes(gpu)
                budgets[gpu] = int(free * BUDGET_FRACTION)
        self.stats.gpu_budgets_bytes = {str(g): b for g, b in budgets.items()}
        return GpuMemoryPool(budgets)

    def _phase2_local(self, states: list[PairState]) -> None:
        progress = make_progress(self.options.progress, len(states), self.options.stream)
        todo: queue.Queue[PairState] = queue.Queue()
        for state in states:
            todo.put(state)
        slots: list[int | None] = list(self.options.gpus) if self.options.gpus else [None]

        def worker(gpu: int | None) -> None:
            while not self.stopping.is_set():
                try:
                    state = todo.get_nowait()
                except queue.Empty:
                    return
                self.evaluate_here(state, 2, gpu, progress, {})

        try:
            with ThreadPoolExecutor(max_workers=len(slots)) as executor:
                self._wait([executor.submit(worker, gpu) for gpu in slots])
        finally:
            progress.close()


def _harness(data: dict[str, Any] | None) -> bool:
    return bool(data) and data.get("status") == "harness_error"


def _oom_beside_others(result: EvalResult) -> bool:
    return result.harness_failed and (result.harness_fault or {}).get("kind") == faults.OOM_CONTENTION


def carry_shapes(result: EvalResult, check: dict[str, Any]) -> None:
    """A timed result keeps what its phase-1 check found at other shapes (the timing run skips it)."""
    if result.shapes is not None or not check.get("shapes"):
        return
    result.shapes = check["shapes"]
    result.findings += [f for f in check.get("findings") or [] if f.get("rule") == "shape-specific"]
