"""Where an evaluation's job folder lives: one folder holds them all.

Why (ARCHITECTURE.md §3, "Workers forked from one that has torch"): a fork server is sandboxed once,
when it starts, so every folder its workers will write must be reachable from the sandbox it got then.
Under bubblewrap that means one folder bound writable at the server's start; each forked worker is then
confined by Landlock to its own job folder below it. Workers started the usual way bind their own job
folder, so the place costs them nothing.

Where fork servers are kept for later commands (engine.eval.keptserver), that folder is the same for
every command of this user: ``jobs`` in :func:`private_dir`, which only this user may enter. Otherwise
it is one folder per evaluating process, removed at its exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

_LOCK = threading.Lock()
_ROOT: list[Path] = []


def private_dir() -> Path | None:
    """``cudaforge-<uid>`` in the temporary folder, made with mode 0700; None when it exists and is
    not this user's own private folder (a link, another owner, open to others): then nothing shared is
    kept there."""
    path = Path(tempfile.gettempdir()) / f"cudaforge-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return path


def shared_root() -> Path | None:
    """This user's own folder of job folders shared by the commands of one kept server (``jobs`` in
    :func:`private_dir`), or None where it cannot be had (then no server is kept)."""
    private = private_dir()
    if private is None:
        return None
    root = private / "jobs"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    _sweep_once(root)
    return root


def jobs_root(shared: bool = False) -> Path:
    """The folder of job folders: with ``shared`` (a kept server's), :func:`shared_root` where it can
    be had; else this process's (made on first use, removed at exit)."""
    root = shared_root() if shared else None
    if root is not None:
        return root
    with _LOCK:
        if not _ROOT or not _ROOT[0].is_dir():
            _ROOT[:] = [Path(tempfile.mkdtemp(prefix="cudaforge-jobs-"))]
        return _ROOT[0]


STALE_S = 7 * 24 * 3600.0  # a shared job folder untouched this long was left by a command that was killed
_SWEPT: set[Path] = set()


def _sweep_once(root: Path) -> None:
    """The shared folder's job folders left by commands killed before they could remove them (each
    command removes its own), removed once per process; a folder in use is far younger."""
    with _LOCK:
        if root in _SWEPT:
            return
        _SWEPT.add(root)
    now = time.time()
    for entry in root.glob("cudaforge-*"):
        try:
            if entry.is_dir() and not entry.is_symlink() and now - entry.stat().st_mtime > STALE_S:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


def new_job_dir(prefix: str = "cudaforge-eval-", shared: bool = False) -> Path:
    """A fresh, empty job folder below :func:`jobs_root`."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=jobs_root(shared)))


@atexit.register
def _remove_root() -> None:
    with _LOCK:
        roots, _ROOT[:] = list(_ROOT), []
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)
