"""The approval view: the Judge's suggestion beside its evidence, and three keys — approve, edit, reject.

A decision needs what it rests on, so the view shows, next to the suggestion's own-mode fields,
the iteration it is about (:mod:`tui.evidence`): status and speedup in the title bar, the measured
values of the metrics the Judge cited, and the kernel lines the suggestion names. From
``NARROW_WIDTH`` columns up the two sit side by side; below it (80×24 over SSH) the suggestion
fills the view and ``v`` swaps in the evidence — one key away, the verdict always in the title.

Keyboard only. ``e`` turns the suggestion into editable text (ctrl+s approves the edited text);
``r`` asks for a note for the Judge. The result is an :class:`Approval` the workbench hands to
the loop; escape closes the view undecided (``a`` in the workbench brings it back) and ``q``
quits, as everywhere; from the evidence (``v``) it goes back to the suggestion first. A note typed
and left (escape) is still there when ``r`` is pressed again, and when ``a`` reopens the view. At an exploration branch's gate the title names the branch, and ``g`` lets
every branch go on without asking. After a rejection the next suggestion says so on a line of its own (which
one it is this round, and the note it answers), so it never looks like the one just rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.screen import ModalScreen
from textual.widgets import Input, Markdown, Static, TextArea

from tui.evidence import ApprovalEvidence
from tui.model import suggestion_markdown, suggestion_text

NARROW_WIDTH = 110  # the workbench's: below it, one pane at a time
VIEW_KEYS = "[b]a[/b] approve   [b]e[/b] edit then approve   [b]r[/b] reject   [b]esc[/b] later"


@dataclass
class Approval:
    decision: str  # approve / edit / reject
    suggestion: dict[str, Any] = field(default_factory=dict)
    note: str = ""


class ApprovalScreen(ModalScreen[Approval]):
    CSS_PATH = "../styles/approval.tcss"
    BINDINGS = [
        Binding("a", "approve", "Approve", id="approval.approve"),
        Binding("e", "edit", "Edit, then approve", id="approval.edit"),
        Binding("r", "reject", "Reject with a note", id="approval.reject"),
        Binding("v", "toggle_evidence", "Suggestion/evidence", id="approval.evidence"),
        Binding("g", "let_go", "Every branch on, unasked", id="approval.let-go"),
        Binding("ctrl+s", "save_edit", "Approve the edited text", id="approval.save", show=False),
        Binding("escape", "back", "Back; in the view, decide later", id="approval.back", show=False),
        Binding("q", "quit", "Quit", id="approval.quit", show=False),
    ]

    def __init__(
        self,
        suggestion: dict[str, Any],
        flagged: bool = False,
        evidence: ApprovalEvidence | None = None,
        rejected: list[str] | None = None,
        branch: str = "",
        note: str = "",
    ) -> None:
        """``rejected``: the notes of the suggestions already rejected in this round, oldest first.
        ``note``: a note typed for this suggestion before the view was closed undecided (``draft_note``).
        ``branch``: an exploration's branch waiting at its gate (tui/explore_run.py): the title names it,
        and ``g`` lets every branch of the exploration go on without asking (an :class:`Approval` of
        ``let_go``)."""
        super().__init__()
        self.branch = branch
        self.suggestion = dict(suggestion)
        self.flagged = flagged
        self.evidence = evidence
        self.rejected = list(rejected or [])
        self.note = note
        self.mode = "view"

    def compose(self) -> ComposeResult:
        self.set_class(self.app.size.width < NARROW_WIDTH, "-narrow")
        with Vertical():
            yield Static(self._title(), id="approval-title")
            if self.rejected:
                yield Static(self.context_text(), id="approval-context")
            with Horizontal(id="approval-panes"):
                with VerticalScroll(id="approval-suggestion"):
                    yield Markdown(suggestion_markdown(self.suggestion), id="approval-body")
                with VerticalScroll(id="approval-evidence"):
                    yield Static(evidence_text(self.evidence), id="approval-evidence-body")
            yield TextArea(suggestion_text(self.suggestion), id="approval-edit")
            yield Input(self.note, placeholder="note for the Coder, enter to reject", id="approval-note")
            yield Static(self._view_keys(), id="approval-keys")

    def _title(self) -> Text:
        """The verdict the suggestion is about, always visible (``⚑ FLAGGED`` first: it must not be cut)."""
        if self.flagged:
            title = Text("⚑ FLAGGED by a guard", style="bold")
        else:
            title = Text("Judge suggestion", style="bold")
        if self.branch:
            title.append(f" · {self.branch}", style="bold")
        title.append(f" · {self.suggestion.get('mode', '?')}")
        if self.evidence is not None and self.evidence.headline():
            title.append(" · on ")
            title.append(self.evidence.headline(), style=_status_style(self.evidence.status))
        return title

    def context_text(self) -> Text:
        """Which suggestion of the round this is, and the note the Judge was given (after a reject)."""
        count = len(self.rejected) + 1
        ordinal = {2: "2nd", 3: "3rd"}.get(count, f"{count}th")
        text = Text(f"{ordinal} suggestion this round", style="bold")
        note = self.rejected[-1].strip()
        text.append(" · you rejected the last one" + (f": “{note}”" if note else " (no note)"))
        return text

    def _view_keys(self) -> str:
        keys = VIEW_KEYS
        if self.branch:  # an exploration's gate: "later" is implied (a shows it again); g lets all go on
            keys = keys.replace("[b]esc[/b] later", "[b]g[/b] all go on")
        if not self.has_class("-narrow"):
            return keys
        other = "suggestion" if self.has_class("-evidence") else "evidence"
        return f"{keys}   [b]v[/b] {other}"

    def on_resize(self, event: Resize) -> None:
        narrow = event.size.width < NARROW_WIDTH
        if narrow != self.has_class("-narrow"):
            self.set_class(narrow, "-narrow")
            if self.mode == "view":
                self.query_one("#approval-keys", Static).update(self._view_keys())
            self.refresh_bindings()

    def action_toggle_evidence(self) -> None:
        self.toggle_class("-evidence")
        self.query_one("#approval-keys", Static).update(self._view_keys())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("approve", "edit", "reject"):
            return self.mode == "view"
        if action == "toggle_evidence":
            return self.mode == "view" and self.has_class("-narrow")
        if action == "let_go":
            return self.mode == "view" if self.branch else False
        if action == "save_edit":
            return self.mode == "editing"
        if action == "quit":
            return self.mode == "view"  # while typing a note or an edit, q is a letter
        return True

    def action_quit(self) -> None:
        """The app's quit (with its confirmation while a stage runs): a modal hides the app's keys."""
        quit_app = getattr(self.app, "action_quit_app", None)
        if quit_app is not None:
            quit_app()
        else:
            self.app.exit()

    def action_approve(self) -> None:
        self.dismiss(Approval("approve", self.suggestion))

    def action_let_go(self) -> None:
        self.dismiss(Approval("let_go", self.suggestion))

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

    @property
    def draft_note(self) -> str:
        """The note typed so far (kept by the workbench when the view closes undecided)."""
        return self.query_one(Input).value

    def action_back(self) -> None:
        """Escape: out of editing or the note, back to the view; from the evidence (80 columns), back
        to the suggestion, the view still open and the note as typed (issue 46.4); in the view, close
        it undecided."""
        if self.mode == "view" and self.has_class("-narrow", "-evidence"):
            self.action_toggle_evidence()
            return
        if self.mode == "view":
            self.dismiss(None)
            return
        self.mode = "view"
        self.remove_class("-editing", "-rejecting")
        self.query_one("#approval-keys", Static).update(self._view_keys())
        self.set_focus(None)
        self.refresh_bindings()


def _status_style(status: str) -> str:
    return "bold green" if status == "correct" else "bold red" if status else ""


def evidence_text(evidence: ApprovalEvidence | None) -> Text:
    """The evidence pane: verdict, timing or the failure, measured metrics, the kernel lines named."""
    text = Text()
    if evidence is None:
        text.append("No evidence recorded for this suggestion.", style="italic")
        return text
    text.append("Evidence", style="bold underline")
    if evidence.iteration is not None:
        text.append(f" · iter {evidence.iteration}")
    text.append("\n")
    verdict = evidence.status.replace("_", " ") or "not evaluated"
    text.append(verdict, style=_status_style(evidence.status))
    if evidence.speedup is not None:
        text.append(f" · {evidence.speedup:.2f}x")
    elif evidence.stage and evidence.status != "correct":
        text.append(f" (stage {evidence.stage})")
    text.append("\n")
    if evidence.timing:
        text.append(evidence.timing + "\n", style="dim")
    if evidence.problem:
        text.append(evidence.problem[:300] + "\n")
    if evidence.metrics:
        label = "Metrics the Judge cited" if evidence.metrics_cited else "Measured (none cited by name)"
        text.append(f"\n{label}\n", style="bold")
        for m in evidence.metrics:
            value = f"{m.value:.4g}" if isinstance(m.value, float) else str(m.value)
            text.append(f"  {m.name} ", style="cyan")
            text.append(f"{value} {m.unit}".rstrip())
            text.append(f"  ({m.kernel})\n", style="dim")
    if evidence.lines:
        label = "Kernel lines it names" if evidence.lines_named else "Kernel entry points (no line named)"
        text.append(f"\n{label}\n", style="bold")
        width = len(str(evidence.lines[-1].number))
        for line in evidence.lines:
            text.append(f"{line.number:>{width}} │ ", style="dim")
            text.append(line.text.rstrip() + "\n")
    return text
