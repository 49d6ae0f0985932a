"""``cudaforge explore --ray ADDRESS``: the branches' evaluations and profiles as Ray tasks, spread over hosts.

The branches' loops stay in this process (one writer per session: ARCHITECTURE.md §2); only the work
that needs a GPU goes to the cluster, as ``evalset --ray`` sends it (engine.evalset.ray_runner):

* a check asks for one CPU and the fraction of a GPU its task's footprint takes, so Ray packs checks
  side by side and never beside a timing;
* a timing and a profile ask for a whole GPU: alone on it, wherever Ray finds one. On the CPU the
  machine is one slot, held here as :class:`SharedDevices` holds it: checks side by side, a timing or a
  profile alone (nothing else in flight).

Every node needs cudaforge installed. Task and kernel travel as text; each node builds into its own
extension cache.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Any

from engine.batch.ray import connect, import_ray, runtime_env
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from engine.evalset.ray_runner import ASSUMED_GPU_BYTES, gpu_fraction, remote_evaluate
from engine.explore.devices import ALONE, PROFILE, SharedDevices, Window


def remote_profile(
    task_source: str, kernel_source: str, duration_ms: float | None, options: Any
) -> dict[str, Any]:
    """The body of one profile task: what the loop's profiler returns (engine.profile.candidate)."""
    from engine.profile.candidate import profile_for_judge

    started_at = time.time()
    return {
        "profile": profile_for_judge(task_source, kernel_source, duration_ms, options),
        "started_at": started_at,
        "finished_at": time.time(),
        "host": socket.gethostname(),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


class RayDevices(SharedDevices):
    """:class:`SharedDevices` whose parts run as Ray tasks (see the module docstring)."""

    starts_ahead = False  # a task's process starts on whichever node Ray picks, when it picks it

    def __init__(self, device: str, address: str, workers: int = 4, gpu_bytes: int | None = None) -> None:
        super().__init__(device)
        self.address = address
        self.ray = import_ray()
        connect(self.ray, address, workers, device)
        self._evaluate = self.ray.remote(remote_evaluate)
        self._profile = self.ray.remote(remote_profile)
        self.task_options = {"max_retries": 0, **runtime_env()}
        self.gpu_bytes = gpu_bytes or ASSUMED_GPU_BYTES

    def _resources(self, alone: bool, need: int) -> dict[str, Any]:
        if self.device != "cuda":
            return {"num_cpus": 1}
        if alone:
            return {"num_cpus": 1, "num_gpus": 1}
        return {"num_cpus": 1, "num_gpus": gpu_fraction(need, self.gpu_bytes)}

    def _submit(
        self, branch: str, part: str, alone: bool, need: int, function: Any, *args: Any
    ) -> dict[str, Any]:
        alone = alone or part in ALONE
        # CUDA: Ray keeps a whole-GPU task off a GPU that fractional ones use. The CPU is no Ray resource
        # that could: its one slot is held here (a timing waits for the checks in flight, and none start)
        held = None
        if self.device != "cuda":
            held = self.pool.acquire_alone() if alone else self.pool.acquire(0)
        try:
            ref = function.options(**self.task_options, **self._resources(alone, need)).remote(*args)
            outcome = self.ray.get(ref)
        finally:
            if held is not None:
                self.pool.release(*held)
        gpu = outcome.get("gpu") if self.device == "cuda" else None
        self._record(
            Window(branch, part, gpu, outcome["started_at"], outcome["finished_at"], alone, outcome["host"])
        )
        return outcome

    def _evaluate_part(
        self, branch: str, part: str, sources: tuple[str, str], options: EvalOptions, on_event: Any,
        names: dict[str, Any], need: int = 0, alone: bool = False, ahead: Any = None,
    ) -> EvalResult:  # fmt: skip
        # Ray sets each task's CUDA_VISIBLE_DEVICES: the evaluation uses the first GPU it sees
        remote_options = _with_gpu(options, None)
        task_name = str(names.get("task_name") or "task")
        outcome = self._submit(branch, part, alone, need, self._evaluate, *sources, remote_options, task_name)
        return EvalResult.from_dict(outcome["result"])

    def profiler(self, inner: Any, branch: str) -> Any:
        return RayProfiler(inner, self, branch)

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "ray": self.address, "gpus": "ray"}

    def close(self) -> None:
        self.ray.shutdown()


class RayProfiler:
    """The loop's profile stage as a Ray task holding a whole GPU (no early start: see GatedProfiler)."""

    def __init__(self, inner: Any, devices: RayDevices, branch: str) -> None:
        self.options = _with_gpu(inner.options, 0)
        self.devices = devices
        self.branch = branch

    def cancel(self) -> None:
        """Nothing was started ahead of time."""

    def __call__(self, task_source: str, kernel_source: str, result: Any) -> dict[str, Any]:
        duration = result.timing.candidate.median_ms if getattr(result, "timing", None) else None
        outcome = self.devices._submit(
            self.branch, PROFILE, True, 0, self.devices._profile, task_source, kernel_source, duration, self.options
        )  # fmt: skip
        return outcome["profile"]


def _with_gpu(options: Any, gpu: int | None) -> Any:
    return dataclasses.replace(options, gpu_index=gpu)
