"""Ctrl-C, a hang-up and SIGTERM as ordinary events of a headless run (ARCHITECTURE §2).

The first of them asks the loop to stop (:meth:`engine.loop.machine.Loop.stop`): an LLM call in
flight is cancelled (it is asked again on resume), an evaluation in flight finishes and is
committed. A second Ctrl-C (or SIGTERM) leaves at once; the journal keeps the interrupted stage,
which the next run redoes. A repeated hang-up changes nothing (a login shell forwards SIGHUP and the
kernel sends another when it exits).

Signals are caught with handlers rather than as ``KeyboardInterrupt``: an exception raised at an
arbitrary line of the main thread is how an interrupted run used to end in a traceback. The
handler only sets flags and calls ``stop`` (which sets two events); printing is left to the main
thread, except for the "leaving now" line, written with ``os.write`` just before ``os._exit``.

After a hang-up the terminal is gone: writing to it fails with EIO and reading returns EOF, so
:func:`detach_terminal` points the standard descriptors at ``/dev/null`` and the run finishes
quietly.

The exit code is ``128 + signal`` (130 Ctrl-C, 129 hang-up, 143 SIGTERM), as shells report it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from engine import procgroups

HANDLED = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)
#: a second one of these leaves at once; a second hang-up does not (see the module docstring)
LEAVE_NOW = (signal.SIGINT, signal.SIGTERM)

def exit_code(signum: int) -> int:
    return 128 + int(signum)


def detach_terminal() -> None:
    """Point stdin, stdout and stderr at /dev/null: reads see EOF at once, writes vanish.

    Not a pipe nobody writes to for stdin: a reader that the terminal's EOF woke would then block
    in ``read`` for good (Textual's input thread did, and the app could not exit).
    """
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)


class Interrupts:
    """Signal handlers for one headless run (install in the main thread; see the module docstring)."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received
        self.requested = threading.Event()
        self.hung_up = False
        #: while the main thread waits at the terminal's prompt, the first Ctrl-C ends the prompt
        self.raise_in_main = False
        self._stop: Callable[[], None] | None = None
        self._leaving: Callable[[], str] = lambda: ""
        self._stopping: Callable[[], str] = lambda: ""
        #: what the first signal stopped, in words, read when it came (the stage may be over by now)
        self.stopping_text = ""
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum) if self.signum is not None else 0

    def install(self) -> Interrupts:
        for signum in HANDLED:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signum, previous)
        self._previous.clear()

    def attach(
        self, stop: Callable[[], None], stopping: Callable[[], str], leaving: Callable[[], str]
    ) -> None:
        """What a signal stops, the line said on the first signal and the line said when leaving at
        once; a signal already received (while the run was being set up) stops it now."""
        self._stop, self._stopping, self._leaving = stop, stopping, leaving
        if self.requested.is_set():
            self.stopping_text = stopping()
            stop()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP and not self.hung_up:
            self.hung_up = True
            detach_terminal()
        if self.signum is None:
            self.signum = signum
            self.stopping_text = self._stopping()
            self.requested.set()
            if self._stop is not None:
                self._stop()
            if self.raise_in_main:
                raise KeyboardInterrupt
            return
        if signum in LEAVE_NOW:
            with contextlib.suppress(OSError):
                os.write(2, self._leaving().encode("utf-8", "replace"))
            procgroups.kill_all()  # builds and workers in groups of their own would outlive os._exit
            os._exit(exit_code(signum))
