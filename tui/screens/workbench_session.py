"""The workbench's hold on its session: the writer's role taken when the screen opens live, handed back
when it leaves.

Why a class of its own: taking the role (adopting this app's loop of the session, or making one, or
opening read-only when another writer holds the lock) and giving it back (after the stage in flight,
through the app's writers, then closing or unlocking the repo) are one protocol with ``tui/writers.py``,
and Escape's question before leaving is part of it. The screen (tui/screens/workbench.py) calls
:meth:`SessionHold.start_loop` on mount and keeps ``action_back``/``release_session``/``on_unmount`` as
one-line delegations, since Textual and the app call them there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tui.screens.workbench_modes import LIVE, VIEW


class SessionHold:
    """The writer's role of one workbench screen; ``released`` once it was given back (it is, once)."""

    def __init__(self, screen: Any) -> None:
        """``screen``: the WorkbenchScreen (typed loosely: it imports this module)."""
        self.screen = screen
        self.released = False

    def start_loop(self) -> None:
        """Become the session's writer: adopt this app's loop of it (left while it finished a stage),
        or make one; when another writer holds the lock, open read-only and say who writes."""
        screen = self.screen
        writers = getattr(screen.app, "writers", None)
        adopted = writers.adopt(screen.repo.path) if writers is not None else None
        if adopted is not None:  # the one writer of this session in this app, continued here
            screen.adapter = adopted
            adopted.retarget(screen)
            screen.apply_policy(getattr(screen.app, "approval_policy", None))
            return
        try:
            loop = screen.loop_factory(screen.repo, screen.adapter.on_event)
            problem = "the loop is not available here"
        except Exception as error:  # a missing API key, a bad config, another writer: say so, keep it usable
            loop, problem = None, f"the loop could not start ({error})"
        if loop is None:
            screen.mode = VIEW
            screen.notify(
                f"{problem[0].upper()}{problem[1:]}: the session opens read-only.", severity="warning"
            )
            return
        screen.adapter.attach(loop)
        if writers is not None:
            writers.add(screen.repo.path, screen.adapter)
        screen.apply_policy(getattr(screen.app, "approval_policy", None))
        for notice in getattr(loop, "notices", None) or []:  # a stale lock taken over, a repaired journal
            screen.notify(notice, severity="warning", timeout=30)

    def back(self) -> None:
        """Back to the session browser, handing the session back (ARCHITECTURE.md §8).

        Live, it asks first (leave / stay; escape again stays): an Escape meant for a dialog or a
        pane must not end the session in front of the user. Leaving loses nothing: a stage still
        running is not cut; the loop pauses after it (having committed what it evaluated), then
        closes and gives the writer lock back, and opening the session again meanwhile continues
        that same loop (tui/writers.py). Replay and read-only views leave at once.
        """
        screen = self.screen
        if screen.mode != LIVE:
            self.leave()
            return
        from tui.screens.dialogs import ConfirmScreen

        question = f"Leave the live session {getattr(screen.repo, 'name', '')} for the session list?"
        screen.app.push_screen(ConfirmScreen(question, yes="leave", no="stay"), self._leave_if)

    def _leave_if(self, leave: bool | None) -> None:
        if leave and not self.released:
            self.leave()

    def leave(self) -> None:
        self.release()
        self.screen.app.show_browser()  # CudaforgeApp: screens navigate through it

    def release(self) -> None:
        """Drop the loop and give up the writer lock (and close the repo when this screen opened it).

        When a stage still runs, both happen once it has ended (the loop closes, then the repo);
        another screen on the same repo (replay under a live branch) keeps reading it.
        """
        if self.released:
            return
        self.released = True
        screen = self.screen
        if screen._player is not None:
            screen._player.stop()
            screen._player = None
        if screen.adapter.loop is None:
            self._close_repo(False)
        elif screen.adapter.busy:  # pause after the stage, close the loop, then the repo it writes with
            self._hand_back(then=lambda: self._close_repo(True))
        else:  # idle: the loop is closed (its lock given back) now
            self._hand_back(then=None)
            screen.adapter.loop = None
            self._close_repo(True)

    def _hand_back(self, then: Callable[[], None] | None) -> None:
        """Close the loop once no call runs (its lock goes back), through the app's writers, which let
        a reopening of this session before then adopt the same loop (tui/writers.py)."""
        screen = self.screen
        writers = getattr(screen.app, "writers", None)
        if writers is not None:
            writers.leave(screen.repo.path, screen.adapter, then=then)
        else:
            screen.adapter.retarget(None)
            screen.adapter.release_when_idle(then or (lambda: None))

    def _close_repo(self, had_loop: bool) -> None:
        screen = self.screen
        if screen.owns_repo:
            screen.repo.close()
        elif had_loop:
            screen.repo.release_lock()
