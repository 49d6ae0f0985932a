"""The own-kernel share: how much of a candidate's forward runs in kernels built from its own sources.

Under the ``default`` policy (engine.guard.policy) PyTorch ops may stay beside the candidate's kernels;
what must not happen is an own kernel that is present but does no work while PyTorch does it all. This
module turns measurements into the ``EvalResult.kernel_share`` record:

    {"share": own / (own + library) device time, "own_ms", "library_ms", "method",
     "kernels": [{"name", "own", "ms", "calls"}] sorted by ms descending}

- CUDA (``method`` "cuda-profiler"): the PyTorch profiler (CUPTI) lists every kernel one forward
  launches with its device time; a kernel is the candidate's own when its full signature is compiled
  into one of the candidate's extensions (engine.guard.binary: evidence from the binary, never from a
  name in the source), else a library one (cuBLAS, cuDNN, ATen, ...).
- CPU (``method`` "cpu-extension-wall"): there are no kernels to list. The worker wraps the functions
  of the extension modules ``load_inline`` returned and sums the wall time spent inside them during a
  forward; share = that time / the forward's wall time. What it cannot see: an extension function
  fetched before the measurement (``fn = ext.fn`` kept on ``self``) is not wrapped, and ATen work called
  from inside the extension counts as the extension's own. So on CPU the share is recorded, never used
  to refuse.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from engine.guard.runtime import OWN_SHARE_MIN

CUDA_METHOD = "cuda-profiler"
CPU_METHOD = "cpu-extension-wall"


def share_record(kernels: Iterable[dict[str, Any]], method: str) -> dict[str, Any]:
    """The ``kernel_share`` record from per-kernel rows ``{"name", "own", "ms", "calls"}``."""
    rows = sorted(
        (
            {"name": k["name"], "own": bool(k["own"]), "ms": float(k["ms"]), "calls": int(k["calls"])}
            for k in kernels
        ),
        key=lambda k: -k["ms"],
    )
    own = sum(k["ms"] for k in rows if k["own"])
    library = sum(k["ms"] for k in rows if not k["own"])
    total = own + library
    return {
        "share": (own / total) if total > 0 else 0.0,
        "own_ms": own,
        "library_ms": library,
        "method": method,
        "kernels": rows,
    }


def classify_kernels(
    times: dict[str, tuple[float, int]], own_launched: Iterable[str], calls_per: int = 1
) -> list[dict[str, Any]]:
    """Rows from ``{kernel name: (total ms, launches)}`` measured over ``calls_per`` forwards (per-forward
    values); ``own_launched``: the launched names attributed to the candidate (engine.guard.binary)."""
    own = set(own_launched)
    n = max(1, calls_per)
    return [
        {"name": name, "own": name in own, "ms": ms / n, "calls": max(1, round(count / n)) if count else 0}
        for name, (ms, count) in times.items()
    ]


def cuda_kernel_times(call: Callable[[], object], repeats: int = 3) -> dict[str, tuple[float, int]]:
    """Device time (ms) and launch count per kernel name over ``repeats`` calls, from the PyTorch profiler
    (on the profiler's own thread, engine.guard.profiler_thread, after its warm-up)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.guard import profiler_thread

    def profiled() -> Any:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                call()
            torch.cuda.synchronize()
        return prof

    prof = profiler_thread.run(profiled)
    times: dict[str, tuple[float, int]] = {}
    for event in prof.events():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        elapsed_ms = event.time_range.elapsed_us() / 1000.0
        ms, count = times.get(event.name, (0.0, 0))
        times[event.name] = (ms + elapsed_ms, count + 1)
    return times


def warm_profiler() -> Future[float]:
    """Start one empty PyTorch-profiler session on the profiler's thread and return at once: the first
    session in a process pays for loading and starting CUPTI (seconds on the H200 machine,
    benchmarks/RESULTS.md), so the worker starts this before the task's import and the candidate's build
    and the launch check's own session then starts warm. The future gives the warm-up's seconds."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.guard import profiler_thread

    def warm() -> float:
        started = time.monotonic()
        with profile(activities=[ProfilerActivity.CUDA]):
            torch.cuda.synchronize()
        return time.monotonic() - started

    return profiler_thread.submit(warm)


def trivial_share_message(record: dict[str, Any], threshold: float = OWN_SHARE_MIN) -> str | None:
    """The refusal message of ``own-kernel-trivial`` when the own kernels did no measurable work, else None."""
    if record.get("method") != CUDA_METHOD:
        return None
    total = record["own_ms"] + record["library_ms"]
    if total <= 0 or not any(k["own"] for k in record["kernels"]):
        return None  # nothing measured, or no own kernel at all (that is no-own-kernel's job)
    if record["share"] >= threshold:
        return None
    top = ", ".join(f"{k['name'][:60]} {k['ms']:.4f} ms" for k in record["kernels"] if not k["own"])[:300]
    return (
        f"the candidate's own kernels took {record['own_ms']:.4f} ms of {total:.4f} ms device time per forward "
        f"(share {record['share']:.2%} < {threshold:.0%}): the work is done by library kernels ({top})"
    )


class ExtensionTimer:
    """Sums the wall time spent inside extension modules' functions while active (the CPU share).

    The functions are replaced on the module objects only for the measured calls and restored after,
    so timing runs see the untouched extension."""

    def __init__(self, modules: Iterable[Any]) -> None:
        self.modules = [m for m in modules if m is not None and not isinstance(m, str)]
        self.seconds = 0.0
        self.calls: dict[str, list[float]] = {}
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> ExtensionTimer:
        for module in self.modules:
            for attr in dir(module):
                if attr.startswith("_"):
                    continue
                fn = getattr(module, attr, None)
                if not callable(fn) or isinstance(fn, type):
                    continue
                try:
                    setattr(module, attr, self._wrap(f"{getattr(module, '__name__', '?')}.{attr}", fn))
                except (AttributeError, TypeError):
                    continue
                self._saved.append((module, attr, fn))
        return self

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - started
                timer.seconds += spent
                entry = timer.calls.setdefault(name, [0.0, 0])
                entry[0] += spent
                entry[1] += 1

        return timed

    def __exit__(self, *exc: object) -> None:
        for module, attr, fn in reversed(self._saved):
            setattr(module, attr, fn)
        self._saved.clear()


def cpu_extension_share(
    modules: Iterable[Any], call: Callable[[], object], repeats: int = 3
) -> dict[str, Any]:
    """The CPU share: wall time inside extension functions / the forward's wall time, per forward."""
    call()  # warm-up outside the measurement (first-call allocations)
    with ExtensionTimer(modules) as timer:
        started = time.perf_counter()
        for _ in range(repeats):
            call()
        forward = time.perf_counter() - started
    own_ms = 1000.0 * timer.seconds / repeats
    rest_ms = max(0.0, 1000.0 * forward / repeats - own_ms)
    rows = [
        {"name": name, "own": True, "ms": 1000.0 * spent / repeats, "calls": max(1, round(count / repeats))}
        for name, (spent, count) in timer.calls.items()
    ]
    rows.append(
        {"name": "(outside the extension: PyTorch and Python)", "own": False, "ms": rest_ms, "calls": 1}
    )
    return share_record(rows, CPU_METHOD)
