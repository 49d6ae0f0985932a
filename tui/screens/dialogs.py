"""Small modal dialogs: quit confirmation, a one-line prompt, the help list, a summary and the diff view."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui.model import unified_diff


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no; ``y`` or enter says yes, ``n`` or escape says no. ``yes``/``no`` name the two answers
    (``leave``/``stay``): escape, pressed once more by a hand that meant to leave, takes the safe one."""

    CSS_PATH = "../styles/dialogs.tcss"

    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str, yes: str = "yes", no: str = "no") -> None:
        super().__init__()
        self.question = question
        self.yes, self.no = yes, no

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question))  # plain: a question may quote "[rule-id]"
            yield Static(f"[b]y[/b] {self.yes}   [b]n[/b]/[b]esc[/b] {self.no}")

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


class SummaryScreen(ModalScreen[None]):
    """A title and a preformatted text (an exploration's summary table): lines are kept whole and
    scroll sideways at 80 columns rather than wrap, so the table's columns stay aligned."""

    CSS_PATH = "../styles/dialogs.tcss"

    BINDINGS = [Binding("escape,enter", "close", "Close", id="summary.close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.title_text, style="bold"), id="summary-title")
            with ScrollableContainer():
                yield Static(Text(self.text, no_wrap=True, overflow="ignore"), id="summary-text")
            yield Static("[b]esc[/b]/[b]enter[/b] close   [b]←/→[/b] scroll")

    def on_mount(self) -> None:
        self.query_one(ScrollableContainer).focus()  # the arrows scroll a table wider than the screen

    def action_close(self) -> None:
        self.dismiss(None)


Node = tuple[str, int]  # (branch, iteration number): one side of a diff


class DiffScreen(ModalScreen[None]):
    """A unified diff between any two nodes of a session: ``[``/``]`` move the old side along its branch,
    ``,``/``.`` the new; ``{``/``}`` and ``<``/``>`` (shift of those) change the branch of each side.

    A side moved to another branch lands on that branch's ``best`` iteration (its last one where the
    caller gives none: the workbench gives the best of the branch's own, past where it forked). ``m``
    switches to what moved between them (engine.profile.diff): the timing with both spreads, the
    own-kernel share, and every collected metric of each own kernel side by side, largest relative
    change first. ``branches`` maps each branch to its iteration numbers, in the order the sides cycle
    through them (the timeline's); ``source`` reads a node's kernel and ``evidence`` its EvalResult and
    profile.json, once each. The branch keys apply only where there are two branches or more."""

    CSS_PATH = "../styles/dialogs.tcss"

    BINDINGS = [
        Binding("left_square_bracket", "move('old', -1)", "Old −1", id="diff.old-prev"),
        Binding("right_square_bracket", "move('old', 1)", "Old +1", id="diff.old-next"),
        Binding("comma", "move('new', -1)", "New −1", id="diff.new-prev"),
        Binding("full_stop", "move('new', 1)", "New +1", id="diff.new-next"),
        Binding("left_curly_bracket", "branch('old', -1)", "Old branch −1", id="diff.old-branch-prev"),
        Binding("right_curly_bracket", "branch('old', 1)", "Old branch +1", id="diff.old-branch-next"),
        Binding("less_than_sign", "branch('new', -1)", "New branch −1", id="diff.new-branch-prev"),
        Binding("greater_than_sign", "branch('new', 1)", "New branch +1", id="diff.new-branch-next"),
        Binding("m", "toggle_metrics", "Code / what moved", id="diff.metrics"),
        Binding("escape,q", "close", "Close", id="diff.close"),
    ]

    def __init__(
        self,
        branches: Mapping[str, Sequence[int]],
        old: Node,
        new: Node,
        source: Callable[[str, int], str],
        evidence: Callable[[str, int], tuple[Mapping[str, Any], Mapping[str, Any] | None]] | None = None,
        best: Mapping[str, int] | None = None,
    ) -> None:
        """``best``: where a side moved to a branch lands (the branch's last iteration when absent)."""
        super().__init__()
        self.branches = {name: sorted(numbers) for name, numbers in branches.items() if numbers}
        self.old_branch, self.old = old
        self.new_branch, self.new = new
        self.source = source
        self.evidence = evidence
        self.best = dict(best or {})
        self.metrics_view = False
        self._sources: dict[Node, str] = {}
        self._evidence: dict[Node, tuple[Mapping[str, Any], Mapping[str, Any] | None]] = {}

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("", id="diff-title")
            with VerticalScroll():
                yield Static("", id="diff-body", markup=False)

    def on_mount(self) -> None:
        self._render_diff()

    @property
    def across(self) -> bool:
        """Whether the sides can be on different branches (the session has more than one)."""
        return len(self.branches) > 1

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "branch":
            return self.across  # one branch: nothing to switch to, so not in the help either
        return True

    def label(self, side: str) -> str:
        """``iter 4``, or ``explore/3-1 iter 4`` where the session has more than one branch."""
        branch, number = (self.old_branch, self.old) if side == "old" else (self.new_branch, self.new)
        return f"{branch} iter {number}" if self.across else f"iter {number}"

    def _source(self, node: Node) -> str:
        if node not in self._sources:
            self._sources[node] = self.source(*node)
        return self._sources[node]

    def diff_text(self) -> str:
        old = self._source((self.old_branch, self.old))
        new = self._source((self.new_branch, self.new))
        return unified_diff(old, new, self.label("old"), self.label("new"))

    def moved_text(self) -> str:
        """What moved from the old node to the new one: timing, share, metrics per own kernel."""
        if self.evidence is None:
            return "(no evaluation records here)"
        from engine.profile.diff import diff_lines, iteration_diff

        sides = []
        for node in ((self.old_branch, self.old), (self.new_branch, self.new)):
            if node not in self._evidence:
                self._evidence[node] = self.evidence(*node)
            sides.append(self._evidence[node])
        (old_result, old_profile), (new_result, new_profile) = sides
        diff = iteration_diff(old_result, old_profile, new_result, new_profile)
        return "\n".join(diff_lines(diff, self.label("old"), self.label("new")))

    def title_text(self) -> str:
        """What is compared, then the keys: on a second line where the branch keys apply."""
        view = "m code" if self.metrics_view else "m what moved"
        kind = "moved" if self.metrics_view else "diff"
        keys = f"[ ] old   , . new   {view}   esc close"
        if not self.across:
            return f"{kind} {self.label('old')} → {self.label('new')}   {keys}"
        if self.old_branch == self.new_branch:
            what = f"{kind} iter {self.old} → iter {self.new} on {self.old_branch}"
        else:
            what = f"{kind} {self.label('old')} → {self.label('new')}"
        return f"{what}\n[ ] old  , . new  {{ }} old branch  < > new branch  {view}  esc close"

    def _render_diff(self) -> None:
        self.query_one("#diff-title", Static).update(Text(self.title_text()))
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
        branch, current = (self.old_branch, self.old) if side == "old" else (self.new_branch, self.new)
        numbers = self.branches.get(branch) or [current]
        here = numbers.index(current) if current in numbers else 0
        number = numbers[max(0, min(len(numbers) - 1, here + step))]
        self._place(side, branch, number)

    def action_branch(self, side: str, step: int) -> None:
        """The side on the next (previous) branch, at that branch's best iteration, else its last."""
        names = list(self.branches)
        branch = self.old_branch if side == "old" else self.new_branch
        here = names.index(branch) if branch in names else 0
        branch = names[(here + step) % len(names)]
        number = self.best.get(branch)
        if number not in self.branches[branch]:
            number = self.branches[branch][-1]
        self._place(side, branch, number)

    def _place(self, side: str, branch: str, number: int) -> None:
        if side == "old":
            self.old_branch, self.old = branch, number
        else:
            self.new_branch, self.new = branch, number
        self._render_diff()

    def action_close(self) -> None:
        self.dismiss(None)
