"""``cudaforge evalset --ray ADDRESS``: both phases as Ray tasks (the bench's Ray patterns).

Joining or starting the cluster, the install hint and the ``PYTHONPATH`` hand-over are
:mod:`engine.batch.ray`'s; the command hands :class:`RayRunner` to the scheduler as its remote runner. Each evaluation is one Ray task running
:func:`engine.eval.evaluate.evaluate` on whichever node Ray picks; the driver alone writes results and
prints progress.

* Phase 1 tasks ask for one CPU and, on CUDA, the *fraction* of a GPU that the task's estimated
  footprint takes of the GPU's memory (:mod:`engine.evalset.memory`), so Ray packs small checks
  together and never puts a large one beside others that would not fit.
* Phase 2 tasks ask for a whole GPU: one timing per GPU at a time. On CPU the driver keeps one
  timing in flight, so timings never share the machine.

Every node needs cudaforge installed, and the task and kernel files are sent as text, so only the
output folder (written by the driver) and the extension cache (per node) are local.
"""

from __future__ import annotations

import math
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from engine.batch.ray import connect, import_ray, runtime_env
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from engine.evalset.memory import GiB, gpu_free_bytes
from engine.evalset.progress import make_progress
from engine.evalset.scheduler import describe

if TYPE_CHECKING:
    from engine.evalset.scheduler import Evalset, PairState

ASSUMED_GPU_BYTES = 80 * GiB  # a cluster GPU's memory when this host has none to measure


def gpu_fraction(need_bytes: int, gpu_bytes: int) -> float:
    """The share of a GPU a check asks Ray for: its footprint of the GPU's memory, rounded up to a
    hundredth, at least 0.01 and at most the whole GPU (``explore --ray`` asks the same)."""
    return min(1.0, max(0.01, math.ceil(100 * need_bytes / gpu_bytes) / 100))


def remote_evaluate(
    task_source: str, kernel_source: str, options: EvalOptions, task_name: str
) -> dict[str, Any]:
    """The body of one Ray task: evaluate here; the result, where it ran and how long it took."""
    from engine.eval.evaluate import evaluate

    started, started_at = time.monotonic(), time.time()
    result = evaluate(task_source, kernel_source, options, None, task_name=task_name)
    return {
        "result": result.to_dict(),
        "started_at": started_at,
        "finished_at": time.time(),
        "host": socket.gethostname(),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),  # Ray's choice for a task with num_gpus
        "seconds": time.monotonic() - started,
    }


class RayRunner:
    """Submits an evalset's evaluations to Ray and records them through the evalset."""

    def __init__(self, evalset: Evalset) -> None:
        self.evalset = evalset
        self.ray = import_ray()
        options = evalset.options
        assert options.ray is not None
        connect(self.ray, options.ray, options.build_workers, options.device)
        self.remote = self.ray.remote(remote_evaluate)
        self.task_options = {"max_retries": 0, **runtime_env()}
        self.gpu_bytes = None
        if options.device == "cuda":
            self.gpu_bytes = options.gpu_budget_bytes or self._gpu_bytes()

    def _gpu_bytes(self) -> int:
        try:
            return gpu_free_bytes(0)[1]
        except Exception:
            self.evalset.say(
                f"Ray: no GPU here to measure; GPU fractions assume {ASSUMED_GPU_BYTES // GiB} GiB GPUs"
            )
            return ASSUMED_GPU_BYTES

    def resources(self, state: PairState, phase: int) -> dict[str, Any]:
        if self.evalset.options.device != "cuda":
            return {"num_cpus": 1}
        if phase == 2:
            return {"num_cpus": 1, "num_gpus": 1}
        need = state.footprint.reserve_bytes if state.footprint else 0
        return {"num_cpus": 1, "num_gpus": gpu_fraction(need, self.gpu_bytes or ASSUMED_GPU_BYTES)}

    def _run(self, states: list[PairState], phase: int, in_flight: int | None) -> list[PairState]:
        """Submit ``states`` (at most ``in_flight`` at once when given); the ones found correct."""
        evalset, ray = self.evalset, self.ray
        progress = make_progress(evalset.options.progress, len(states), evalset.options.stream)
        waiting = list(states)
        pending: dict[Any, tuple[PairState, float]] = {}
        correct: list[PairState] = []
        try:
            while waiting or pending:
                while (
                    waiting
                    and (in_flight is None or len(pending) < in_flight)
                    and not evalset.stopping.is_set()
                ):
                    state = waiting.pop(0)
                    pair = state.pair
                    options = evalset.options_for(phase, None)
                    ref = self.remote.options(**self.task_options, **self.resources(state, phase)).remote(
                        pair.task.read_text(encoding="utf-8"),
                        pair.kernel.read_text(encoding="utf-8"),
                        options,
                        pair.task.stem,
                    )
                    pending[ref] = (state, time.monotonic())
                    progress.started(pair.name, "Ray", False)
                if not pending:
                    break
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                evalset.announce_stop()  # after a Ctrl-C: submitted evaluations finish and are kept
                for ref in ready:
                    state, _submitted = pending.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except Exception as error:  # the Ray task itself died (node lost, worker crash)
                        message = f"{state.pair.name}: phase {phase} Ray task failed: {type(error).__name__}: {error}"
                        evalset.stats.errors.append(message)
                        progress.finished(state.pair.name, f"error: Ray task failed ({type(error).__name__})")
                        continue
                    result = EvalResult.from_dict(outcome["result"])
                    meta = {key: outcome[key] for key in ("started_at", "finished_at")}
                    meta.update(ray_host=outcome["host"], gpu=outcome["gpu"])
                    evalset._record(state, result, phase, outcome["seconds"], meta)
                    progress.finished(state.pair.name, describe(result, outcome["seconds"]))
                    if result.ok:
                        correct.append(state)
        finally:
            progress.close()
        order = {id(s): i for i, s in enumerate(states)}
        return sorted(correct, key=lambda s: order[id(s)])

    def phase1(self, states: list[PairState]) -> list[PairState]:
        return self._run(states, 1, None)

    def phase2(self, states: list[PairState]) -> None:
        # CUDA: Ray gives each task a whole GPU, so timings never share one; CPU: one at a time
        self._run(states, 2, None if self.evalset.options.device == "cuda" else 1)

    def close(self) -> None:
        self.ray.shutdown()
