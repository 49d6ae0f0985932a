"""The session browser, the start screen of ``cudaforge``: every session with its task, date,
branches, iteration count and best speedup; open one, replay one, or start one from a task file.

Each workbench opened here gets its own :class:`~sessions.repo.SessionRepo` and closes it when it
leaves (writer lock included), so a session can be opened, left with Escape and opened again;
coming back refreshes the table, since the visit may have added iterations (ARCHITECTURE.md §8).
"""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from sessions.errors import SessionError
from sessions.listing import SessionSummary, list_sessions
from sessions.repo import SessionRepo
from tui.model import format_speedup
from tui.screens.dialogs import PromptScreen
from tui.screens.workbench import LIVE, REPLAY
from tui.widgets import sized_table
from tui.widgets.footer import KeyFooter

COLUMNS = ("session", "task", "created", "branches", "iterations", "best")


class BrowserScreen(Screen[None]):
    CSS_PATH = "../styles/browser.tcss"
    BINDINGS = [
        Binding("enter,o", "open", "Open", id="browser.open"),
        Binding("r", "replay", "Replay", id="browser.replay"),
        Binding("n", "new", "New from task", id="browser.new"),
        Binding("g", "refresh", "Refresh", id="browser.refresh"),
    ]

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.sessions: list[SessionSummary] = []

    def compose(self) -> ComposeResult:
        yield Static(f"sessions in {self.root}", id="browser-title")
        table: DataTable[str] = DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield table
        yield KeyFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        self.action_refresh()
        table.focus()

    def on_screen_resume(self) -> None:
        if self.is_mounted and self.query(DataTable):
            self.action_refresh()

    def action_refresh(self) -> None:
        self.sessions = list_sessions(self.root)
        table = self.query_one(DataTable)
        rows = [
            (
                s.name,
                s.task_name,
                s.created.strftime("%Y-%m-%d %H:%M"),
                str(s.branches),
                str(s.iterations),
                format_speedup(s.best_speedup),
            )
            for s in self.sessions
        ]
        sized_table.fill(table, COLUMNS, rows, [str(s.path) for s in self.sessions])
        title = self.query_one("#browser-title", Static)
        if self.sessions:
            count = len(self.sessions)
            title.update(f"{count} session{'s' if count != 1 else ''} in {self.root}")
        else:
            title.update(
                f"no sessions yet — press n to start one from a task file (sessions root: {self.root})"
            )

    def selected(self) -> SessionSummary | None:
        table = self.query_one(DataTable)
        if not self.sessions or table.cursor_row < 0:
            return None
        return self.sessions[min(table.cursor_row, len(self.sessions) - 1)]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def _open(self, mode: str) -> None:
        summary = self.selected()
        if summary is None:
            self.notify("no session selected", severity="warning")
            return
        try:
            repo = SessionRepo.open(summary.path)
        except SessionError as error:
            self.notify(f"cannot open {summary.name}: {error}", severity="error")
            return
        self.app.open_workbench(repo, mode)  # type: ignore[attr-defined]  (CudaforgeApp)

    def action_open(self) -> None:
        self._open(LIVE)

    def action_replay(self) -> None:
        self._open(REPLAY)

    def action_new(self) -> None:
        def create(answer: str | None) -> None:
            if not answer:
                return
            try:
                repo = SessionRepo.create(self.root, Path(answer).expanduser())
            except (SessionError, OSError) as error:
                self.notify(f"cannot create a session: {error}", severity="error")
                return
            self.action_refresh()
            self.app.open_workbench(repo, LIVE)  # type: ignore[attr-defined]

        self.app.push_screen(
            PromptScreen("New session from a task file (KernelBench format):", "path/to/task.py"), create
        )
