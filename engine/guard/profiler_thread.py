"""One thread of the worker's own for every PyTorch-profiler session (ARCHITECTURE.md §3, "Defences").

The first profiler session in a process loads and starts CUPTI: seconds on the H200 machine
(benchmarks/RESULTS.md). The worker starts that warm-up as soon as its CUDA context exists, so it
overlaps the task's import and the candidate's build. Kineto refuses a session begun from another
thread than the one it was warmed on, so the warm-up and every later session (the launch check, the
replay probe) run on this one thread, in order; the caller waits only for its own session.

Before, the warm-up ran on the worker's main thread at the build stage's start: a candidate whose
compile failed in 3 s still waited the warm-up's 7 s before its verdict (issue 47).

A session runs the caller's function on this thread, so the caller's thread-local torch state travels
with it: grad mode, inference mode, the current CUDA device and stream.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] | None = None


def _serve(jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]]) -> None:
    while True:
        job, future = jobs.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(job())
        except BaseException as error:  # noqa: BLE001 - handed to the caller, which decides
            future.set_exception(error)


def submit(job: Callable[[], T]) -> Future[T]:
    """Queue ``job`` on the profiler thread (started on first use, a daemon: the worker ends with
    ``os._exit`` and never waits for a warm-up it no longer needs)."""
    global _jobs
    with _lock:
        if _jobs is None:
            _jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(_jobs,), name="cudaforge-profiler", daemon=True).start()
        future: Future[T] = Future()
        _jobs.put((job, future))
    return future


def _carrying_torch_state(job: Callable[[], T]) -> Callable[[], T]:
    """``job`` wrapped to run with the calling thread's grad mode, inference mode, CUDA device and stream."""
    import contextlib

    import torch

    grad = torch.is_grad_enabled()
    inference = torch.is_inference_mode_enabled()
    stream = (
        torch.cuda.current_stream() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    )

    def carried() -> T:
        with contextlib.ExitStack() as stack:
            if stream is not None:
                stack.enter_context(torch.cuda.device(stream.device))
                stack.enter_context(torch.cuda.stream(stream))
            stack.enter_context(torch.inference_mode(inference))
            stack.enter_context(torch.set_grad_enabled(grad))
            return job()

    return carried


def run(job: Callable[[], T]) -> T:
    """Run ``job`` on the profiler thread, after whatever is queued before it, and return its result
    (or raise its exception) here."""
    if threading.current_thread().name == "cudaforge-profiler":
        return job()  # already there: queueing behind ourselves would wait forever
    return submit(_carrying_torch_state(job)).result()
