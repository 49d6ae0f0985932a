"""The thin seam between the workbench and a running loop.

The loop (``engine/loop``) is any object with ``run()``, ``step()``, ``pause()``,
``approve(suggestion)``, ``reject(note)``, ``edit_kernel(source)`` and ``branch_from(iteration)``
that reports through an ``on_event(event)`` callback with ``engine.events`` dataclasses. The
adapter runs every call in a Textual thread worker (so keys keep working while a kernel builds)
and turns each event into an :class:`~tui.messages.EngineEvent` posted to the screen. When a
blocking call returns, it posts :class:`~tui.messages.LoopReturned` with what the call returned
(``awaiting``, ``finished`` … or None after one ``step``), so the status line can say that the
loop now waits for the human and for what (ARCHITECTURE.md §8).

``LoopFactory`` is the hook a live session uses to get a loop: ``factory(repo, on_event)``.
:func:`default_loop_factory` is ``engine.loop.create_loop`` (imported when first called, so the
workbench starts without the engine); tests hand the workbench their own factory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from textual.dom import DOMNode

from engine.events import Event, LoopError, LoopFinished, StageStarted
from tui.messages import EngineEvent, LoopCommand, LoopReturned

LOOP_METHODS = ("run", "step", "pause", "approve", "reject", "edit_kernel", "branch_from")
BLOCKING_METHODS = ("run", "step", "edit_kernel", "approve", "reject")


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
    """``engine.loop.create_loop``: the loop with the settings the TUI was started with."""
    from engine.loop import create_loop

    return create_loop(repo, on_event=on_event, config=config)


class LoopAdapter:
    """Calls loop methods off the UI thread and forwards its events as messages.

    ``busy`` is True from the moment a blocking call starts until it returns or the loop reports
    ``LoopFinished``/``LoopError``; the quit confirmation and the progress indicator read it.
    """

    def __init__(self, target: DOMNode) -> None:
        self.target = target
        self.loop: LoopLike | None = None
        self.busy = False
        self.stage = ""

    def on_event(self, event: Event) -> None:
        """The callback handed to the loop; safe to call from any thread."""
        if isinstance(event, StageStarted):
            self.stage = event.stage
        elif isinstance(event, (LoopFinished, LoopError)):
            self.stage = ""
        self.target.post_message(EngineEvent(event))

    def attach(self, loop: LoopLike) -> None:
        self.loop = loop

    def call(self, method: str, *args: Any, then: str | None = None) -> bool:
        """Start ``loop.method(*args)`` in a thread worker; False when there is no loop to call.

        ``then`` names a loop method to call next in the same worker (e.g. ``run`` after ``approve``):
        the loop's ``run`` returns when it needs a decision, so a decision must restart it, in order.
        """
        if method not in LOOP_METHODS:
            raise ValueError(f"not a loop method: {method}")
        if self.loop is None:
            return False
        self.target.app.post_message(LoopCommand(method, args[0] if args else None))
        function = getattr(self.loop, method)
        follow = getattr(self.loop, then) if then else None
        blocking = method in BLOCKING_METHODS or then in BLOCKING_METHODS

        if blocking:  # at once, on the UI thread: a second key press must not start a second call
            self.busy = True

        def work() -> None:
            outcome: Any = None
            try:
                outcome = function(*args)
                if follow is not None:
                    outcome = follow()
            except Exception as error:  # report, never kill the UI
                outcome = "error"
                self.on_event(LoopError(stage=method, message=f"{type(error).__name__}: {error}"))
            finally:
                if blocking:
                    self.busy = False
                    self.target.post_message(LoopReturned(method, outcome if isinstance(outcome, str) else None))

        self.target.run_worker(work, thread=True, group="engine", name=f"loop.{method}", exit_on_error=False)
        return True
