"""A worker started before its evaluation: Python, torch and cudaforge imported, waiting for its job.

Why (ARCHITECTURE.md §3, "A round's own time"): a fresh worker spends seconds before its first stage,
most of it importing torch. The loop knows an evaluation will follow while the Coder is still
writing, so it asks for a spare then (``prestart``); the evaluation that follows takes it (``take``),
writes its job into the spare's folder and sends the word to go.

An exploration (engine.explore.devices) also starts spares of its own, one per evaluation it is about
to run (``start``): a timing that waits for its GPU alone has its worker importing torch meanwhile,
instead of on the GPU's clock. Such a spare is its caller's, passed to that one evaluation
(``evaluate(..., worker=)``), and killed at exit if never used.

What stays as it was: each spare serves exactly one evaluation (every candidate still gets a fresh
process), and it is started exactly as that evaluation's own worker would be: the same sandbox, the
same allow-listed environment, the same GPU, its own job folder. It imports what the stages need but
never starts CUDA before its job arrives (an idle CUDA context would hold GPU memory, and GPU work
here could disturb another evaluation's timing). A spare for other settings is given up; a spare
whose evaluating process goes away sees its stdin close and exits, and one left at exit is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from engine import procgroups
from engine.eval import forkserver, jobdirs
from engine.eval.options import EvalOptions, EvaluationError
from engine.eval.supervisor import StartedWorker, start_worker, wait_for_status

JOB_FILE = "job.json"


@dataclass
class Spare:
    key: tuple[object, ...]
    job_dir: Path
    worker: StartedWorker

    def alive(self) -> bool:
        return self.worker.process.poll() is None

    def discard(self) -> None:
        procgroups.kill_tree(self.worker.process.pid)
        with contextlib.suppress(OSError):
            if self.worker.go_fd is not None:
                os.close(self.worker.go_fd)
        with contextlib.suppress(OSError):
            os.close(self.worker.read_fd)
        wait_for_status(self.worker.process)
        self.worker.output.join(timeout=2.0)
        shutil.rmtree(self.job_dir, ignore_errors=True)


_LOCK = threading.Lock()
_SPARES: dict[tuple[object, ...], Spare] = {}
_OWNED: dict[int, Spare] = {}  # started by ``start`` for a caller, not yet claimed: killed at exit


def spare_key(options: EvalOptions, cache_root: Path) -> tuple[object, ...]:
    """What a spare's start depends on: an evaluation takes only a spare started the way it would start."""
    return (options.device, options.gpu_index, options.sandbox, str(cache_root), sys.executable, os.environ.get("PATH"))


def prestart(options: EvalOptions, cache_root: Path) -> None:
    """Start a spare for evaluations with these settings, unless one is waiting already (at most one
    spare at a time: one of other settings is given up)."""
    key = spare_key(options, cache_root)
    with _LOCK:
        current = _SPARES.get(key)
        if current is not None and current.alive():
            return
        stale = list(_SPARES.values())
        _SPARES.clear()
    for spare in stale:
        spare.discard()
    spare = _start(key, options, cache_root)
    if spare is None:
        return
    with _LOCK:
        if key not in _SPARES:
            _SPARES[key] = spare
            return
    spare.discard()  # another thread started one meanwhile


def _start(key: tuple[object, ...], options: EvalOptions, cache_root: Path) -> Spare | None:
    job_dir = jobdirs.new_job_dir(shared=forkserver.kept(options))
    try:
        worker = start_worker(job_dir, options, cache_root, job_dir / JOB_FILE, spare=True)
    except (EvaluationError, OSError):
        shutil.rmtree(job_dir, ignore_errors=True)
        return None  # the evaluation starts its own worker, and reports the problem there
    return Spare(key, job_dir, worker)


def start(options: EvalOptions, cache_root: Path) -> Spare | None:
    """A spare for one evaluation the caller is about to run with exactly these settings, its own
    (not the shared one ``prestart`` keeps): pass it as ``evaluate(..., worker=)``, or ``release`` it.
    None when it could not start (the evaluation then starts its own worker and says why)."""
    spare = _start(spare_key(options, cache_root), options, cache_root)
    if spare is not None:
        with _LOCK:
            _OWNED[id(spare)] = spare
    return spare


def _disown(owned: Spare) -> bool:
    """``owned`` off the list of spares killed at exit; False when it was off it already."""
    with _LOCK:
        return _OWNED.pop(id(owned), None) is not None


def claim(owned: Spare, options: EvalOptions, cache_root: Path) -> Spare | None:
    """``owned`` (from ``start``) for the evaluation about to run: None, and ``owned`` killed, when it
    was started for other settings or has died (the evaluation starts a worker the usual way)."""
    _disown(owned)
    if owned.key == spare_key(options, cache_root) and owned.alive():
        return owned
    owned.discard()
    return None


def release(owned: Spare | None) -> None:
    """An unused spare from ``start`` given up (its evaluation was not needed); idempotent."""
    if owned is not None and _disown(owned):
        owned.discard()


def take(options: EvalOptions, cache_root: Path) -> Spare | None:
    """The waiting spare for these settings, now the caller's (None: start a worker the usual way)."""
    with _LOCK:
        spare = _SPARES.pop(spare_key(options, cache_root), None)
    if spare is None:
        return None
    if spare.alive():
        return spare
    spare.discard()
    return None


@atexit.register
def discard_all() -> None:
    with _LOCK:
        spares = [*_SPARES.values(), *_OWNED.values()]
        _SPARES.clear()
        _OWNED.clear()
    for spare in spares:
        spare.discard()
