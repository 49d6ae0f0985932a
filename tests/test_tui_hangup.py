"""A dropped connection while the app's output is stuck on the terminal: it still quits (129).

Textual writes the screen from a thread fed by a queue of 30. When the terminal hangs up, a write to
it fails with EIO; Textual's thread died of that, the queue filled, and the app blocked for good on
its next screen update, so a hang-up at the wrong moment left a ``cudaforge open`` running forever
with its session locked (``tui/terminal_output.py``). The surest wrong moment, made here on purpose:
the connection stalls first (nothing reads the terminal, as over a frozen SSH link), the app's writes
block on the full terminal until its queue is full too, then the connection drops.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.conftest import until
from tests.interrupt_harness import Project, Pty


def system_calls(pid: int) -> dict[str, list[str]] | None:
    """What each thread of ``pid`` waits in: ``/proc/PID/task/TID/syscall`` (the call's number, then its
    arguments; ``running`` for a thread on a CPU), by thread id; None where this kernel hides them."""
    calls = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            calls[task.name] = (task / "syscall").read_text().split()
        except PermissionError:
            return None
        except OSError:  # the thread ended
            continue
    return calls


def stuck_on_the_terminal(pid: int) -> bool:
    """Textual's writer thread waits in a call on fd 2 (where it writes the screen) and the app's own
    thread waits on a lock (a call whose first argument is an address: the full queue's condition),
    not on its event loop's descriptor: the app can do nothing until the terminal takes its output."""
    calls = system_calls(pid) or {}
    main = calls.pop(str(pid), [])
    writer_waits = any(len(f) > 1 and f[0].isdigit() and f[1] == "0x2" for f in calls.values())
    main_waits_on_a_lock = len(main) > 1 and main[0].isdigit() and int(main[1], 16) > 0xFFFF
    return writer_waits and main_waits_on_a_lock


def test_a_hang_up_while_the_screen_is_stuck_on_a_stalled_terminal_still_quits_with_129(
    tmp_path: Path,
) -> None:
    project = Project(tmp_path, tmp_path / "cache", 1)
    pty = Pty(project, [])  # the session browser: no session, so nothing but the screen is at stake
    try:
        assert until(lambda: len(pty.output) > 0), "the app never drew"
        pty.stop_reading()
        if system_calls(pty.proc.pid) is None:
            pytest.skip("this kernel does not show a thread's system call in /proc")
        sizes = iter([(40, 120), (30, 100)] * 2000)

        def redrawn_until_blocked() -> bool:
            pty.resize(*next(sizes))  # each size is a full redraw nobody reads
            return stuck_on_the_terminal(pty.proc.pid) and stuck_on_the_terminal(pty.proc.pid)

        assert until(redrawn_until_blocked, poll_s=0.05), "the app's writes never waited on the terminal"
        pty.hang_up()
        assert pty.finish(seconds=60) == 129
    finally:
        if pty.alive():
            pty.proc.kill()


def test_a_driver_without_a_terminal_of_its_own_is_left_as_it_is() -> None:
    from textual.drivers.headless_driver import HeadlessDriver
    from textual.drivers.linux_driver import LinuxDriver

    from tui.terminal_output import hang_up_proof

    assert hang_up_proof(HeadlessDriver) is HeadlessDriver  # tests, and the web driver of `serve`
    assert issubclass(hang_up_proof(LinuxDriver), LinuxDriver)


def test_the_output_is_gone_only_when_the_terminal_is() -> None:
    """A real hung-up terminal (its other end closed: EIO) ends the output for good; a real full
    non-blocking pipe (EAGAIN) loses that write and no more."""
    import fcntl
    import os

    from tui.terminal_output import HangUpProofOutput

    master, slave = os.openpty()
    os.close(master)  # the connection dropped
    terminal = open(slave, "w", encoding="utf-8")  # noqa: SIM115 - closed below, where closing fails too
    output = HangUpProofOutput(terminal)
    output.write("x" * 10)
    output.flush()
    assert output.gone
    output.write("more")  # nothing raises
    output.flush()
    with contextlib.suppress(OSError):  # its buffer still holds what never reached the terminal
        terminal.close()

    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETFL, fcntl.fcntl(write, fcntl.F_GETFL) | os.O_NONBLOCK)
    with open(write, "w", encoding="utf-8") as pipe, open(read, "rb", buffering=0) as reader:
        output = HangUpProofOutput(pipe)
        for _ in range(256):  # far past the pipe's capacity: the writes fail with EAGAIN
            output.write("y" * 4096)
        assert not output.gone
        for _ in range(4):  # and so do the flushes
            output.flush()
        assert not output.gone
        fcntl.fcntl(read, fcntl.F_SETFL, fcntl.fcntl(read, fcntl.F_GETFL) | os.O_NONBLOCK)
        with contextlib.suppress(BlockingIOError):
            while reader.read(1 << 16):
                pass
        output.write("after\n")
        output.flush()
        assert reader.read(1 << 16).endswith(b"after\n")
