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
over, and a notice says so, naming that pid (a :class:`~sessions.errors.StaleLockWarning`, an info
log record, and :attr:`WriterLock.notice`, which the front ends show).

A refusal says who writes: pid, host and since when (:class:`~sessions.errors.SessionLocked`), so
a second app or ``cudaforge run`` on the same session can open it read-only and tell the person
why. Two writers in one process exclude each other too (``flock`` belongs to an open file, not to
a process): two loops of one app on one session would interleave iterations just as two
processes would, so "it is my own pid" is never a reason to let a second writer in. An app that
reopens a session it left hands its lock back first (``tui/writers.py``).

POSIX only (``fcntl``), like the rest of a CUDA toolchain's world.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
import warnings
from dataclasses import dataclass
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


@dataclass(frozen=True)
class LockHolder:
    """What a lock file says about its writer (each part None when missing or unreadable)."""

    pid: int | None
    host: str | None
    since: str | None

    def describe(self) -> str:
        """``pid 123 on host gpu7 since 2026-05-09T14:02:11+0200`` (``this process`` for our own pid)."""
        if self.pid is None:
            who = "another process"
        elif self.pid == os.getpid() and self.host in (None, socket.gethostname()):
            who = f"pid {self.pid} (this process)"
        else:
            who = f"pid {self.pid}"
        if self.host:
            who += f" on host {self.host}"
        if self.since:
            who += f" since {self.since}"
        return who


def parse_lock_text(text: str) -> LockHolder:
    lines = [line.strip() for line in text.splitlines()]
    pid = _first_int(text)
    host = lines[1] if len(lines) > 1 and lines[1] else None
    since = lines[2] if len(lines) > 2 and lines[2] else None
    return LockHolder(pid, host, since)


def read_lock_holder(path: Path) -> LockHolder:
    """Who a lock file names (pid, host, start time); all None when absent or unreadable."""
    try:
        return parse_lock_text(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return LockHolder(None, None, None)


def read_lock_pid(path: Path) -> int | None:
    """The pid recorded in a lock file, or None when absent or unreadable."""
    return read_lock_holder(path).pid


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
                holder = read_lock_holder(self.path)
                raise SessionLocked(
                    f"session {self.label} is being written by {holder.describe()}; only one writer at a time",
                    holder.pid,
                    holder.host,
                    holder.since,
                ) from None
            # The file may have been released (unlinked) between our open and our flock: then we
            # hold a lock on a file nobody else will ever look at, so start again.
            if not self._is_current(fd):
                os.close(fd)
                continue
            break
        previous = parse_lock_text(_read_fd(fd))
        _write_fd(fd, f"{os.getpid()}\n{socket.gethostname()}\n{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        self._fd = fd
        self.notice = None
        stale_pid = previous.pid
        if stale_pid is not None:
            here = previous.host in (None, socket.gethostname())
            if not here:
                state = f"on host {previous.host}"
            elif pid_alive(stale_pid):
                state = "still running but no longer holding it"
            else:
                state = "no longer running"
            since = f", writing since {previous.since}" if previous.since else ""
            self.notice = (
                f"took over a stale writer lock on session {self.label} left by pid {stale_pid} "
                f"({state}{since})"
            )
            logger.info("%s", self.notice)  # shown by the front end; a warning would print it twice
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
