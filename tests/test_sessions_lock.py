"""The writer lock: one live writer at a time, stale locks of dead writers taken over with a notice."""

from __future__ import annotations

import os
import signal
import socket
import warnings
from pathlib import Path

import pytest

from sessions.errors import SessionLocked, StaleLockWarning
from sessions.lock import LOCK_FILENAME, WriterLock, pid_alive, read_lock_pid
from sessions.repo import SessionRepo
from tests.conftest_sessions import TASK_SOURCE, record_kwargs, spawn_python, wait_for_line

HOLDER = """
import sys, time
from sessions.repo import SessionRepo
repo = SessionRepo.open(sys.argv[1])
repo.acquire_lock()
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def session_path(tmp_path: Path) -> Path:
    with SessionRepo.create(tmp_path, task_source=TASK_SOURCE, task_name="add", name="s") as repo:
        repo.record_iteration(**record_kwargs(0))
        return repo.path


def test_lock_file_holds_the_writer_pid_and_goes_away_on_close(session_path: Path) -> None:
    repo = SessionRepo.open(session_path)
    assert not (session_path / LOCK_FILENAME).exists()  # opening to read takes no lock
    repo.record_iteration(**record_kwargs(1))  # the first write takes it
    assert read_lock_pid(session_path / LOCK_FILENAME) == os.getpid()
    repo.close()
    assert not (session_path / LOCK_FILENAME).exists()


def test_second_live_writer_is_refused_and_readers_still_read(session_path: Path) -> None:
    holder = spawn_python(HOLDER, str(session_path))
    try:
        wait_for_line(holder, "locked")
        with SessionRepo.open(session_path) as repo:
            with pytest.raises(SessionLocked) as refused:
                repo.record_iteration(**record_kwargs(1))
            assert refused.value.pid == holder.pid
            assert refused.value.host == socket.gethostname() and refused.value.since
            # who writes, in words a person can act on: pid, host, since when
            assert f"being written by pid {holder.pid} on host {socket.gethostname()} since 20" in str(
                refused.value
            )
            with pytest.raises(SessionLocked):
                repo.branch_from(0)
            # readers never need the lock
            assert [it.number for it in repo.history()] == [0]
            assert repo.read_file(0, "task.py") == TASK_SOURCE
        assert read_lock_pid(session_path / LOCK_FILENAME) == holder.pid  # our failed attempt left it alone
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_lock_of_a_killed_writer_is_taken_over_with_a_notice(session_path: Path) -> None:
    holder = spawn_python(HOLDER, str(session_path))
    wait_for_line(holder, "locked")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert read_lock_pid(session_path / LOCK_FILENAME) == holder.pid  # the dead writer's lock is still there

    with SessionRepo.open(session_path) as repo:
        with pytest.warns(StaleLockWarning, match=f"pid {holder.pid}"):
            assert repo.record_iteration(**record_kwargs(1)) == 1
        assert repo.lock_notice is not None and "no longer running" in repo.lock_notice
        assert read_lock_pid(session_path / LOCK_FILENAME) == os.getpid()

    # after a clean release there is nothing stale to report
    with SessionRepo.open(session_path) as repo, warnings.catch_warnings():
        warnings.simplefilter("error")
        repo.acquire_lock()
        assert repo.lock_notice is None


def test_lock_file_naming_a_dead_pid_is_stale(tmp_path: Path) -> None:
    dead = spawn_python("print('bye')")
    dead.communicate(timeout=30)
    assert not pid_alive(dead.pid)
    path = tmp_path / LOCK_FILENAME
    path.write_text(f"{dead.pid}\nsomehost\n2020-01-01T00:00:00\n", encoding="utf-8")
    lock = WriterLock(path, label="demo")
    with pytest.warns(StaleLockWarning) as caught:
        notice = lock.acquire()
    assert notice is not None and f"pid {dead.pid}" in notice and "demo" in notice
    assert str(caught[0].message) == notice
    assert read_lock_pid(path) == os.getpid()
    lock.release()
    assert not path.exists()


def test_two_writers_in_one_process_also_exclude_each_other(session_path: Path) -> None:
    first = SessionRepo.open(session_path)
    second = SessionRepo.open(session_path)
    try:
        first.acquire_lock()
        with pytest.raises(SessionLocked, match=rf"pid {os.getpid()} \(this process\)"):
            second.acquire_lock()
        first.release_lock()
        second.acquire_lock()  # free again once released
    finally:
        first.close()
        second.close()
