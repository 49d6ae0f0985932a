"""The one-writer-at-a-time lock of a session repository.

Two loops writing the same session would interleave their iterations on one branch, so every
write takes a lock first; readers (the TUI's browser, ``git log``, ``cudaforge sessions``) never
do, because commits are immutable and a branch tip moves atomically.

The lock is a file holding the writer's pid, hostname and start time, *and* an exclusive
``flock`` on that file. The ``flock`` is what makes it correct: the kernel drops it when the
writer dies, even by ``kill -9``, so "is the lock stale?" never depends on guessing from a pid
that may have been reused. The pid in the file is what the user is told: who holds the lock now,
or whose crashed run left it behind. A clean release deletes the file, so finding a file with a
pid in it while the ``flock`` is free means the previous writer died; the lock is then taken
over, and a notice says so (a :class:`~sessions.errors.StaleLockWarning` plus a log record, and
:attr:`WriterLock.notice` for a UI to show).

POSIX only (``fcntl``), like the rest of a CUDA toolchain's world.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
import warnings
from pathlib import Path

from sessions.errors import SessionLocked, StaleLockWarning

logger = logging.getLogger(__name__)

LOCK_FILENAME = "cudaforge.lock"


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (it may belong to another user)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_lock_pid(path: Path) -> int | None:
    """The pid recorded in a lock file, or None when absent or unreadable."""
    try:
        first_line = path.read_text(encoding="utf-8").splitlines()[0]
        return int(first_line.strip())
    except (OSError, IndexError, ValueError):
        return None


class WriterLock:
    """An exclusive writer lock on one session (see the module docstring)."""

    def __init__(self, path: Path, label: str | None = None) -> None:
        self.path = Path(path)
        self.label = label or str(self.path.parent)
        self.notice: str | None = None
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> str | None:
        """Take the lock or raise :class:`SessionLocked`; return a notice when a stale lock was taken over."""
        if self._fd is not None:
            return None
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                pid = read_lock_pid(self.path)
                who = f"pid {pid}" if pid is not None else "another process"
                raise SessionLocked(
                    f"session {self.label} is being written by {who}; only one writer at a time",
                    pid,
                ) from None
            # The file may have been released (unlinked) between our open and our flock: then we
            # hold a lock on a file nobody else will ever look at, so start again.
            if not self._is_current(fd):
                os.close(fd)
                continue
            break
        previous = _read_fd(fd)
        _write_fd(fd, f"{os.getpid()}\n{socket.gethostname()}\n{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        self._fd = fd
        self.notice = None
        stale_pid = _first_int(previous)
        if stale_pid is not None:
            state = "still running but no longer holding it" if pid_alive(stale_pid) else "no longer running"
            self.notice = (
                f"took over a stale writer lock on session {self.label} left by pid {stale_pid} ({state})"
            )
            logger.warning("%s", self.notice)
            warnings.warn(StaleLockWarning(self.notice), stacklevel=3)
        return self.notice

    def release(self) -> None:
        """Give the lock up; deleting the file first tells the next writer this was a clean exit."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self._is_current(fd):
                self.path.unlink()
        except OSError:
            pass
        finally:
            os.close(fd)

    def _is_current(self, fd: int) -> bool:
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_fd(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _write_fd(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, text.encode("utf-8"))


def _first_int(text: str) -> int | None:
    lines = text.splitlines()
    if not lines:
        return None
    try:
        return int(lines[0].strip())
    except ValueError:
        return None
