"""An exploration starts its evaluations' and profiles' processes before their GPU is theirs
(engine/explore/devices.py, "Started ahead"): real workers, real builds on the CPU, real threads."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import engine.explore.devices as devices_module
from engine.eval import spare
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from engine.evalset.memory import GpuMemoryPool
from engine.explore.devices import BUILD, CHECK, PROFILE, TIME, SharedDevices
from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, python_path, until

TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()
WRONG = KERNEL.replace("return ext.relu(x)", "return ext.leaky_relu_bug(x)")  # same build, wrong answer
assert WRONG != KERNEL


def _options(cache: Path, **overrides: Any) -> EvalOptions:
    plan = TimingPlan(min_trials=5, budget_s=0.5)
    return EvalOptions(device="cpu", cache_root=cache, timing=plan, **overrides)


def _recording_starts(monkeypatch: pytest.MonkeyPatch) -> list[spare.Spare | None]:
    """The real ``start_worker_for``, with each worker it starts kept for the test to look at."""
    started: list[spare.Spare | None] = []
    real = devices_module.start_worker_for

    def start(options: EvalOptions) -> spare.Spare | None:
        started.append(real(options))
        return started[-1]

    monkeypatch.setattr(devices_module, "start_worker_for", start)
    return started


@pytest.mark.slow
def test_the_check_and_the_timing_run_in_workers_started_before_their_turn(
    ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spare.discard_all()  # no shared spare of an earlier test stands in for the branch's own
    started = _recording_starts(monkeypatch)
    devices = SharedDevices("cpu")
    evaluate = devices.evaluator("explore/0-1")
    options = _options(ext_cache)

    evaluate.warm(options)  # the loop's call while the Coder writes
    checked = evaluate(TASK, KERNEL, dataclasses.replace(options, do_timing=False))
    assert checked.ok and checked.settings["worker"] == "spare"

    evaluate.warm(options)
    timed = evaluate(TASK, KERNEL, options)
    assert timed.ok and timed.timing is not None
    assert timed.settings["worker"] == "spare"  # the timing's worker, started when the check began
    assert len(started) == 3 and all(s is not None for s in started)  # warm, warm + the timing's
    assert all(s.worker.process.poll() is not None for s in started if s)  # each served once and ended
    parts = [w.part for w in devices.windows]
    assert parts == ["build", "check", "build", "check", "time"] and devices.overlaps() == []

    other = devices.evaluator("explore/0-2")(TASK, KERNEL, dataclasses.replace(options, do_timing=False))
    # nothing warmed for this branch: no one else's is taken, one is started for it there and then
    assert len(started) == 4 and started[-1] is not None and other.settings["worker"] == "spare"


@pytest.mark.slow
def test_a_failed_check_gives_up_the_timings_worker_and_a_finished_branch_its_warm_one(
    ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _recording_starts(monkeypatch)
    devices = SharedDevices("cpu")
    evaluate = devices.evaluator("explore/0-1")
    result = evaluate(TASK, WRONG, _options(ext_cache))
    assert result.status == "incorrect"
    assert [w.part for w in devices.windows] == ["build", "check"]  # never timed
    (check_worker, timing_worker) = started
    assert check_worker is not None and check_worker.worker.process.poll() is not None  # served, ended
    assert timing_worker is not None and timing_worker.worker.process.poll() is not None  # killed
    assert not timing_worker.job_dir.exists()

    evaluate.warm(_options(ext_cache))
    warmed = started[-1]
    assert warmed is not None and warmed.alive()
    devices.branch_done("explore/0-1")  # pruned, or its cap reached, while its Coder wrote
    assert warmed.worker.process.poll() is not None and devices._promised == {0: 0}


def test_a_promised_gpu_is_waited_for_and_promises_spread_over_the_gpus() -> None:
    pool = GpuMemoryPool({0: 10, 1: 10})
    assert pool.acquire(1, only=1) == (1, 1)  # the GPU its worker was started for, though GPU 0 has as much room
    assert pool.acquire(10) == (0, 10)  # without ``only``: where it fits
    pool.release(0, 10)
    got: list[tuple[int, int] | None] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire_alone(only=1)))
    waiter.start()
    assert until(lambda: pool.waiting_alone == 1)  # waiting, not done: the pool says so, no clock
    assert got == []  # GPU 0 is idle, but the process waiting was started for GPU 1
    pool.release(1, 1)
    waiter.join(5)
    assert got == [(1, 10)]

    devices = SharedDevices("cuda", [0, 1], budget_bytes=10 << 30)
    inner = [_RecordingProfiler(), _RecordingProfiler(), _RecordingProfiler()]
    gated = [devices.profiler(p, f"explore/0-{k}") for k, p in enumerate(inner, start=1)]
    for g in gated:
        g.prepare(TASK, KERNEL)
    assert [p.prepared_on for p in inner] == [0, 1, 0]  # started early, each on the GPU it was promised
    assert devices._promised == {0: 2, 1: 1}
    for g in gated:
        g(TASK, KERNEL, None)
    assert [p.profiled_on for p in inner] == [0, 1, 0]  # and profiled there, alone
    assert [(w.part, w.gpu, w.alone) for w in devices.windows] == [(PROFILE, 0, True), (PROFILE, 1, True), (PROFILE, 0, True)]
    assert devices._promised == {0: 0, 1: 0}
    gated[0].prepare(TASK, KERNEL)
    inner[0].cancelled = False
    gated[0].cancel()  # the check failed: the early profile is dropped, its promise returned
    assert inner[0].cancelled and devices._promised == {0: 0, 1: 0}
    assert TIME not in {w.part for w in devices.windows}


@dataclasses.dataclass
class _Options:
    gpu_index: int | None = None


class _RecordingProfiler:
    """Stands in for the loop's ncu profiler (there is no GPU here): says on which GPU it was started
    early and on which it was told to go."""

    def __init__(self) -> None:
        self.options = _Options()
        self.prepared_on: int | None = None
        self.profiled_on: int | None = None
        self.cancelled = False

    def prepare(self, task_source: str, kernel_source: str) -> None:
        self.prepared_on = self.options.gpu_index

    def cancel(self) -> None:
        self.cancelled = True

    def __call__(self, task_source: str, kernel_source: str, result: Any) -> dict[str, Any]:
        self.profiled_on = self.options.gpu_index
        return {"kind": "none"}


def _wrapped(kernel: Path, variant: str) -> str:
    """A reply holding the kernel, marked so each reply is a distinct kernel (a repeat is not timed again)."""
    source = kernel.read_text().replace("import torch\n", f"import torch\n\nFIXTURE_VARIANT = {variant!r}\n", 1)
    return f"Here is the kernel.\n\n```python\n{source}```\n"


@pytest.mark.gpu
def test_on_the_gpu_each_timing_and_profile_finds_its_process_started(tmp_path: Path, ext_cache: Path) -> None:
    """`cudaforge explore` on CUDA, two branches: every timing ran in a worker started before its turn
    and every ncu profile had started before it was told to go; nothing shared the GPU with them."""
    kernel = EXAMPLES / "kernels" / "relu_cuda.py"
    coder, judge = tmp_path / "coder", tmp_path / "judge"
    for folder in (coder / "branch-1", coder / "branch-2", judge):
        folder.mkdir(parents=True)
    for path in (coder / "01_seed.md", coder / "branch-1" / "01_kernel.md", coder / "branch-2" / "01_kernel.md"):
        path.write_text(_wrapped(kernel, str(path.relative_to(coder))))
    for reply in (EXAMPLES.parent / "tests" / "fixtures" / "scripted" / "explore" / "judge").iterdir():
        (judge / reply.name).write_text(reply.read_text())
    env = {**os.environ, "PYTHONPATH": python_path(), "CUDAFORGE_CACHE_DIR": str(ext_cache)}
    agents = ["--coder", f"scripted/{coder}", "--judge", f"scripted/{judge}"]
    sessions = tmp_path / "sessions"
    task = str(EXAMPLES / "tasks" / "relu_large.py")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tui.cli", *args], env=env, capture_output=True, text=True, timeout=600)

    seeded = cli("run", task, "--headless", "--auto-approve", "--rounds", "0", "--device", "cuda", *agents, "--sessions-dir", str(sessions))
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    (session,) = sessions.iterdir()
    explored = cli("explore", str(session), "--from", "0", "--width", "2", "--rounds", "1", "--device", "cuda",
                   "--gpus", "0", "--json", str(tmp_path / "explore.json"))  # fmt: skip
    assert explored.returncode == 0, explored.stdout + explored.stderr
    summary = json.loads((tmp_path / "explore.json").read_text())
    assert summary["devices"]["alone_overlaps"] == 0
    windows = summary["devices"]["windows"]
    parts = [w["part"] for w in windows]
    # the windows in the message: on the H200 this once saw one profile window of two, with no other evidence kept
    assert parts.count(TIME) == 2 and parts.count(PROFILE) == 2, (windows, explored.stdout[-3000:])
    assert parts.count(BUILD) == 2 and parts.count(CHECK) == 2  # each check built before its GPU share
    for k in (1, 2):
        build, check = (next(w for w in windows if w["branch"] == f"explore/0-{k}" and w["part"] == p) for p in (BUILD, CHECK))
        assert check["started_at"] >= build["finished_at"]
    repo = SessionRepo(session)
    try:
        for k in (1, 2):
            last = repo.history(f"explore/0-{k}")[-1]
            assert last.correct
            assert last.read_json("eval.json")["settings"]["worker"] == "spare"
            profile = last.read_json("profile.json")
            assert profile["kind"] == "ncu", profile.get("unavailable")
            assert profile["phases"]["before_go"] > 0  # ncu and its target had started before the go
    finally:
        repo.close()
