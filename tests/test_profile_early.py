"""The profile started while its kernel is evaluated (engine/profile/candidate.py, ProfileRun early).

ncu itself runs on the GPU machine (tests/test_loop_gpu.py, the smoke's loop round); here the part that
keeps the early start harmless: the profiled process waits for its kernel's verdict before it imports
the candidate or starts CUDA, and a kernel that failed leaves nothing behind.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.profile.candidate import LoopProfiler, ProfileOptions, ProfileRun
from engine.profile.target import wait_for_go
from tests.conftest import EXAMPLES


def test_the_target_waits_for_the_verdict(tmp_path: Path) -> None:
    go, stop = tmp_path / "go", tmp_path / "stop"
    assert not go.exists()
    threading.Timer(0.3, go.touch).start()
    assert wait_for_go(go, stop, limit_s=60) is True  # there was no go file when it began: it waited for it
    go.unlink()
    stop.touch()
    assert wait_for_go(go, stop, limit_s=10) is False  # the kernel failed: never touch CUDA
    stop.unlink()
    assert wait_for_go(go, stop, limit_s=0.2) is False  # nobody answers: give up
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    # the evaluating process was killed: it returns although the limit is far off (pytest's timeout bounds a hang)
    assert wait_for_go(go, stop, limit_s=3600, parent=gone.pid) is False


def test_a_profile_prepared_for_a_kernel_that_failed_leaves_nothing(tmp_path: Path) -> None:
    profiler = LoopProfiler(ProfileOptions(cache_root=tmp_path / "cache"))
    profiler.prepare("task", "kernel")
    assert profiler._pending is not None
    work = profiler._pending[2].work
    profiler.cancel()
    assert profiler._pending is None and not work.exists()


@pytest.mark.gpu
def test_two_profiles_waiting_at_once_each_runs_when_told_to_go_in_either_order(ext_cache: Path) -> None:
    """An exploration's branches each start their profile early; the one told to go first may be the
    one started last. Each takes the GPU's profile lock only at its go: none waits behind another that
    is still waiting for its own (which held the lock, and both waited ten minutes, before)."""
    task = (EXAMPLES / "tasks" / "relu_large.py").read_text()
    kernel = (EXAMPLES / "kernels" / "relu_cuda.py").read_text()
    options = ProfileOptions(cache_root=ext_cache)
    first = ProfileRun(task, kernel, options, early=True).start()
    second = ProfileRun(task, kernel, options, early=True).start()
    later, _ = second.result()  # the one started last goes first: a deadlock would end at pytest's timeout
    earlier, _ = first.result()
    assert later.kind == "ncu", later.unavailable
    assert earlier.kind == "ncu", earlier.unavailable
