"""An exploration started from the workbench (``X``): the Judge's ideas, the person's choice, the branches.

Why a thread of its own rather than the loop adapter's (``tui/live.py``): an exploration drives one loop
per branch, made and closed by ``engine.explore.runner.Explorer``, not the workbench's loop. The
workbench refuses to start a stage while it runs, so the two never write the session at once. Every
outcome crosses to the UI thread as a message (``post_message`` is thread-safe):

1. ``propose``: the Judge is asked once for the ideas (``Explorer.propose``); :class:`ExploreIdeas` brings
   them to the screen, which shows the chooser (tui/screens/explore.py). A chooser closed undecided
   keeps the ideas in the exploration's plan, so ``X`` again shows them without a second Judge call.
2. ``start``: a branch per chosen idea (``Explorer.choose``, the person recorded as the approver), then
   the rounds. Each commit posts :class:`ExploreCommitted` (the timeline grows); the end posts
   :class:`ExploreFinished` with the summary, or the error.

With ``s`` in the chooser (``gated``) each branch stops at its gate from round 2 on: :class:`ExploreGate`
tells the workbench, which shows the waiting suggestion in the approval view with the branch named;
``approve``, ``reject`` and ``let_go`` hand the person's decision back (``Explorer.approve`` …).

``stop`` (the workbench's ``x``) stops at the next stage boundary, as in a single branch: the evaluation
in flight is committed first, and ``X`` at the same iteration resumes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from textual.dom import DOMNode
from textual.message import Message

from engine.events import Event, IterationCommitted


class ExploreIdeas(Message):
    def __init__(self, ideas: list[dict[str, Any]]) -> None:
        super().__init__()
        self.ideas = ideas


class ExploreLine(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ExploreCommitted(Message):
    """A branch of the exploration committed an iteration."""


class ExploreGate(Message):
    """A branch of the exploration waits at its gate for the person."""

    def __init__(self, branch: str) -> None:
        super().__init__()
        self.branch = branch


class ExploreFinished(Message):
    def __init__(self, summary: Any, error: str = "") -> None:
        super().__init__()
        self.summary = summary
        self.error = error


class ExploreRun:
    """One exploration from the workbench (module docstring); ``active`` until it ends or is cancelled."""

    def __init__(
        self,
        target: DOMNode,
        repo: Any,
        config: Any,
        start: int,
        source: str,
        width: int = 3,
        rounds: int = 2,
        keep_lock: bool = True,
    ) -> None:
        """``keep_lock``: the workbench's own loop holds the session's writer lock (live): leave it held."""
        self.target = target
        self.repo = repo
        self.config = config
        self.start_at = start
        self.source = source
        self.width = width
        self.rounds = rounds
        self.keep_lock = keep_lock
        self.explorer: Any = None
        self.active = True
        self.running = False  # the branches' rounds run (after the choice)

    def _in_thread(self, work: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                work()
            except Exception as error:  # noqa: BLE001 - any failure ends the exploration, said in the UI
                self._end(None, f"{type(error).__name__}: {error}")

        threading.Thread(target=guarded, name="cudaforge-explore", daemon=True).start()

    def _end(self, summary: Any, error: str = "") -> None:
        self.active = self.running = False
        if not self.keep_lock:
            self.repo.release_lock()
        self.target.post_message(ExploreFinished(summary, error))

    def _on_event(self, event: Event) -> None:
        if isinstance(event, IterationCommitted):
            self.target.post_message(ExploreCommitted())

    def propose(self) -> None:
        """Ask the Judge for the ideas (or read those it gave before), off the UI thread. The device is
        resolved here, once for the exploration (an error ends it, said in the UI), as ``cudaforge
        explore`` resolves it; every branch's loop takes it as it is."""
        from engine.eval.options import resolve_device
        from engine.explore.loops import branch_loops
        from engine.explore.plan import ExploreSpec
        from engine.explore.runner import Explorer

        def work() -> None:
            spec = ExploreSpec(start=self.start_at, source=self.source, width=self.width, rounds=self.rounds)
            device = resolve_device(self.config.eval.device)
            self.explorer = Explorer(
                self.repo, spec, branch_loops(self.config, device),
                on_line=lambda text: self.target.post_message(ExploreLine(text)), on_event=self._on_event,
                on_gate=lambda branch: self.target.post_message(ExploreGate(branch)),
            )  # fmt: skip
            if self.explorer.plan.asked:  # chosen before: this is a resume of its branches
                self._run([], None)
                return
            ideas = self.explorer.propose()
            if not ideas:
                self._end(None, "stopped before the Judge replied")
                return
            self.target.post_message(ExploreIdeas(ideas))

        self._in_thread(work)

    def start(self, choices: list[Any], rounds: int, gated: bool = False) -> None:
        """Make a branch per chosen idea and run the rounds, off the UI thread; ``gated``: the person
        decides at every branch's gate from round 2 on."""
        self.explorer.set_gated(gated)
        self._in_thread(lambda: self._run(choices, rounds))

    def awaiting(self) -> list[tuple[str, dict[str, Any]]]:
        """The branches waiting at their gate, with their suggestions (none before the rounds run)."""
        return self.explorer.awaiting() if self.explorer is not None else []

    def approve(self, branch: str, suggestion: dict[str, Any] | None = None) -> None:
        self.explorer.approve(branch, suggestion)

    def reject(self, branch: str, note: str) -> None:
        self.explorer.reject(branch, note)

    def let_go(self) -> None:
        """Every branch goes on without asking, the waiting ones as their Judge said."""
        self.explorer.set_gated(False)

    def _run(self, choices: list[Any], rounds: int | None) -> None:
        from engine import approval

        self.running = True
        if choices:
            self.explorer.choose(choices, approval.HUMAN, rounds)
        self._end(self.explorer.run())

    def cancel(self) -> None:
        """The chooser closed undecided: nothing is made; the ideas wait in the plan for the next ``X``."""
        self._end(None, "")

    def stop(self) -> None:
        if self.explorer is not None:
            self.explorer.stop()
