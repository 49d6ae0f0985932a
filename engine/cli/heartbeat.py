"""Long work says what it is doing: a line per running branch every ``HEARTBEAT_S`` (ARCHITECTURE.md §8).

``cudaforge explore`` prints a line when a branch's round starts and ends; between them a branch may build,
check and time for minutes. This keeps, from the loop's own events, each branch's current stage and when
it began, and says ``[explore/0-1] still evaluate · 2m15s`` for each, so a log never goes silent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from engine.batch.progress import HEARTBEAT_S, minutes_seconds
from engine.events import Event, LoopFinished, StageStarted


class Heartbeat:
    """Feed it the loop events (``on_event``); it says each branch's stage every ``every_s`` until ``stop``."""

    def __init__(self, say: Callable[[str], None], every_s: float = HEARTBEAT_S) -> None:
        self.say = say
        self.beats = 0  # heartbeats made (tests wait on it, not on a clock)
        self._stages: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), name="explore-heartbeat", daemon=True)
        self._thread.start()

    def on_event(self, event: Event) -> None:
        if isinstance(event, StageStarted) and event.branch:
            with self._lock:
                self._stages[event.branch] = (event.stage, time.monotonic())
        elif isinstance(event, LoopFinished) and event.branch:
            with self._lock:
                self._stages.pop(event.branch, None)

    def beat(self) -> None:
        with self._lock:
            now = time.monotonic()
            lines = []
            for branch, (stage, since) in sorted(self._stages.items()):
                lines.append(f"[{branch}] still {stage} · {minutes_seconds(now - since)}")
            self.beats += 1
        for line in lines:
            self.say(line)

    def stop(self) -> None:
        self._stop.set()

    def _run(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.beat()
