"""Browsing across the session's branches from the workbench: a node picked in the timeline (which may
put another branch on screen) and the diff dialog between any two nodes (``d``).

Why a class of its own: both read every branch's history and the branch tree the timeline draws
(a branch shares its parent's iterations up to where it left), which the rest of the screen, showing
one branch, never needs. ``n``/``p`` and space stay on the screen (tui/screens/workbench.py): they
only move along the branch shown. The screen keeps ``action_diff`` and the ``Tree.NodeSelected``
handler Textual dispatches there, each a one-line delegation.
"""

from __future__ import annotations

from typing import Any

from textual.widgets import Tree

from sessions.errors import SessionError
from tui.widgets.timeline import NodeRef


class Browsing:
    """Cross-branch browsing of one workbench screen."""

    def __init__(self, screen: Any) -> None:
        """``screen``: the WorkbenchScreen (typed loosely: it imports this module)."""
        self.screen = screen

    def diff(self) -> None:
        """Diff the shown iteration with another node of the session (any branch; the dialog's keys move
        either side, and a side moved to another branch lands on the best of that branch's own
        iterations). From an exploration's branch the old side is the best of its other branches, else
        the iteration it started from (``tui.model.exploration_diff_base``); elsewhere the previous
        iteration of this branch."""
        screen = self.screen
        item = screen.shown
        if item is None:
            return
        from tui.model import exploration_diff_base
        from tui.screens.dialogs import DiffScreen
        from tui.widgets.timeline import branch_tree

        items = screen._timeline_items()
        histories = {name: screen.repo.history(name) for name in items}
        histories[screen.branch] = screen.history
        tree = branch_tree(items) if screen.branch in items else [(screen.branch, None, 0)]
        order = [name for name, _, _ in tree]
        records = {(name, it.number): it for name in order for it in histories.get(name, [])}
        best = {}  # where a side moved to a branch lands: its own best, as the timeline draws it
        for name, _, shared in tree:
            own = [it for it in items.get(name, [])[shared:] if it.status == "correct" and it.speedup]
            if own:
                best[name] = max(own, key=lambda it: (it.speedup, -it.number)).number
        base = exploration_diff_base(screen.repo.path, screen.branch, item.number, items)
        old = base if base in records else (screen.branch, screen.history[max(0, screen.index - 1)].number)

        def source(branch: str, number: int) -> str:
            return records[(branch, number)].kernel_source

        def evidence(branch: str, number: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
            return records[(branch, number)].eval_result, records[(branch, number)].profile

        numbers = {name: [it.number for it in histories.get(name, [])] for name in order}
        screen.app.push_screen(DiffScreen(numbers, old, (screen.branch, item.number), source, evidence, best))

    def node_selected(self, event: Tree.NodeSelected[NodeRef]) -> None:
        """A timeline node picked: show it, on its own branch unless this one shares it."""
        screen = self.screen
        ref = event.node.data
        if ref is None:
            return
        if ref.branch != screen.branch and not self._shares(ref):
            screen.branch = ref.branch
            screen._load_history()
        for k, item in enumerate(screen.history):
            if item.number == ref.number:
                screen.show_index(k)
                return

    def _shares(self, ref: NodeRef) -> bool:
        """Whether the iteration ``ref`` names is also one of this branch's (drawn under its parent)."""
        screen = self.screen
        try:
            theirs = screen.repo.iteration(ref.number, ref.branch).sha
        except SessionError:
            return False
        return any(it.number == ref.number and it.sha == theirs for it in screen.history)
