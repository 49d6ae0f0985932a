"""Human edits of the kernel in the workbench: in the kernel pane (``e``, ctrl+s saves, escape cancels)
or in ``$VISUAL``/``$EDITOR`` (ctrl+e), checked, then handed to the loop.

Why a class of its own: an edit has a path of its own from the editor to the loop. Saving runs
``cudaforge check``'s static check first (tui/edit_check.py): its verdict goes to the Build log; an edit
that passes is handed over at once (a notice says so, with any warnings); one that fails is kept and the
person is asked: hand it over anyway, or back to the editor with the edit as it was (saving used to
hand every edit over unchecked, issue 46.5). Handed over, the edit replaces the round in progress,
its suggestion included. The screen (tui/screens/workbench.py) keeps the ``action_*`` methods Textual
dispatches, each a one-line delegation.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from textual.app import SuspendNotSupported

from tui.messages import KernelEdited
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.output_pane import OutputPane
from tui.widgets.tabs import PaneTabs

MAX_SHOWN = 3  # problems quoted in the question after a failed check; the Build log has them all


class KernelEdits:
    """The kernel edits of one workbench screen, from the editor to the loop."""

    def __init__(self, screen: Any) -> None:
        """``screen``: the WorkbenchScreen (typed loosely: it imports this module)."""
        self.screen = screen

    def begin(self) -> None:
        """The kernel pane becomes an editor (a narrow terminal's Kernel tab first)."""
        screen = self.screen
        if screen._narrow:
            screen.query_one("#narrow", PaneTabs).active = "pane-kernel"
        screen.query_one(KernelPane).begin_edit()
        screen.refresh_bindings()

    def save(self) -> None:
        source = self.screen.query_one(KernelPane).end_edit(keep=True)
        self.screen.refresh_bindings()
        if source is not None:
            self.check_then_hand(source)

    def cancel(self) -> None:
        self.screen.query_one(KernelPane).end_edit(keep=False)
        self.screen.refresh_bindings()

    def check_then_hand(self, source: str) -> None:
        """Check ``source``, show the result in the Build log, then hand it over or ask."""
        from tui.edit_check import check_edit, finding_line
        from tui.screens.dialogs import ConfirmScreen

        screen = self.screen
        options = getattr(getattr(screen.adapter.loop, "options", None), "eval_options", None)
        verdict = check_edit(source, options)
        screen._live_log.extend(verdict.lines())
        screen.query_one(OutputPane).append_build(verdict.lines())
        if verdict.would_build:
            warned = f" · {len(verdict.findings)} warning(s) in the Build log" if verdict.findings else ""
            screen.notify(f"check: {verdict.verdict()}{warned}", timeout=4)
            self.hand_kernel(source)
            return

        def decide(hand: bool | None) -> None:
            if hand:
                self.hand_kernel(source)
            else:  # back to the editor, the edit as it was
                self.begin()
                screen.query_one(KernelPane).text_area.text = source

        problems = [finding_line(f).strip() for f in verdict.problems]
        more = len(problems) - MAX_SHOWN
        shown = problems[:MAX_SHOWN] + ([f"… {more} more in the Build log"] if more > 0 else [])
        question = "\n".join(
            [f"The check says your edit {verdict.verdict()}:", *shown, "Hand it to the loop anyway?"]
        )
        screen.app.push_screen(ConfirmScreen(question, yes="hand it over", no="edit on"), decide)

    def hand_kernel(self, source: str) -> None:
        """A human version for the loop: it replaces the round in progress and is evaluated when the
        user says so (s, or r to go on), as the status line and a notice say."""
        screen = self.screen
        screen.app.post_message(KernelEdited(source))
        screen.pending_approval = None  # the edit replaces the round, suggestion included
        screen._rejected.clear()
        screen.running = False
        screen.adapter.call("edit_kernel", source)
        number = getattr(screen.adapter.loop, "next_iteration", None)
        label = f"#{number} (human)" if isinstance(number, int) else "a human version"
        screen.notify(
            f"Edit saved: it becomes {label}. s evaluates it, r evaluates it and runs on.", timeout=4
        )

    def external_editor(self) -> None:
        """Edit the shown kernel in ``$VISUAL``/``$EDITOR`` with the app suspended, then hand it over."""
        screen = self.screen
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        pane = screen.query_one(KernelPane)
        with tempfile.TemporaryDirectory(prefix="cudaforge-edit-") as folder:
            path = Path(folder) / "kernel.py"
            path.write_text(pane.source, encoding="utf-8")
            command = [*shlex.split(editor), str(path)]
            try:
                with screen.app.suspend():
                    completed = subprocess.run(command, check=False)
            except SuspendNotSupported:  # headless (tests, --serve): the editor must not need the tty
                completed = subprocess.run(command, check=False, stdin=subprocess.DEVNULL)
            except OSError as error:
                screen.notify(f"cannot run {editor}: {error}", severity="error")
                return
            edited = path.read_text(encoding="utf-8")
        if completed.returncode != 0:
            screen.notify(
                f"{editor} exited with {completed.returncode}; kernel unchanged", severity="warning"
            )
        elif edited != pane.source:
            pane.show(edited, f"{pane.label} + human edit")
            self.check_then_hand(edited)
