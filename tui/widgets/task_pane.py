"""The task pane: the reference source with the input shapes and dtypes above it, and, for a weak task
(an output a degenerate answer passes: ARCHITECTURE.md §3, "Defences"), a line that says so."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static, TextArea

from tui.highlight import language_for, load_code
from tui.model import task_facts


class TaskPane(Vertical):

    def compose(self) -> ComposeResult:
        yield Static("", id="task-facts")
        area = TextArea("", read_only=True, id="task-source", show_line_numbers=False)
        yield area

    def show(self, name: str, source: str, weak: str = "") -> None:
        facts = task_facts(source)
        inputs = "; ".join(facts.inputs) or "—"
        init = "; ".join(facts.init_inputs) or "—"
        text = f"task {name}\ninputs: {inputs}\ninit: {init}"
        if weak:
            text += f"\n⚠ {weak}"
        self.query_one("#task-facts", Static).update(text)
        area = self.query_one("#task-source", TextArea)
        load_code(area, source, language_for("python", area))
