"""Precompiled headers made in the background by the evaluating process, after the worker is gone.

Why (ARCHITECTURE.md §3, "Builds"): the header for a new flag set takes about as long to make as a stock
build (~50 s), and its command comes from the candidate's own build file (its flags), so it runs in the
sandbox. The worker used to make it and wait for it before exiting, since the sandbox ends with the
worker: the first evaluation of a flag set took ~70 s of wall time for a ~20 s build. Now the worker
only asks for it (``HeaderStore.queue`` writes the command and a ``queued`` marker) and the verdict comes
back at once; the evaluating process then starts each asked-for header in a sandbox of its own (no GPU,
writes only to the build cache) and goes on. A maker ends with that process: a one-shot ``cudaforge
eval`` waits for it after printing the verdict, and says so; the workbench and the batch commands just
go on.

Makers are started from one long-lived thread of their own. Under bwrap (``--die-with-parent``) a
process dies when the *thread* that started it exits, not its process: started from the thread that
ran an evaluation (a worker thread of the workbench, a pool thread of evalset, bench or the round
benchmark) every maker was killed as that thread ended, its ``making`` marker stayed behind, and the
header was never made (measured on the H200: every flag-less build of a 10-kernel run said ``queued``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from engine import procgroups, sandbox
from engine.eval.build.pch import CLAIM, MAKE_SCRIPT, HeaderStore, making_marker

# Landlock confines the process that applies it and what it starts: the maker applies the rules the
# sandbox passed (none under bwrap or off), then becomes ``sh`` running the header's command.
CONFINED_SH = (
    "import os, sys; from engine.sandbox.landlock import apply_from_env; apply_from_env(); "
    "os.execvp('sh', ['sh', sys.argv[1]])"
)
_MAKERS: list[tuple[subprocess.Popen, Path]] = []
_LOCK = threading.Lock()
_LAUNCHES: queue.Queue[tuple[Callable[[], Any], Future]] = queue.Queue()
_LAUNCHER: threading.Thread | None = None


def _launcher_loop() -> None:
    while True:
        job, future = _LAUNCHES.get()
        try:
            future.set_result(job())
        except BaseException as error:  # noqa: BLE001 - handed back to the caller, raised there
            future.set_exception(error)


def _on_launcher(job: Callable[[], Any]) -> Any:
    """Run ``job`` (a Popen) on the launcher thread, which lives as long as the process: a daemon thread
    is never joined, so its children's parent-death signal fires only when the process itself ends."""
    global _LAUNCHER
    with _LOCK:
        if _LAUNCHER is None or not _LAUNCHER.is_alive():
            _LAUNCHER = threading.Thread(target=_launcher_loop, name="cudaforge-header-makers", daemon=True)
            _LAUNCHER.start()
    future: Future = Future()
    _LAUNCHES.put((job, future))
    return future.result()


def start_queued(cache_root: Path, sandbox_mode: str) -> list[str]:
    """Start a maker for every header asked for in ``cache_root`` that nobody makes; the keys started."""
    running()  # reaps makers that ended: a killed one's marker then names a process that is gone
    store = HeaderStore(cache_root)
    started = []
    for key in store.queued():
        folder = store.folder(key)
        try:
            claim = os.open(folder / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except OSError:
            continue  # another process claimed it, or the folder went away
        os.close(claim)
        try:
            launch = sandbox.prepare(
                sandbox_mode, [sys.executable, "-c", CONFINED_SH, str(folder / MAKE_SCRIPT)],
                job_dir=folder, writable=[cache_root], device="cpu",
            )  # fmt: skip
            log = open(folder / "make.log", "w")  # noqa: SIM115 - handed to the child
            process = _on_launcher(functools.partial(
                subprocess.Popen, launch.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=folder, env=launch.env, start_new_session=True,
            ))  # fmt: skip
            log.close()
        except Exception:  # noqa: BLE001 - no header is only slower builds; never a failed evaluation
            with contextlib.suppress(OSError):
                os.unlink(folder / CLAIM)
            continue
        procgroups.track(process)
        (folder / "making").write_text(making_marker(process.pid))
        with _LOCK:
            _MAKERS.append((process, folder))
        started.append(key)
    return started


def running() -> list[Path]:
    """The header folders this process is still making."""
    with _LOCK:
        return [folder for process, folder in _MAKERS if process.poll() is None]


def wait(timeout_s: float = 600.0) -> bool:
    """Wait for this process's makers (bounded); True when none is left running."""
    deadline = time.monotonic() + timeout_s
    with _LOCK:
        makers = list(_MAKERS)
    for process, _ in makers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
    return not running()


@atexit.register
def _stop_at_exit() -> None:
    """A maker ends with its process (under bwrap it would anyway); its folder is asked for again later."""
    with _LOCK:
        makers = list(_MAKERS)
    for process, folder in makers:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            # reaped before this returns: a killed maker is gone, not a zombie still counted as running
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5.0)
        if process.returncode != 0:  # killed (now or earlier) before its script could clean up after it
            for name in (CLAIM, "making", "torch/extension.h.gch.tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(folder / name)
