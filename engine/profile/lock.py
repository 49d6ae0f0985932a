"""One ncu per GPU at a time, across processes: an fcntl lock file per GPU.

Why: ncu serialises launches and takes its own per-device lock, so a second ncu on the same GPU fails or
stalls; and profiling next to a timing run skews the timing. Several cudaforge sessions (or workers) on one
machine therefore queue here. The lock is released by the kernel when the holder dies, so a crashed worker
never leaves a stale lock behind.

Key the lock on the GPU's UUID when you have it: an index depends on CUDA_VISIBLE_DEVICES, a UUID does not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path


def default_lock_dir() -> Path:
    """$XDG_RUNTIME_DIR/cudaforge/locks (per user, tmpfs) or ~/.cache/cudaforge/locks."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path.home() / ".cache"
    return base / "cudaforge" / "locks"


def lock_path(gpu: int | str, lock_dir: str | Path | None = None) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", str(gpu))
    return Path(lock_dir or default_lock_dir()) / f"ncu-gpu-{safe}.lock"


@contextlib.contextmanager
def gpu_profile_lock(
    gpu: int | str,
    *,
    lock_dir: str | Path | None = None,
    timeout_s: float | None = None,
    poll_s: float = 0.05,
) -> Iterator[Path]:
    """Hold the profiling lock for `gpu` (index or UUID) for the duration of the `with` block.

    Blocks until the lock is free, or raises TimeoutError after `timeout_s` seconds.
    """
    path = lock_path(gpu, lock_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(
                            f"GPU {gpu} is being profiled by another process ({path})"
                        ) from None
                    time.sleep(poll_s)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
