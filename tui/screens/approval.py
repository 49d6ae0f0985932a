"""The approval modal: the Judge's suggestion, and three keys — approve, edit then approve, reject.

Keyboard only. ``e`` turns the suggestion into editable text (ctrl+s approves the edited text);
``r`` asks for a note for the Coder. The result is an :class:`Approval` the workbench hands to
the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Markdown, Static, TextArea

from tui.model import suggestion_markdown, suggestion_text


@dataclass
class Approval:
    decision: str  # approve / edit / reject
    suggestion: dict[str, Any] = field(default_factory=dict)
    note: str = ""


class ApprovalScreen(ModalScreen[Approval]):
    DEFAULT_CSS = """
    ApprovalScreen { align: center middle; }
    ApprovalScreen > Vertical { width: 90%; height: 90%; border: thick $accent; background: $surface; }
    ApprovalScreen #approval-title { height: 1; background: $panel; padding: 0 1; }
    ApprovalScreen #approval-keys { height: 1; padding: 0 1; }
    ApprovalScreen TextArea, ApprovalScreen Input { display: none; }
    ApprovalScreen.-editing TextArea { display: block; height: 1fr; }
    ApprovalScreen.-rejecting Input { display: block; }
    """
    BINDINGS = [
        Binding("a", "approve", "Approve", id="approval.approve"),
        Binding("e", "edit", "Edit, then approve", id="approval.edit"),
        Binding("r", "reject", "Reject with a note", id="approval.reject"),
        Binding("ctrl+s", "save_edit", "Approve the edited text", id="approval.save", show=False),
        Binding("escape", "back", "Back", id="approval.back", show=False),
    ]

    def __init__(self, suggestion: dict[str, Any], flagged: bool = False) -> None:
        super().__init__()
        self.suggestion = dict(suggestion)
        self.flagged = flagged
        self.mode = "view"

    def compose(self) -> ComposeResult:
        flag = "  ⚑ FLAGGED by a guard" if self.flagged else ""
        with Vertical():
            yield Static(f"Judge suggestion{flag}", id="approval-title")
            with VerticalScroll():
                yield Markdown(suggestion_markdown(self.suggestion), id="approval-body")
            yield TextArea(suggestion_text(self.suggestion), id="approval-edit")
            yield Input(placeholder="note for the Coder, enter to reject", id="approval-note")
            yield Static(
                "[b]a[/b] approve   [b]e[/b] edit then approve   [b]r[/b] reject", id="approval-keys"
            )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("approve", "edit", "reject"):
            return self.mode == "view"
        if action == "save_edit":
            return self.mode == "editing"
        return True

    def action_approve(self) -> None:
        self.dismiss(Approval("approve", self.suggestion))

    def action_edit(self) -> None:
        self.mode = "editing"
        self.add_class("-editing")
        self.query_one("#approval-keys", Static).update("[b]ctrl+s[/b] approve edited text   [b]esc[/b] back")
        self.query_one(TextArea).focus()
        self.refresh_bindings()

    def action_save_edit(self) -> None:
        text = self.query_one(TextArea).text.strip()
        edited = {
            **self.suggestion,
            "text": text,
            "edited_by": "human",
            "parsed": False,
            "note": "edited by human",
        }
        self.dismiss(Approval("edit", edited))

    def action_reject(self) -> None:
        self.mode = "rejecting"
        self.add_class("-rejecting")
        self.query_one("#approval-keys", Static).update("type a note, [b]enter[/b] reject   [b]esc[/b] back")
        self.query_one(Input).focus()
        self.refresh_bindings()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(Approval("reject", self.suggestion, note=event.value))

    def action_back(self) -> None:
        self.mode = "view"
        self.remove_class("-editing", "-rejecting")
        self.query_one("#approval-keys", Static).update(
            "[b]a[/b] approve   [b]e[/b] edit then approve   [b]r[/b] reject"
        )
        self.set_focus(None)
        self.refresh_bindings()
