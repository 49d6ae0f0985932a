"""Where an evaluation's job folder lives: one folder per evaluating process holds them all.

Why (ARCHITECTURE.md §3, "Workers forked from one that has torch"): a fork server is sandboxed once,
when it starts, so every folder its workers will write must be reachable from the sandbox it got then.
Under bubblewrap that means one folder bound writable at the server's start; each forked worker is then
confined by Landlock to its own job folder below it. Workers started the usual way bind their own job
folder, so the place costs them nothing.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

_LOCK = threading.Lock()
_ROOT: list[Path] = []


def jobs_root() -> Path:
    """This process's folder of job folders (made on first use, removed at exit)."""
    with _LOCK:
        if not _ROOT or not _ROOT[0].is_dir():
            _ROOT[:] = [Path(tempfile.mkdtemp(prefix="cudaforge-jobs-"))]
        return _ROOT[0]


def new_job_dir(prefix: str = "cudaforge-eval-") -> Path:
    """A fresh, empty job folder below :func:`jobs_root`."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=jobs_root()))


@atexit.register
def _remove_root() -> None:
    with _LOCK:
        roots, _ROOT[:] = list(_ROOT), []
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)
