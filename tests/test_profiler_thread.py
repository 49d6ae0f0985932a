"""The profiler's own thread (engine.guard.profiler_thread): the warm-up never holds up its caller, every
session runs on that one thread after whatever was queued before it, and the caller's torch state
travels with the session. The real PyTorch profiler runs here (on CPU it records no CUDA kernel)."""

from __future__ import annotations

import threading

import pytest
import torch

from engine.guard import profiler_thread, share
from tests.conftest import until

THREAD = "cudaforge-profiler"


def test_the_warm_up_returns_at_once_and_later_sessions_wait_behind_it() -> None:
    events: list[str] = []
    release = threading.Event()

    def slow_warm_up() -> str:
        events.append("warm-up started")
        release.wait(60)
        events.append("warm-up ended")
        return threading.current_thread().name

    warming = profiler_thread.submit(slow_warm_up)
    events.append("caller went on")  # submit returned while the warm-up still waits
    assert until(lambda: "warm-up started" in events)
    assert not warming.done()

    session: list[str] = []
    waiter = threading.Thread(
        target=lambda: session.append(profiler_thread.run(lambda: events.append("session") or "ran"))
    )
    waiter.start()
    release.set()
    waiter.join(60)
    assert warming.result(60) == THREAD
    assert session == ["ran"]
    assert events.index("caller went on") < events.index("warm-up ended") < events.index("session")


def test_a_session_runs_on_the_profiler_thread_with_the_callers_grad_and_inference_mode() -> None:
    def state() -> tuple[str, bool, bool]:
        return threading.current_thread().name, torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    with torch.no_grad():
        assert profiler_thread.run(state) == (THREAD, False, False)
    with torch.enable_grad():
        assert profiler_thread.run(state) == (THREAD, True, False)
    with torch.inference_mode():
        assert profiler_thread.run(state) == (THREAD, False, True)


def test_a_sessions_exception_reaches_the_caller() -> None:
    def fails() -> None:
        raise RuntimeError("the candidate's forward failed under the profiler")

    with pytest.raises(RuntimeError, match="forward failed under the profiler"):
        profiler_thread.run(fails)
    assert profiler_thread.run(lambda: 7) == 7  # the thread serves on


def test_a_session_started_from_the_profiler_thread_runs_in_place() -> None:
    assert profiler_thread.run(lambda: profiler_thread.run(lambda: threading.current_thread().name)) == THREAD


def test_without_cuda_the_warm_up_and_a_session_fail_to_their_caller_not_to_the_thread() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CPU-only torch refuses a CUDA-only profiler session")
    warming = share.warm_profiler()
    with pytest.raises(AssertionError, match="No activities"):
        share.cuda_kernel_times(lambda: None, repeats=1)  # queued behind the warm-up, refused like it
    assert isinstance(warming.exception(60), AssertionError)
    assert profiler_thread.run(lambda: threading.current_thread().name) == THREAD


@pytest.mark.gpu
def test_on_cuda_a_session_profiles_the_call_on_the_profiler_thread_after_the_warm_up() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    x = torch.randn(1 << 16, device="cuda")
    warming = share.warm_profiler()
    seen: list[tuple[str, bool]] = []

    def forward() -> None:
        seen.append((threading.current_thread().name, torch.is_grad_enabled()))
        torch.relu(x)

    with torch.no_grad():
        times = share.cuda_kernel_times(forward, repeats=2)
    assert warming.done() and warming.exception() is None and warming.result() > 0.0
    assert seen == [(THREAD, False), (THREAD, False)]
    launched = {name: count for name, (_ms, count) in times.items()}
    assert any("elementwise" in name or "relu" in name.lower() for name in launched), launched
    assert sum(launched.values()) == 2
