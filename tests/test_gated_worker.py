"""A gated worker (engine/eval/pipe.py, ``GPU_WAIT``): it builds what its source names, then waits for
the engine's word before any GPU work or task code runs. An exploration's check uses it so that a
long build holds no GPU another branch's timing waits for (engine/explore/devices.py). Real workers,
real builds on the CPU, real threads."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from engine.eval import spare
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalEvent, EvalOptions
from engine.eval.timing import TimingPlan
from engine.explore.devices import BUILD, CHECK, TIME, SharedDevices
from tests.conftest import EXAMPLES

TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()


def _fresh(kernel: str = KERNEL) -> tuple[str, str]:
    """The kernel under an extension name and source no cache has seen: its build really runs."""
    name = f"cf_gate_{uuid.uuid4().hex[:10]}"
    source = kernel.replace('name="cf_relu_cpu"', f'name="{name}"').replace(
        "#include <torch/extension.h>", f"#include <torch/extension.h>\n// {name}"
    )
    assert name in source and f"// {name}" in source
    return name, source


def _options(cache: Path, **overrides: Any) -> EvalOptions:
    return EvalOptions(device="cpu", cache_root=cache, timing=TimingPlan(min_trials=5, budget_s=0.5), **overrides)


@pytest.mark.slow
def test_a_spare_worker_gated_waits_twice_and_a_gate_that_fails_ends_the_evaluation(ext_cache: Path) -> None:
    options = _options(ext_cache, do_timing=False)
    worker = spare.start(options, ext_cache.resolve())
    assert worker is not None
    calls: list[float] = []
    result = evaluate(TASK, KERNEL, options, worker=worker, gate=lambda: calls.append(time.time()))
    assert result.ok and result.settings["worker"] == "spare" and len(calls) == 1

    def refuse() -> None:
        raise RuntimeError("the exploration was stopped while this check waited")

    waiting = spare.start(options, ext_cache.resolve())
    assert waiting is not None
    with pytest.raises(RuntimeError, match="stopped"):
        evaluate(TASK, KERNEL, options, worker=waiting, gate=refuse)
    # the waiting worker was killed and its folder removed: nothing of it is left behind, not even
    # the pipe it waited on
    assert waiting.worker.process.poll() is not None and not waiting.job_dir.exists()
    assert waiting.worker.go_fd is None  # closed (supervisor: close_go)


@pytest.mark.slow
def test_a_branchs_build_holds_no_gpu_so_anothers_timing_runs_meanwhile(ext_cache: Path) -> None:
    """Branch 1 builds a fresh extension (about 25 s here); branch 2, whose build is cached, is checked
    and timed meanwhile. Its timing needs the slot alone: before builds were gated it waited for
    branch 1's whole check, build included. Branch 1's worker had built before it asked for the slot,
    and ran the task only after it got it."""
    spare.discard_all()
    devices = SharedDevices("cpu")
    slow_name, slow_kernel = _fresh()
    options = _options(ext_cache)
    evaluate(TASK, KERNEL, dataclasses.replace(options, do_timing=False))  # branch 2's build, cached
    building = threading.Event()
    results: dict[str, Any] = {}
    stages: list[str] = []

    def branch_1() -> None:
        def on_event(event: EvalEvent) -> None:
            if event.kind == "stage":
                stages.append(event.stage)
                if event.stage == "build":
                    building.set()

        check = dataclasses.replace(options, do_timing=False)
        results["1"] = devices.evaluator("explore/0-1")(TASK, slow_kernel, check, on_event)

    first = threading.Thread(target=branch_1)
    first.start()
    assert building.wait(120), "branch 1's worker never started its build"
    results["2"] = devices.evaluator("explore/0-2")(TASK, KERNEL, options)
    first.join(600)
    assert results["1"].ok and results["2"].ok and results["2"].timing is not None
    windows = {(w.branch[-1], w.part): w for w in devices.windows}
    build_1, check_1, time_2 = windows["1", BUILD], windows["1", CHECK], windows["2", TIME]
    assert time_2.started_at < build_1.finished_at, "branch 2's timing waited for branch 1's build"
    assert check_1.started_at >= build_1.finished_at  # branch 1 held the slot only once built
    assert devices.overlaps() == []  # a build beside a timing is no overlap: it holds no GPU
    stats = devices.stats()
    assert stats["seconds_by_part"][BUILD] >= build_1.seconds > 0
    parts = stats["seconds_by_part"]
    assert stats["evaluation_seconds"] == pytest.approx(parts[BUILD] + parts[CHECK] + parts[TIME], abs=0.01)
    [built] = results["1"].build.extensions
    assert slow_name in built.build_dir
    assert built.prebuilt and not built.cached  # built ahead by this evaluation; the import found it done
    [library] = Path(built.build_dir).glob(f"{slow_name}*.so")
    assert library.stat().st_mtime <= build_1.finished_at  # on disk before the worker asked for the slot
    assert stages.index("build") < stages.index("gpu_wait") < stages.index("reference")  # no task code before
    assert "gpu_wait" in results["1"].durations  # the wait is its own stage, neither the build's nor setup's
