"""Which of the workbench's keys apply now: shown, dimmed (not now) or hidden (never in this mode).

Why a module of its own: the rules read every job's state (the mode, the loop's call in flight, an
exploration, the kernel editor, a pending suggestion) and are one table that the footer, the help
screen and the palette all go by. The screen (tui/screens/workbench.py) keeps Textual's
``check_action`` as a one-line delegation to :meth:`KeyAvailability.check`.
"""

from __future__ import annotations

from typing import Any

from tui.screens.workbench_modes import LIVE, VIEW
from tui.widgets.kernel_pane import KernelPane

LIVE_ONLY = {"step", "run", "pause", "edit_kernel", "external_editor", "show_approval", "add_rounds"}
REPLAY_ONLY = {"play"}  # a live branch grows while you watch: nothing to play through
WRITES_BRANCHES = {"branch", "explore"}  # hidden in a read-only view (issue 46.6)
STARTS_A_STAGE = {"step", "run", "add_rounds", "branch", "explore"}  # refused (dimmed) while a stage runs
# keys the kernel editor types as text: not offered (footer, help) while it has them
TYPED_WHILE_EDITING = {
    "next",
    "previous",
    "play",
    "branch",
    "diff",
    "toggle_cuda",
    "step",
    "run",
    "add_rounds",
    "pause",
    "edit_kernel",
    "show_approval",
    "focus_timeline",
    "pane",
    "explore",
    "output_tab",  # 1–5
    "full_text",  # i
}


class KeyAvailability:
    """The key rules of one workbench screen."""

    def __init__(self, screen: Any) -> None:
        """``screen``: the WorkbenchScreen (typed loosely: it imports this module)."""
        self.screen = screen

    def check(self, action: str) -> bool | None:
        """False hides a key (it never applies in this mode); None dims it (not now, e.g. while a
        stage runs). The help screen lists only the keys this returns True or None for."""
        screen = self.screen
        exploring_key = action in ("pause", "show_approval") and screen.exploration is not None
        if action in LIVE_ONLY and screen.mode != LIVE and not exploring_key:
            return False
        if action in REPLAY_ONLY and screen.mode == LIVE:
            return False
        if action in WRITES_BRANCHES and screen.mode == VIEW:
            return False  # read-only: another writer holds the session, or no loop could start
        if action in ("save_edit", "cancel_edit"):
            return self.editing()
        if action == "pane":
            return bool(screen._narrow)  # the tabs of a narrow terminal; wide, every pane is in view
        if action in TYPED_WHILE_EDITING and self.editing():
            return False  # the editor takes these keys as text: the footer shows the editor's keys
        if action == "back":
            return not self.editing()
        exploring = screen.exploration is not None and screen.exploration.active
        if action == "pause":
            return True if screen.adapter.busy or exploring else None
        if action in STARTS_A_STAGE and (exploring or (screen.mode == LIVE and screen.adapter.busy)):
            return None
        if action == "edit_kernel":
            return None if screen.adapter.busy or self.editing() else True
        if action == "show_approval":
            return screen.pending_approval is not None or screen.branching.waits()
        return True

    def editing(self) -> bool:
        """Whether the kernel pane is in edit mode (asked only by the actions it changes: a DOM query
        per binding each time the footer reads the keys added up at start-up)."""
        panes = self.screen.query(KernelPane)  # none for a moment while the screen recomposes (width change)
        return bool(panes) and panes.first().editing
