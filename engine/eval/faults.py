"""Faults of cudaforge itself, told apart from the candidate's (ARCHITECTURE.md §3, "Harness faults").

Only what the candidate did may decide its status. When the harness fails — an import error in
cudaforge's own code, an internal exception, an environment that cannot build (no ninja, no CUDA
toolkit), or an out-of-memory while *other* processes held most of the GPU — the result's status is
``harness_error`` with a ``harness_fault`` record saying which, instead of a ``compile_error`` or
``runtime_error`` that blames the kernel. The loop never hands such a result to the Judge, batch
commands rerun it, and sessions never commit it.

How the worker decides, for an exception it did not expect:

* a :class:`HarnessFault` raised by cudaforge's own code (the build hook, which keeps the very object
  it raised: one the candidate raises itself is not believed) is the harness's;
* an out-of-memory is the harness's only when the GPU was shared: other processes held more than
  :data:`CONTENTION_BYTES` when it happened (the numbers are recorded either way);
* a CUDA error after the candidate ran, or an exception whose traceback passes through the
  candidate's file, is the candidate's;
* anything else raised while cudaforge's code ran is the harness's.
"""

from __future__ import annotations

import traceback
from typing import Any

# ``harness_fault["kind"]`` values
INTERNAL = "internal"  # an exception in cudaforge's own code
IMPORT = "import"  # cudaforge's code could not import a module it needs (a broken install)
ENVIRONMENT = "environment"  # the machine cannot do what was asked (no ninja, no CUDA toolkit, worker cannot start)
OOM_CONTENTION = "oom-contention"  # out of GPU memory while other processes held most of it
KINDS = (INTERNAL, IMPORT, ENVIRONMENT, OOM_CONTENTION)

GiB = 1 << 30
# Memory on the GPU held by others (besides this process's allocator) above which an OOM is the
# GPU being shared, not the kernel: this process's own CUDA context and library handles take ~0.5 GiB.
CONTENTION_BYTES = 2 * GiB

# Messages of torch's extension builder that mean the machine, not the source, cannot build.
_ENVIRONMENT_MARKERS = (
    "Ninja is required to load C++ extensions",
    "CUDA_HOME environment variable is not set",
    "No CUDA runtime is found",
)


class HarnessFault(Exception):
    """Raised by cudaforge's own code when it, not the candidate, failed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def record(kind: str, message: str, error: BaseException | None = None, **extra: Any) -> dict[str, Any]:
    """The ``harness_fault`` dict of an EvalResult."""
    data: dict[str, Any] = {"kind": kind, "message": message[:2000]}
    if error is not None:
        data["error_type"] = type(error).__name__
    data.update(extra)
    return data


def in_chain(error: BaseException, wanted: BaseException) -> bool:
    """Whether ``wanted`` is ``error`` or in its cause/context chain (a candidate may wrap ours)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if current is wanted:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def environment_problem(error: BaseException) -> str | None:
    """Why the machine cannot build, when torch's builder says so (else None: the source's problem)."""
    text = str(error)
    for marker in _ENVIRONMENT_MARKERS:
        if marker in text:
            return f"{marker} (run `cudaforge doctor`)"
    if isinstance(error, FileNotFoundError) and getattr(error, "filename", None) in ("nvcc", "c++", "g++", "ninja"):
        return f"{error.filename} is not installed or not on PATH (run `cudaforge doctor`)"
    return None


def is_oom(error: BaseException) -> bool:
    """An out-of-memory of the GPU (torch's own error, or a library that ran out of device memory)."""
    try:
        import torch

        if isinstance(error, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):
        pass
    text = str(error)
    return "CUDA out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text


def is_cuda_error(error: BaseException) -> bool:
    """A CUDA runtime error (an illegal access surfaces at the next synchronising call, anywhere)."""
    name = type(error).__name__
    text = str(error)
    return name == "AcceleratorError" or "CUDA error" in text or "illegal memory access" in text


def gpu_memory(device: Any) -> dict[str, int] | None:
    """Free, total, this process's reserved and everyone else's bytes on ``device`` (None off CUDA)."""
    try:
        import torch

        if getattr(device, "type", str(device)) != "cuda" or not torch.cuda.is_initialized():
            return None
        free, total = torch.cuda.mem_get_info(device)
        own = torch.cuda.memory_reserved(device)
    except Exception:  # noqa: BLE001 - a context broken by the candidate cannot answer
        return None
    return {
        "free_bytes": int(free),
        "total_bytes": int(total),
        "own_reserved_bytes": int(own),
        "others_bytes": max(0, int(total) - int(free) - int(own)),
    }


def contention(memory: dict[str, int] | None) -> bool:
    """True when others held enough of the GPU that an OOM here says nothing about the kernel."""
    return bool(memory) and memory["others_bytes"] > CONTENTION_BYTES


def describe_memory(memory: dict[str, int] | None) -> str:
    if not memory:
        return "GPU memory unknown"
    g = lambda n: f"{n / GiB:.2f} GiB"  # noqa: E731
    return (
        f"{g(memory['free_bytes'])} free of {g(memory['total_bytes'])}; this evaluation held "
        f"{g(memory['own_reserved_bytes'])}, other processes {g(memory['others_bytes'])}"
    )


def passes_through(error: BaseException, path: str) -> bool:
    """True when ``error``'s traceback has a frame in the file ``path`` (the candidate's code ran)."""
    return any(frame.filename == path for frame in traceback.extract_tb(error.__traceback__))
