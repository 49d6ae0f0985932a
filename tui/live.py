"""The thin seam between the workbench and a running loop.

The loop (``engine/loop``) is any object with ``run()``, ``step()``, ``pause()``,
``approve(suggestion)``, ``reject(note)``, ``edit_kernel(source)`` and ``branch_from(iteration)``
(and, for the real one, ``stop()`` and ``close()``) that reports through an ``on_event(event)``
callback with ``engine.events`` dataclasses. The adapter turns each event into an
:class:`~tui.messages.EngineEvent` posted to the screen it serves. When a queued call returns, it
posts :class:`~tui.messages.LoopReturned` with what the call returned (``awaiting``, ``finished`` …
or None after one ``step``), so the status line can say that the loop now waits for the human and
for what (ARCHITECTURE.md §8).

Calls that drive the loop run off the UI thread, one at a time, in the adapter's own daemon thread
(so keys keep working while a kernel builds):

* ``step``/``run`` while a call runs are refused with a notice saying what runs. Two quick ``s``
  presses used to start two threads in ``Loop.step()`` at once; they evaluated one kernel twice and
  left a round that could never be committed (issue #23). The loop refuses a second driver too.
* ``approve``/``reject`` queue behind the call in flight (the decision is the person's, in order).
* ``pause``, ``stop``, ``edit_kernel`` and ``branch_from`` are quick and thread-safe on the loop: they
  run at once, so a pause reaches the loop while a stage runs.

Not Textual's thread workers: those run in asyncio's default executor, whose threads the app waits
for when it exits, so quitting during a build left a blank terminal until the build was over, and
"leave now" was impossible. The daemon thread lets the app decide (``tui/app.py``: quit waits and
says for what; a second quit leaves at once).

``LoopFactory`` is the hook a live session uses to get a loop: ``factory(repo, on_event)``.
:func:`default_loop_factory` is ``engine.loop.factory.create_loop`` (imported when first called, so the
workbench starts without the engine); tests hand the workbench their own factory.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from textual.dom import DOMNode

from engine.activity import Activity
from engine.events import Event, LoopError, LoopFinished, LoopNotice, StageStarted
from tui.messages import EngineEvent, LoopCommand, LoopReturned

LOOP_METHODS = ("run", "step", "pause", "stop", "approve", "reject", "edit_kernel", "branch_from")
DRIVING_METHODS = ("run", "step")  # refused while a call runs
QUEUED_METHODS = ("run", "step", "approve", "reject")  # run in the adapter's thread, in order
BLOCKING_METHODS = QUEUED_METHODS  # kept for callers that read the old name
# Answered with LoopReturned like the queued ones: what the loop waits for changed (a human kernel to evaluate)
ANSWERED_METHODS = ("edit_kernel",)


class LoopLike(Protocol):
    def run(self) -> Any: ...
    def set_approval_policy(self, name: str) -> Any: ...
    def step(self) -> Any: ...
    def pause(self) -> Any: ...
    def approve(self, suggestion: Any) -> Any: ...
    def reject(self, note: str) -> Any: ...
    def edit_kernel(self, source: str) -> Any: ...
    def branch_from(self, iteration: int) -> Any: ...
    def add_rounds(self, more: int) -> int: ...


LoopFactory = Callable[[Any, Callable[[Event], None]], "LoopLike | None"]


def default_loop_factory(repo: Any, on_event: Callable[[Event], None], config: Any = None) -> LoopLike | None:
    """``engine.loop.factory.create_loop``: the loop with the settings the TUI was started with."""
    from engine.loop.factory import create_loop

    return create_loop(repo, on_event=on_event, config=config)


class LoopAdapter:
    """Calls loop methods off the UI thread and forwards its events as messages (module docstring).

    ``busy`` is True from the moment a queued call is accepted until the last one returns; the quit
    guard, the refusal of a second ``step`` and the progress indicator read it. ``activity`` is the
    stage in flight, from the loop's own ``StageStarted`` events.
    """

    def __init__(self, target: DOMNode | None) -> None:
        self.target = target
        self.loop: LoopLike | None = None
        self.busy = False
        self.stage = ""
        self.activity: Activity | None = None
        self.closed = False
        self._mutex = threading.Lock()
        self._work: queue.Queue[Callable[[], None]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._outstanding = 0
        self._release: Callable[[], None] | None = None  # set: close the loop once idle
        self._stopped = False  # stop() was asked for: nothing queued or chained runs after it

    # ------------------------------------------------------------------ events

    def on_event(self, event: Event) -> None:
        """The callback handed to the loop; safe to call from any thread."""
        if isinstance(event, StageStarted):
            self.stage = event.stage
            self.activity = Activity(event.stage, event.round, event.detail)
        elif isinstance(event, (LoopFinished, LoopError)):
            self.stage = ""
            self.activity = None
        target = self.target
        if target is not None:
            target.post_message(EngineEvent(event))

    def attach(self, loop: LoopLike) -> None:
        self.loop = loop

    def retarget(self, target: DOMNode | None) -> None:
        """Send events to another screen (None: drop them; the screen that showed them is gone)."""
        self.target = target

    # ------------------------------------------------------------------ calls

    def call(self, method: str, *args: Any, then: str | None = None) -> bool:
        """Call ``loop.method(*args)`` as the module docstring says; False when not done (no loop,
        or a step/run refused because a call runs: a :class:`~engine.events.LoopNotice` says so).

        ``then`` names a loop method to call next in the same turn (e.g. ``run`` after ``approve``):
        the loop's ``run`` returns when it needs a decision, so a decision must restart it, in order.
        """
        if method not in LOOP_METHODS:
            raise ValueError(f"not a loop method: {method}")
        if self.loop is None or self.closed:
            return False
        if method in DRIVING_METHODS and self.busy:
            running = f" ({self.activity.describe()})" if self.activity is not None else ""
            self.on_event(
                LoopNotice(message=f"{method}: a stage is already running{running}; wait for it, or x to pause")
            )
            return False
        target = self.target
        if target is not None:
            target.app.post_message(LoopCommand(method, args[0] if args else None))
        function = getattr(self.loop, method)
        follow = getattr(self.loop, then) if then else None
        if method in QUEUED_METHODS:
            self._stopped = False  # a new request: a stop asked for earlier is spent

        def work() -> Any:
            outcome: Any = None
            try:
                outcome = function(*args)
                if follow is not None and not self._stopped:  # no run after a decision once stopped
                    outcome = follow()
            except Exception as error:  # report, never kill the UI
                outcome = "error"
                self.on_event(LoopError(stage=method, message=f"{type(error).__name__}: {error}"))
            return LoopReturned(method, outcome if isinstance(outcome, str) else None)

        if method not in QUEUED_METHODS and then not in QUEUED_METHODS:
            returned = work()  # quick and thread-safe on the loop: now, even while a stage runs
            if method in ANSWERED_METHODS and target is not None:
                target.post_message(returned)
            return True
        with self._mutex:
            self._outstanding += 1
            self.busy = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="cudaforge-loop", daemon=True)
                self._thread.start()
        self._work.put(work)
        return True

    def _serve(self) -> None:
        while True:
            work = self._work.get()
            returned = None
            try:
                returned = work()
            finally:
                with self._mutex:
                    self._outstanding -= 1
                    self.busy = self._outstanding > 0
                    idle = not self.busy
                target = self.target
                if returned is not None and target is not None:  # after busy is updated: the status line reads it
                    target.post_message(returned)
                if idle:
                    self._close_if_released()

    def stop(self) -> None:
        """Stop the loop at its next boundary (an LLM call in flight is cancelled) and drop what was
        queued behind the call in flight, so nothing starts after it."""
        self._stopped = True
        while True:
            try:
                self._work.get_nowait()
            except queue.Empty:
                break
            with self._mutex:
                self._outstanding -= 1
                self.busy = self._outstanding > 0
        stop = getattr(self.loop, "stop", None) or getattr(self.loop, "pause", None)
        if stop is not None:
            stop()

    # ------------------------------------------------------------------ the writer lock

    def release_when_idle(self, released: Callable[[], None] = lambda: None) -> None:
        """Close the loop (its writer lock goes back) once no call runs; now if none does."""
        with self._mutex:
            self._release = released
            idle = not self.busy
        if idle:
            self._close_if_released()

    def keep(self) -> bool:
        """Cancel a release asked for earlier; False when the loop was already closed."""
        with self._mutex:
            if self.closed:
                return False
            self._release = None
            return True

    def _close_if_released(self) -> None:
        with self._mutex:
            released, self._release = self._release, None
            if released is None or self.closed:
                return
            self.closed = True
        close = getattr(self.loop, "close", None)
        try:
            if close is not None:
                close()
        finally:
            released()
