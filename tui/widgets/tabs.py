"""Tabs over panes, drawn by one strip widget and a content switcher.

Textual's ``TabbedContent`` builds about a dozen widgets for a row of tabs (scroll container,
rows, a widget per tab, an animated underline) and highlights the active tab after a refresh: the
output pane's four tabs were over a quarter of the work before the workbench's first frame on a
2-core machine. :class:`TabStrip` draws the same two lines — the titles, then a bar with the
active title's span lit — as one renderable; clicks and, when focused, ←/→ switch tabs.
:class:`PaneTabs` pairs it with a ``ContentSwitcher`` of :class:`Pane` children and keeps the
``active`` / ``TabActivated`` interface of ``TabbedContent``.

Tabs with keys (the output pane's ``1``–``5``) show each key before its title — padded when the strip
has the room, tighter when not, and plain titles only when even that does not fit — so the key is
read where the tab is (ARCHITECTURE.md §8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group
from rich.style import Style
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.renderables.bar import Bar
from textual.widget import Widget
from textual.widgets import ContentSwitcher


class Pane(Vertical):
    """One pane of a :class:`PaneTabs`, titled."""

    def __init__(self, title: str, *children: Widget, id: str) -> None:
        super().__init__(*children, id=id)
        self.title = title


class TabStrip(Widget, can_focus=True):
    """Tab titles on one line and a bar under them with the active title's span highlighted."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"tab-strip--tab", "tab-strip--active", "tab-strip--bar"}
    BINDINGS = [
        Binding("left", "step(-1)", "Previous tab", show=False),
        Binding("right", "step(1)", "Next tab", show=False),
    ]

    active: reactive[str] = reactive("")

    class Clicked(Message):
        """A tab title was clicked (or chosen with the arrows): show its pane."""

        def __init__(self, tab_id: str) -> None:
            super().__init__()
            self.tab_id = tab_id

    def __init__(
        self,
        tabs: Sequence[tuple[str, str]],
        active: str,
        keys: Mapping[str, str] | None = None,
        **kwargs: object,
    ) -> None:
        """``tabs``: (id, title) pairs, in order; ``keys``: the key that shows each tab, by id."""
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.tabs = list(tabs)
        self.keys = dict(keys or {})
        self.set_reactive(TabStrip.active, active)

    def labels(self) -> tuple[list[str], int]:
        """Each tab's label and the padding after it (one cell before each): keys shown if they fit."""
        plain = [title for _, title in self.tabs]
        if not self.keys:
            return plain, 1
        keyed = [f"{self.keys[t]} {title}" if t in self.keys else title for t, title in self.tabs]
        for labels, after in ((keyed, 1), (keyed, 0)):
            if sum(Text(label).cell_len + 1 + after for label in labels) <= self.size.width:
                return labels, after
        return plain, 1

    def spans(self) -> list[tuple[int, int, str]]:
        """(first cell, end cell, tab id) of each label with its padding."""
        found, start = [], 0
        labels, after = self.labels()
        for (tab_id, _), label in zip(self.tabs, labels, strict=True):
            width = Text(label).cell_len + 1 + after
            found.append((start, start + width, tab_id))
            start += width
        return found

    def render(self) -> Group:
        normal = self.get_component_rich_style("tab-strip--tab")
        active = self.get_component_rich_style("tab-strip--active")
        bar = self.get_component_rich_style("tab-strip--bar")
        titles = Text(no_wrap=True, overflow="crop")
        lit = (0, 0)
        labels, after = self.labels()
        for (start, end, tab_id), label in zip(self.spans(), labels, strict=True):
            titles.append(f" {label}{' ' * after}", active if tab_id == self.active else normal)
            if tab_id == self.active:
                lit = (start + 1, end - after)  # the title, not its padding, as Textual's tabs do
        underline = Bar(
            highlight_range=lit,
            highlight_style=Style.from_color(bar.color),
            background_style=Style.from_color(bar.bgcolor),
        )
        return Group(titles, underline)

    def on_click(self, event: events.Click) -> None:
        for start, end, tab_id in self.spans():
            if start <= event.x < end:
                self.post_message(self.Clicked(tab_id))
                return

    def action_step(self, step: int) -> None:
        ids = [tab_id for tab_id, _ in self.tabs]
        here = ids.index(self.active) if self.active in ids else 0
        self.post_message(self.Clicked(ids[(here + step) % len(ids)]))


class PaneTabs(Vertical):
    """:class:`Pane` children, one shown at a time, under a :class:`TabStrip` of their titles."""


    active: reactive[str] = reactive("", init=False)

    class TabActivated(Message):
        """A pane became the shown one."""

        def __init__(self, pane_tabs: PaneTabs, pane: Pane) -> None:
            super().__init__()
            self.pane_tabs = pane_tabs
            self.pane = pane

        @property
        def control(self) -> PaneTabs:
            return self.pane_tabs

    def __init__(self, initial: str = "", keys: Mapping[str, str] | None = None, **kwargs: object) -> None:
        """``keys``: the key that shows each pane, by id, drawn in the strip (the screen binds them)."""
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._initial = initial
        self._keys = dict(keys or {})
        self._panes: list[Pane] = []

    def compose_add_child(self, widget: Widget) -> None:
        if not isinstance(widget, Pane):
            raise TypeError(f"PaneTabs holds Pane children, not {type(widget).__name__}")
        self._panes.append(widget)

    def compose(self) -> ComposeResult:
        first = self._initial or (self._panes[0].id if self._panes else "")
        self.set_reactive(PaneTabs.active, first or "")
        tabs = [(pane.id or "", pane.title) for pane in self._panes]
        yield TabStrip(tabs, self.active, self._keys)
        yield ContentSwitcher(*self._panes, initial=first or None)

    def validate_active(self, active: str) -> str:
        ids = [pane.id for pane in self._panes]
        if active not in ids:
            raise ValueError(f"no tab {active!r} here (tabs: {ids})")
        return active

    def watch_active(self, active: str) -> None:
        ids = [pane.id for pane in self._panes]
        self.query_one(ContentSwitcher).current = active
        self.query_one(TabStrip).active = active
        self.post_message(self.TabActivated(self, self._panes[ids.index(active)]))

    @on(TabStrip.Clicked)
    def _clicked(self, event: TabStrip.Clicked) -> None:
        event.stop()
        self.active = event.tab_id
