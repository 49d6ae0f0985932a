"""The terminal output of the app outlives the terminal (ARCHITECTURE.md §8, a dropped connection).

Textual writes the screen from one thread (``textual-output``) that takes text from a queue of 30
and writes it to the terminal. When the SSH connection drops, the terminal hangs up and a write to
it fails with EIO. Textual's thread does not catch that: it dies, the queue fills, and the app's own
thread blocks for good on the next screen update — before or after it has seen the SIGHUP. That is
most likely when the writer was blocked on a full terminal (nobody reading) as the connection went,
but one write in the moment between the hang-up and the app's handler is enough: the app then
never exits and keeps its session's lock.

:class:`HangUpProofOutput` stands between that thread and the terminal: the first write that fails
because the terminal is gone marks it so and every later write vanishes, so the thread keeps emptying
its queue and the quit the SIGHUP asks for can run to its end. :func:`hang_up_proof` wraps the platform's driver class.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import IO, Any

#: what a write to a terminal that is gone fails with: hung up (EIO), its reader closed (EPIPE), no device
HUNG_UP = frozenset({errno.EIO, errno.EPIPE, errno.ENXIO})


class HangUpProofOutput:
    """A text stream over the terminal that stops writing, quietly, once a write to it fails because the
    terminal is gone. Any other failure (EAGAIN, where something sharing the terminal made it
    non-blocking) loses that piece of the screen and no more: the writer thread lives on either way."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        self._attempt(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._attempt(self._stream.flush)

    def _attempt(self, action: Callable[..., object], *args: object) -> None:
        if not self.gone:
            try:
                action(*args)
            except OSError as error:
                self.gone = error.errno in HUNG_UP

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()


def hang_up_proof(driver_class: type[Any]) -> type[Any]:
    """``driver_class`` with its terminal output wrapped, where it is Textual's Linux driver (the one
    that owns a real terminal); any other driver (headless, web, Windows) is returned as it is."""
    try:
        from textual.drivers.linux_driver import LinuxDriver
    except ImportError:  # no termios: not a platform with SSH hang-ups to survive
        return driver_class
    if not issubclass(driver_class, LinuxDriver):
        return driver_class

    class HangUpProofDriver(driver_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._file = HangUpProofOutput(self._file)

    HangUpProofDriver.__name__ = f"HangUpProof{driver_class.__name__}"
    return HangUpProofDriver
