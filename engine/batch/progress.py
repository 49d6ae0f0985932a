"""What a bench shows while it runs: plain lines for logs, or a live bar over SSH.

Both views are fed the same calls by the runner (``started`` / ``line`` / ``finished``) and keep
the same state: per running task its stage, round and best speedup so far, parsed from the
``cudaforge run --headless`` lines of its child process (and ``cudaforge explore``'s, with ``--explore``).

* :class:`LineProgress` prints every line as ``[task] …`` and ``[k/N done] …`` when a task ends,
  which is what a log file or CI wants; every ``HEARTBEAT_S`` it also prints each running task's stage
  and how long it has run (``[task] still build · 1m30s``), so a pair that takes minutes is never silent.
* :class:`LiveProgress` (a terminal) keeps a live block at the bottom — an overall progress bar
  and one line per running task — and prints only the start, result and end lines above it. It is
  drawn with ``rich`` (Textual's own renderer, so no new dependency); it redraws a few times a
  second, does not animate, and leaves the final state on screen.

Every child line also goes, unfiltered, to ``OUT/logs/<task>.log`` (the runner does that).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

HEARTBEAT_S = 15.0  # how often the lines view says what each running task is doing


def minutes_seconds(seconds: float) -> str:
    """``2m05s``: how long something has run, as every progress line says it."""
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s"

_STAGE = re.compile(r"^iter (\d+) · (\w+)")
_RESULT = re.compile(r"^iter (\d+) ·\s+→ (\S+) · (?:([0-9.]+)x)?")
# ``cudaforge explore``'s lines (``bench --explore``): a branch's round starts, and its result
_BRANCH_ROUND = re.compile(r"^(explore/\d+-\d+): round \d+ \(iteration (\d+)\)")
_BRANCH_RESULT = re.compile(r"^explore/\d+-\d+: iteration (\d+) (\S+) (?:([0-9.]+)x)?")


@dataclass
class TaskState:
    """A running task as the progress view shows it."""

    name: str
    where: str = ""
    stage: str = "starting"
    round: int | None = None
    best: float | None = None
    started_at: float = field(default_factory=time.monotonic)

    def elapsed(self) -> str:
        return minutes_seconds(time.monotonic() - self.started_at)

    def update(self, line: str) -> bool:
        """Take one child line into account; True when it is a result line (worth printing live)."""
        result = _RESULT.match(line) or _BRANCH_RESULT.match(line)
        if result:
            self.round = int(result.group(1))
            if result.group(2) == "correct" and result.group(3):
                speedup = float(result.group(3))
                self.best = speedup if self.best is None else max(self.best, speedup)
            return True
        stage = _STAGE.match(line)
        branch = _BRANCH_ROUND.match(line)
        if stage:
            self.round, self.stage = int(stage.group(1)), stage.group(2)
        elif branch:
            self.round, self.stage = int(branch.group(2)), branch.group(1)
        elif line.startswith("compile baseline"):
            self.stage = "compile-baseline"
        return False

    def describe(self, rounds: int | None) -> str:
        round_text = "-" if self.round is None else str(self.round)
        if rounds is not None:
            round_text += f"/{rounds}"
        best = "-" if self.best is None else f"{self.best:.2f}x"
        return f"round {round_text} · {self.stage} · best {best}"


class LineProgress:
    """One printed line per event (logs, CI, anything that is not a terminal)."""

    def __init__(
        self, total: int, out: TextIO, rounds: int | None = None, heartbeat_s: float = HEARTBEAT_S
    ) -> None:
        self.total = total
        self.finished_count = 0
        self.out = out
        self.rounds = rounds
        self.lock = threading.Lock()
        self.running: dict[str, TaskState] = {}
        self.beats = 0  # heartbeats printed (tests wait on it, not on a clock)
        self._stop = threading.Event()
        if heartbeat_s > 0:
            threading.Thread(target=self._heartbeat, args=(heartbeat_s,), name="progress-heartbeat", daemon=True).start()

    def _heartbeat(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.beat()

    def beat(self) -> None:
        """One line per running task: its stage and how long it has run."""
        with self.lock:
            for state in list(self.running.values()):
                self._print(f"[{state.name}] still {state.describe(self.rounds)} · {state.elapsed()}")
            self.beats += 1

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def say(self, text: str) -> None:
        with self.lock:
            self._print(text)

    def skipped(self, name: str, why: str) -> None:
        with self.lock:
            self.finished_count += 1
            self._print(f"[{self.finished_count}/{self.total} done] {name}: {why}")

    def started(self, name: str, where: str, resumed: bool) -> None:
        with self.lock:
            self.running[name] = TaskState(name, where)
            self._print(
                f"[{name}] {'continuing' if resumed else 'starting'}{' on ' + where if where else ''}"
            )

    def line(self, name: str, text: str) -> None:
        with self.lock:
            state = self.running.setdefault(name, TaskState(name))
            state.update(text)
            suffix = ""
            if state.best is not None and _STAGE.match(text):
                suffix = f"  (best {state.best:.2f}x)"
            self._print(f"[{name}] {text}{suffix}")

    def finished(self, name: str, summary: str) -> None:
        with self.lock:
            self.running.pop(name, None)
            self.finished_count += 1
            self._print(f"[{self.finished_count}/{self.total} done] {name}: {summary}")

    def close(self) -> None:
        self._stop.set()


class LiveProgress(LineProgress):
    """A live bar plus one line per running task, redrawn in place (a terminal)."""

    def __init__(self, total: int, out: TextIO, rounds: int | None = None, width: int | None = None) -> None:
        super().__init__(total, out, rounds, heartbeat_s=0)  # the live rows show each task's time instead
        from rich.console import Console
        from rich.live import Live

        self.started_at = time.monotonic()
        self.console = Console(file=out, force_terminal=True, width=width, highlight=False)
        self.live = Live(
            get_renderable=self.render, console=self.console, refresh_per_second=2, transient=False
        )
        self.live.start()

    def _print(self, text: str) -> None:
        from rich.markup import escape

        self.console.print(escape(text), soft_wrap=True)

    def line(self, name: str, text: str) -> None:
        with self.lock:
            state = self.running.setdefault(name, TaskState(name))
            if state.update(text) or text.lstrip().startswith(("error", "loop ")) or "! " in text:
                self._print(f"[{name}] {text}")

    def render(self):  # -> rich renderable
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        with self.lock:
            done, running = self.finished_count, list(self.running.values())
        elapsed = time.monotonic() - self.started_at
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True)
        grid.add_row(
            ProgressBar(total=max(1, self.total), completed=done, width=30, animation_time=0.0),
            f"{done}/{self.total} done · {len(running)} running · {minutes_seconds(elapsed)}",
        )
        for state in running:
            where = f" ({state.where})" if state.where else ""
            grid.add_row(f"  {state.name}{where}", f"{state.describe(self.rounds)} · {state.elapsed()}")
        return grid

    def close(self) -> None:
        super().close()
        self.live.refresh()
        self.live.stop()


def make_progress(kind: str, total: int, out: TextIO, rounds: int | None = None) -> LineProgress:
    """``kind`` is ``bar``, ``lines`` or ``auto`` (the bar when ``out`` is a terminal)."""
    if kind == "auto":
        kind = "bar" if getattr(out, "isatty", lambda: False)() else "lines"
    return LiveProgress(total, out, rounds) if kind == "bar" else LineProgress(total, out, rounds)
