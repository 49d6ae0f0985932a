"""One writer per session, and it is this app: the app's live loops, one per session repository.

A live workbench writes its session through a loop that holds the session's writer lock
(``sessions/lock.py``). Two designs were possible for "open a session, Esc back, open it again":

* let the same process take the lock again. Rejected: two loops in one process on one session
  would interleave iterations exactly as two processes would; the lock is per open file, not per
  process, on purpose;
* hand the lock back when the workbench is left. Chosen: the lock then means "a loop is writing
  this session now", so a ``cudaforge run --session`` in another terminal is not refused because an
  app merely browses, and reopening in this app takes the lock afresh.

A workbench left while its loop is still finishing a stage (a build cannot be cut short) asks the
loop to pause after it and closes the loop when it is done. Reopening the session before then
adopts that same loop — the one writer — instead of being told that pid N (this app) writes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tui.live import LoopAdapter


class Writers:
    """The app's loop adapters by session path (see the module docstring)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._adapters: dict[Path, LoopAdapter] = {}

    def add(self, path: Path, adapter: LoopAdapter) -> None:
        with self._mutex:
            self._adapters[Path(path)] = adapter

    def adopt(self, path: Path) -> LoopAdapter | None:
        """This app's loop of the session at ``path`` when it is still open (finishing a stage)."""
        with self._mutex:
            adapter = self._adapters.get(Path(path))
        if adapter is None or not adapter.keep():
            return None
        return adapter

    def leave(self, path: Path, adapter: LoopAdapter, then: Callable[[], None] | None = None) -> None:
        """The workbench of ``path`` is gone: pause its loop after the stage in flight, then close it
        (and call ``then``, e.g. to close the repository the workbench opened)."""
        adapter.retarget(None)
        pause = getattr(adapter.loop, "pause", None)
        if adapter.busy and pause is not None:
            pause()

        def released() -> None:
            with self._mutex:
                if self._adapters.get(Path(path)) is adapter:
                    del self._adapters[Path(path)]
            if then is not None:
                then()

        adapter.release_when_idle(released)

    def adapters(self) -> list[LoopAdapter]:
        with self._mutex:
            return list(self._adapters.values())

    def busy(self) -> list[LoopAdapter]:
        """The adapters with a call in flight."""
        return [a for a in self.adapters() if a.busy]
