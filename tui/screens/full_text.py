"""A modal with one text in full: what a pane or the status line showed cut with "…" (``i``).

Wrapped on words and scrollable, so any length reads at 80×24 (ARCHITECTURE.md §8).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class FullTextScreen(ModalScreen[None]):
    CSS_PATH = "../styles/dialogs.tcss"

    BINDINGS = [Binding("escape,q,i,enter", "close", "Close", id="full-text.close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.title_text, id="full-text-title", markup=False)
            yield Static(self.text, id="full-text-body", markup=False)
            yield Static("esc closes", id="full-text-keys", markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
