"""The kernel pane: the candidate file (Python) or its CUDA sources, read-only unless editing.

Read-only while the engine works; ``edit mode`` unlocks the text and the finished text is handed
to the loop as a human version. While editing, the editor takes the workbench's whole width (the
screen gets the ``-editing-kernel`` class and ``workbench.tcss`` hides the other columns) and does
not soft-wrap: a CUDA line is one line, scrolled sideways, as in any editor (ARCHITECTURE.md §8).
The read-only view keeps soft-wrap, so a narrow column still shows every character. ``c`` flips between the whole ``ModelNew`` file and the CUDA
strings it compiles, highlighted as CUDA when the grammar is installed.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static, TextArea

from tui.highlight import CUDA, PYTHON, language_for, load_code
from tui.model import cuda_sources


class KernelPane(Vertical):

    view: reactive[str] = reactive(PYTHON)
    editing: reactive[bool] = reactive(False)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.source = ""
        self.label = ""

    def compose(self) -> ComposeResult:
        yield Static("kernel", id="kernel-title")
        yield TextArea("", read_only=True, id="kernel-source", show_line_numbers=True)

    @property
    def text_area(self) -> TextArea:
        return self.query_one("#kernel-source", TextArea)

    def show(self, source: str, label: str) -> None:
        """Show a kernel version (leaves edit mode: a new version replaces what was on screen)."""
        self.source, self.label = source, label
        self.editing = False
        self._render_view()

    def _render_view(self) -> None:
        area = self.text_area
        text = self.source if self.view == PYTHON or self.editing else cuda_sources(self.source)
        language = language_for(PYTHON if self.editing else self.view, area)
        load_code(area, text or self._placeholder(), language)
        area.read_only = not self.editing
        area.soft_wrap = not self.editing
        mode = "EDITING (ctrl+s saves it as a human version, escape cancels)" if self.editing else "read-only"
        shown = "cuda" if self.view == CUDA and not self.editing else "python"
        self.query_one("#kernel-title", Static).update(
            f"kernel · {self.label} · {shown}{'' if language else ' (plain)'} · {mode}"
        )
        self.set_class(self.editing, "-editing")

    def watch_editing(self, editing: bool) -> None:
        """The screen hides its other panes while the kernel is edited (a class, so CSS decides)."""
        if self.is_attached:
            self.screen.set_class(editing, "-editing-kernel")

    def _placeholder(self) -> str:
        """What an empty view says: no kernel at all yet, or a kernel without CUDA strings."""
        if not self.source.strip():
            return "# no kernel yet: the Coder's seed becomes iteration #0"
        return "// no CUDA source in this kernel (c shows the Python file)"

    def watch_view(self) -> None:
        if self.is_mounted:
            self._render_view()

    def toggle_view(self) -> None:
        self.view = CUDA if self.view == PYTHON else PYTHON

    def begin_edit(self) -> None:
        self.editing = True
        self._render_view()
        self.text_area.focus()

    def end_edit(self, keep: bool) -> str | None:
        """Leave edit mode; return the edited text when ``keep``, else restore the shown version."""
        text = self.text_area.text if keep else None
        self.editing = False
        if text is not None:
            self.source = text
        self._render_view()
        return text
