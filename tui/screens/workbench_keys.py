"""The workbench's keys that reach into one pane: the output tabs (``1``–``5``) and the full text (``i``).

A base class of :class:`~tui.screens.workbench.WorkbenchScreen`: Textual merges ``BINDINGS`` along the
class's MRO, so these keys are the screen's own (help and the palette list them by id) while their
logic lives here, not in the workbench module (ARCHITECTURE.md §8).

``i`` opens the full text of what is cut on screen: the highlighted row of the focused pane when it
has one (a timeline node, an NCU or checks row), else the status line. Every cut ends in "…"
(``tui.model.ellipsize``), so the key is wanted exactly where a "…" shows.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen

from tui.widgets.output_pane import OUTPUT_TAB_KEYS, TAB_TITLES


class WorkbenchKeys(Screen[None]):
    BINDINGS = [
        *(
            Binding(
                key,
                f"output_tab('{tab}')",
                f"Output tab: {TAB_TITLES[tab]}",
                id=f"workbench.{tab}",
                show=False,
            )
            for tab, key in OUTPUT_TAB_KEYS.items()
        ),
        Binding("i", "full_text", "Full text of what is cut (…)", id="workbench.full-text", show=False),
    ]

    def action_output_tab(self, tab: str) -> None:
        """Show one of the output pane's tabs (on a narrow terminal, the Output pane first)."""
        from tui.widgets.output_pane import OutputPane
        from tui.widgets.tabs import PaneTabs

        narrow = self.query("#narrow")
        if narrow:
            narrow.first(PaneTabs).active = "pane-output"
        self.query_one(OutputPane).active = tab

    def action_full_text(self) -> None:
        from tui.screens.full_text import FullTextScreen

        title, text = self.full_text()
        self.app.push_screen(FullTextScreen(title, text))

    def full_text(self) -> tuple[str, str]:
        """(title, text): the focused pane's highlighted row in full, else the whole status line."""
        from tui.widgets.status_line import StatusLine

        node: DOMNode | None = self.focused
        while node is not None and node is not self:
            read = getattr(node, "full_text", None)
            found = read() if callable(read) else None
            if found is not None:
                return found
            node = node.parent
        return self.query_one(StatusLine).full_text()
