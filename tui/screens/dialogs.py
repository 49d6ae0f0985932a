"""Small modal dialogs: quit confirmation, a one-line prompt, the help list and the diff view."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui.model import unified_diff


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no; ``y`` or enter says yes, ``n`` or escape says no."""

    CSS_PATH = "../styles/dialogs.tcss"

    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question)
            yield Static("[b]y[/b] yes   [b]n[/b] no")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class PromptScreen(ModalScreen[str | None]):
    """Ask for one line of text (a task path, a rejection note); escape cancels with None."""

    CSS_PATH = "../styles/dialogs.tcss"

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(self, title: str, placeholder: str = "", value: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.placeholder = placeholder
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text)
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every binding of the screen below and of the app, with its id (for the keymap in config)."""

    CSS_PATH = "../styles/dialogs.tcss"

    BINDINGS = [Binding("escape,q,f1,question_mark", "close", "Close help", id="help.close")]

    def __init__(self, rows: Sequence[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        lines = ["[b]Keys[/b]  (remap by id in config.toml [ui.keymap]; every action is also in ctrl+p)", ""]
        lines += [
            f"{keys:<22} {description:<34} [dim]{binding_id}[/dim]"
            for keys, description, binding_id in self.rows
        ]
        with VerticalScroll():
            yield Static("\n".join(lines), id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)


class DiffScreen(ModalScreen[None]):
    """A unified diff between any two iterations of a branch: ``[``/``]`` move the old side, ``,``/``.`` the new.

    ``m`` switches to what moved between them (engine.profile.diff): the timing with both spreads, the
    own-kernel share, and every collected metric of each own kernel side by side, largest relative
    change first. ``evidence`` reads an iteration's EvalResult and profile.json, once each."""

    CSS_PATH = "../styles/dialogs.tcss"

    BINDINGS = [
        Binding("left_square_bracket", "move('old', -1)", "Old −1", id="diff.old-prev"),
        Binding("right_square_bracket", "move('old', 1)", "Old +1", id="diff.old-next"),
        Binding("comma", "move('new', -1)", "New −1", id="diff.new-prev"),
        Binding("full_stop", "move('new', 1)", "New +1", id="diff.new-next"),
        Binding("m", "toggle_metrics", "Code / what moved", id="diff.metrics"),
        Binding("escape,q", "close", "Close", id="diff.close"),
    ]

    def __init__(
        self,
        sources: dict[int, str],
        old: int,
        new: int,
        evidence: Callable[[int], tuple[Mapping[str, Any], Mapping[str, Any] | None]] | None = None,
    ) -> None:
        super().__init__()
        self.sources = sources
        self.numbers = sorted(sources)
        self.old, self.new = old, new
        self.evidence = evidence
        self.metrics_view = False
        self._evidence: dict[int, tuple[Mapping[str, Any], Mapping[str, Any] | None]] = {}

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("", id="diff-title")
            with VerticalScroll():
                yield Static("", id="diff-body", markup=False)

    def on_mount(self) -> None:
        self._render_diff()

    def diff_text(self) -> str:
        return unified_diff(
            self.sources[self.old], self.sources[self.new], f"iter {self.old}", f"iter {self.new}"
        )

    def moved_text(self) -> str:
        """What moved from the old iteration to the new one: timing, share, metrics per own kernel."""
        if self.evidence is None:
            return "(no evaluation records here)"
        from engine.profile.diff import diff_lines, iteration_diff

        sides = []
        for number in (self.old, self.new):
            if number not in self._evidence:
                self._evidence[number] = self.evidence(number)
            sides.append(self._evidence[number])
        (old_result, old_profile), (new_result, new_profile) = sides
        diff = iteration_diff(old_result, old_profile, new_result, new_profile)
        return "\n".join(diff_lines(diff, f"iter {self.old}", f"iter {self.new}"))

    def _render_diff(self) -> None:
        view = "m code" if self.metrics_view else "m what moved"
        self.query_one("#diff-title", Static).update(
            f"{'moved' if self.metrics_view else 'diff'} iter {self.old} → iter {self.new}"
            f"   [ ] old   , . new   {view}   esc close"
        )
        if self.metrics_view:
            self.query_one("#diff-body", Static).update(self.moved_text())
            return
        from rich.syntax import Syntax

        text = self.diff_text()
        body = Syntax(text, "diff", theme="ansi_dark") if text else "(identical kernels)"
        self.query_one("#diff-body", Static).update(body)

    def action_toggle_metrics(self) -> None:
        self.metrics_view = not self.metrics_view
        self._render_diff()

    def action_move(self, side: str, step: int) -> None:
        current = self.old if side == "old" else self.new
        index = max(0, min(len(self.numbers) - 1, self.numbers.index(current) + step))
        if side == "old":
            self.old = self.numbers[index]
        else:
            self.new = self.numbers[index]
        self._render_diff()

    def action_close(self) -> None:
        self.dismiss(None)
