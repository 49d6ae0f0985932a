"""The key footer: the screen's keys on one line, drawn by one widget.

Textual's ``Footer`` builds a widget per key and composes empty until the screen's first
``bindings_updated`` signal, then rebuilds all of them for every later signal — four or five
while a screen starts, each with the same keys. On a 2-core machine that was ~0.15 s of the
workbench's first frame. This footer draws the same line (key, description, disabled keys dimmed,
the command palette key on the right) as one renderable, in the screen's first frame, and
repaints only when what it would draw changes. A click on a key presses it, as in ``Footer``.
"""

from __future__ import annotations

from typing import NamedTuple

from rich.style import Style
from rich.text import Text
from textual import events
from textual.screen import Screen
from textual.widget import Widget

_ENABLED, _DISABLED = Style(), Style(dim=True)


class FooterEntry(NamedTuple):
    key: str  # the key to simulate on a click
    display: str  # how the key is shown (``^p``, ``space`` …)
    description: str
    enabled: bool


class KeyFooter(Widget):
    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"key-footer--key", "key-footer--description"}

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._entries: tuple[FooterEntry, ...] | None = None
        self._palette: FooterEntry | None = None
        self._spans: list[tuple[int, int, FooterEntry]] = []  # columns each key occupies, for clicks
        self.repaints = 0  # times the keys changed after the first draw (tests read it)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def entries(self) -> tuple[FooterEntry, ...]:
        """The keys shown, one per action (its first key), in binding order."""
        if self._entries is None:
            self._entries, self._palette = self._read_bindings()
        return self._entries

    def _read_bindings(self) -> tuple[tuple[FooterEntry, ...], FooterEntry | None]:
        app = self.app
        seen: set[str] = set()
        entries: list[FooterEntry] = []
        palette: FooterEntry | None = None
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            entry = FooterEntry(
                binding.key, app.get_key_display(binding), binding.description, active.enabled
            )
            if app.ENABLE_COMMAND_PALETTE and key == app.COMMAND_PALETTE_BINDING:
                palette = entry
            elif binding.show and binding.action not in seen:
                seen.add(binding.action)
                entries.append(entry)
        return tuple(entries), palette

    def _bindings_changed(self, screen: Screen) -> None:
        if not self.is_attached or screen is not self.screen:
            return
        fresh = self._read_bindings()
        if fresh != (self._entries, self._palette):
            self._entries, self._palette = fresh
            self.repaints += 1
            self.refresh()

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-footer--key")
        description_style = self.get_component_rich_style("key-footer--description")
        line = Text(no_wrap=True, overflow="crop", end="")
        self._spans = []
        for entry in self.entries():
            start = line.cell_len
            dim = _ENABLED if entry.enabled else _DISABLED
            line.append(f" {entry.display} ", key_style + dim)
            line.append(f"{entry.description} ", description_style + dim)
            self._spans.append((start, line.cell_len, entry))
        if self._palette is not None:
            tail = Text.assemble(
                ("▏", "dim"),
                (f"{self._palette.display} ", key_style),
                (f"{self._palette.description} ", description_style),
            )
            width = self.size.width
            line.truncate(max(0, width - tail.cell_len), pad=True)
            self._spans = [(a, b, e) for a, b, e in self._spans if b <= width - tail.cell_len]
            self._spans.append((line.cell_len, line.cell_len + tail.cell_len, self._palette))
            line.append_text(tail)
        return line

    def on_click(self, event: events.Click) -> None:
        for start, end, entry in self._spans:
            if start <= event.x < end:
                if entry.enabled:
                    self.app.simulate_key(entry.key)
                else:
                    self.app.bell()
                return
