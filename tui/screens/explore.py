"""The explore chooser: the Judge's K ideas about one iteration, side by side with their evidence, and the
person at the gate once per idea (ARCHITECTURE.md §2, "Explore").

Each idea is a line in a list, ticked by default. The highlighted idea's fields and the evidence it
rests on (the iteration's verdict, the metrics it cites, the kernel lines it names, from
:mod:`tui.evidence`) fill the pane beside the list, or below it under ``NARROW_WIDTH`` columns (80×24
over SSH). Keys: space ticks, ``e`` changes the highlighted idea's text (ctrl+s keeps it), ``a`` adds an
idea of the person's own, ``+``/``-`` change the rounds per branch, ``r`` runs the ticked ideas, one
branch each, in list order, auto-approved inside their branches; ``s`` runs them too but stops each
branch at its gate from round 2 on for the person (the workbench shows each waiting suggestion). Escape backs out of an edit, or cancels and makes no branch.

The screen returns an :class:`ExploreChoice`: the ticked ideas as ``engine.explore.runner.Choice``
values, which say whether each is the Judge's idea as given, changed, or the person's own. It knows
nothing of loops or sessions: the workbench asks the Judge before and runs the branches after.
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
from textual.widgets import Input, SelectionList, Static, TextArea
from textual.widgets.selection_list import Selection

from engine.explore.runner import Choice
from tui.evidence import ApprovalEvidence
from tui.model import suggestion_markdown, suggestion_text
from tui.screens.approval import evidence_text

NARROW_WIDTH = 110  # the workbench's: below it, one pane at a time
MAX_ROUNDS = 10
VIEW_KEYS = (
    "[b]space[/b] tick  [b]e[/b] change  [b]a[/b] add yours  [b]+/-[/b] rounds  [b]r[/b] run  [b]s[/b] step"
    "  [b]esc[/b] cancel"
)


@dataclass
class Idea:
    """One line of the chooser: the idea as it will be sent, and the Judge's original when changed."""

    idea: dict[str, Any]
    original: dict[str, Any] | None  # the Judge's idea; None for the person's own
    changed: bool = False

    def choice(self) -> Choice:
        if self.original is None:
            return Choice(self.idea, {})
        return Choice(self.idea, dict(self.original) if self.changed else None)

    def label(self, k: int) -> Text:
        from engine.agents.suggestion import Suggestion

        mark = "✎ " if self.changed else "+ " if self.original is None else ""
        text = Text(f"{k}. ", style="bold")
        text.append(mark, style="bold yellow")
        text.append(Suggestion.from_dict(self.idea).headline())
        return text


@dataclass
class ExploreChoice:
    choices: list[Choice] = field(default_factory=list)
    rounds: int = 2
    gated: bool = False  # ``s``: each branch waits for the person at its gate from round 2 on


class ExploreChooser(ModalScreen["ExploreChoice | None"]):
    CSS_PATH = "../styles/explore.tcss"
    BINDINGS = [
        Binding("e", "change", "Change the idea", id="explore.change"),
        Binding("a", "add", "Add your own idea", id="explore.add"),
        Binding("r", "run", "Run the ticked ideas", id="explore.run"),
        Binding("s", "step", "Run them, asking me at every gate", id="explore.step"),
        Binding("plus", "rounds(1)", "More rounds", id="explore.more", show=False),
        Binding("minus", "rounds(-1)", "Fewer rounds", id="explore.fewer", show=False),
        Binding("ctrl+s", "save_change", "Keep the changed text", id="explore.save", show=False),
        Binding("escape", "back", "Back; in the list, cancel", id="explore.back", show=False),
    ]

    def __init__(
        self,
        ideas: list[dict[str, Any]],
        iteration: int,
        branch: str,
        rounds: int = 2,
        evidence: list[ApprovalEvidence | None] | None = None,
    ) -> None:
        """``evidence``: per idea, what it rests on (the same iteration, each idea's own metrics and lines)."""
        super().__init__()
        self.ideas = [Idea(dict(i), dict(i)) for i in ideas]
        self.evidence: list[ApprovalEvidence | None] = list(evidence or [None] * len(ideas))
        self.iteration = iteration
        self.branch = branch
        self.rounds = max(1, min(MAX_ROUNDS, rounds))
        self.mode = "view"

    def compose(self) -> ComposeResult:
        self.set_class(self.app.size.width < NARROW_WIDTH, "-narrow")
        with Vertical():
            yield Static(self._title(), id="explore-title")
            with Horizontal(id="explore-panes"):
                yield SelectionList[int](*self._selections(), id="explore-ideas")
                with VerticalScroll(id="explore-detail"):
                    yield Static("", id="explore-detail-body")
            yield TextArea("", id="explore-edit")
            yield Input(placeholder="your idea for the Coder, enter to add it", id="explore-own")
            yield Static(VIEW_KEYS, id="explore-keys")

    def on_mount(self) -> None:
        self.query_one(SelectionList).focus()
        self._show_detail(0)

    def _selections(self) -> list[Selection[int]]:
        return [Selection(idea.label(k), k - 1, True) for k, idea in enumerate(self.ideas, start=1)]

    def _title(self) -> Text:
        ticked = len(self._ticked()) if self.is_mounted else len(self.ideas)
        title = Text("Explore", style="bold")
        title.append(
            f" from #{self.iteration} of {self.branch} · {ticked} of {len(self.ideas)} idea(s) ticked"
        )
        title.append(f" · {self.rounds} round(s) each")
        return title

    def _ticked(self) -> list[int]:
        chosen = set(self.query_one(SelectionList).selected)
        return [i for i in range(len(self.ideas)) if i in chosen]

    def _highlighted(self) -> int:
        index = self.query_one(SelectionList).highlighted
        return 0 if index is None else index

    def _show_detail(self, index: int) -> None:
        body = Text()
        if not self.ideas:
            body.append("The Judge gave no idea: add your own with a.", style="italic")
        else:
            idea = self.ideas[index]
            origin = (
                "your own idea"
                if idea.original is None
                else "changed by you"
                if idea.changed
                else "the Judge's idea"
            )
            body.append(f"Idea {index + 1} · {origin}\n", style="bold underline")
            body.append(_plain(suggestion_markdown(idea.idea)) + "\n\n")
            evidence = self.evidence[index] if index < len(self.evidence) else None
            body.append_text(evidence_text(evidence))
        self.query_one("#explore-detail-body", Static).update(body)

    def on_selection_list_selection_highlighted(self, event: SelectionList.SelectionHighlighted) -> None:
        self._show_detail(event.selection_index)

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        self.query_one("#explore-title", Static).update(self._title())

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.width < NARROW_WIDTH, "-narrow")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("change", "add", "run", "step", "rounds"):
            return self.mode == "view"
        if action == "save_change":
            return self.mode == "changing"
        return True

    # ------------------------------------------------------------------ actions

    def action_rounds(self, step: int) -> None:
        self.rounds = max(1, min(MAX_ROUNDS, self.rounds + step))
        self.query_one("#explore-title", Static).update(self._title())

    def action_change(self) -> None:
        if not self.ideas:
            return
        self._enter("changing", "[b]ctrl+s[/b] keep the changed idea   [b]esc[/b] back")
        area = self.query_one(TextArea)
        area.text = _idea_text(self.ideas[self._highlighted()].idea)
        area.focus()

    def action_save_change(self) -> None:
        index = self._highlighted()
        text = self.query_one(TextArea).text.strip()
        idea = self.ideas[index]
        if text and text != _idea_text(idea.idea):
            base = idea.original or idea.idea
            if idea.original is None:
                replaced = Choice.own(text, str(base.get("mode") or "optimize")).idea
            else:
                replaced = Choice.edited(base, text).idea
            self.ideas[index] = Idea(replaced, idea.original, changed=idea.original is not None)
            self._relabel(index)
        self.action_back()

    def action_add(self) -> None:
        self._enter("adding", "type your idea, [b]enter[/b] add it   [b]esc[/b] back")
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if text:
            self.ideas.append(Idea(Choice.own(text).idea, None))
            self.evidence.append(None)  # nothing the Judge cited backs an idea of the person's own
            listing = self.query_one(SelectionList)
            k = len(self.ideas)
            listing.add_option(Selection(self.ideas[-1].label(k), k - 1, True))
            listing.highlighted = k - 1
        event.input.value = ""
        self.action_back()

    def action_run(self, gated: bool = False) -> None:
        ticked = self._ticked()
        if not ticked:
            self.notify("tick at least one idea (space), or escape to cancel", severity="warning")
            return
        self.dismiss(ExploreChoice([self.ideas[i].choice() for i in ticked], self.rounds, gated))

    def action_step(self) -> None:
        self.action_run(gated=True)

    def action_back(self) -> None:
        """Escape: out of a change or a new idea, back to the list; in the list, cancel (no branch made)."""
        if self.mode == "view":
            self.dismiss(None)
            return
        self.mode = "view"
        self.remove_class("-changing", "-adding")
        self.query_one("#explore-keys", Static).update(VIEW_KEYS)
        self.query_one(SelectionList).focus()
        self._show_detail(self._highlighted())
        self.refresh_bindings()

    def _enter(self, mode: str, keys: str) -> None:
        self.mode = mode
        self.add_class(f"-{mode}")
        self.query_one("#explore-keys", Static).update(keys)
        self.refresh_bindings()

    def _relabel(self, index: int) -> None:
        listing = self.query_one(SelectionList)
        ticked = set(listing.selected)
        listing.clear_options()
        listing.add_options(
            Selection(idea.label(k), k - 1, k - 1 in ticked) for k, idea in enumerate(self.ideas, start=1)
        )
        listing.highlighted = index


def _idea_text(idea: dict[str, Any]) -> str:
    """The editable text of an idea: its labelled fields, or the free text a person wrote."""
    return suggestion_text(idea) if idea.get("parsed") else str(idea.get("text") or "")


def _plain(markdown: str) -> str:
    """The suggestion's Markdown as plain lines (a Static in a narrow pane; the fields are labelled)."""
    return markdown.replace("**", "").replace("*", "")
