"""The model view: a folder ``cudaforge extract`` wrote (``cudaforge new OUT``), its profile and its tasks.

From the top: the model (dtype, GPU, the eager forward's median latency, the device time per forward);
the end-to-end line (``engine.model.folder.end_to_end_line``: the Amdahl estimate from the tasks' best
kernels, and the last apply's measured figure); the tasks, one row each (modules, share of the device
time, session: none or its iterations, best speedup with its branch and iteration); the profile tree,
each module marked with the task that covers it; and the heaviest modules' share of the device time as
bars, beside the tree. Below ``NARROW_WIDTH`` columns the tree and the chart are tabs (``[``/``]``
switch them).

``enter`` (or ``o``) on a task opens its session in the live workbench, creating it first as
``OUT/sessions/<task>`` with this command line's settings. The folder is read again in a thread worker
(``tui.model_view.read``) every ``RELOAD_S`` seconds while the screen is shown, when it is shown again
(back from a workbench) and on ``r``: a session's new best changes its row and the end-to-end line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.events import Resize
from textual.geometry import Size
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Static

from engine.model.folder import ModelFolder, TaskState, end_to_end_line
from sessions.errors import SessionError
from sessions.paths import is_session_dir
from sessions.repo import SessionRepo
from tui import model_view as view
from tui.screens.workbench import LIVE
from tui.widgets import sized_table
from tui.widgets.footer import KeyFooter
from tui.widgets.tabs import Pane, PaneTabs

NARROW_WIDTH = 110  # the workbench's: below it the profile tree and the chart are tabs
RELOAD_S = 3.0
PANES = ("pane-profile", "pane-chart")


class FolderRead(Message):
    """The worker read the folder (``snapshot``), or could not (``error``); ``generation`` orders reads."""

    def __init__(self, generation: int, snapshot: view.Snapshot | None, error: str = "") -> None:
        super().__init__()
        self.generation = generation
        self.snapshot = snapshot
        self.error = error


class ShareChart(Widget):
    """The heaviest modules' share of the device time as labelled horizontal bars."""

    COMPONENT_CLASSES = {"share-chart--bar"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bars: list[tuple[str, float]] = []
        self.note = "reading the profile…"

    def show(self, bars: list[tuple[str, float]], note: str) -> None:
        self.bars, self.note = bars, note
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1 + len(self.bars)

    def render(self) -> Text:
        width = self.size.width
        lines = view.chart_lines(self.bars, width, self.size.height)
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        text.append(
            view.cut(view.CHART_TITLE if lines else self.note, width), style="bold" if lines else "italic"
        )
        style = self.get_component_rich_style("share-chart--bar")
        for label, drawn, share in lines:
            text.append("\n" + label)
            text.append(drawn, style)
            text.append(share)
        return text


class ModelScreen(Screen[None]):
    CSS_PATH = "../styles/model.tcss"
    BINDINGS = [
        Binding("enter,o", "open", "Open task", id="model.open"),
        Binding("r", "refresh", "Refresh", id="model.refresh"),
        Binding("left_square_bracket", "pane(-1)", "Prev pane", id="model.pane-previous"),
        Binding("right_square_bracket", "pane(1)", "Next pane", id="model.pane-next"),
        Binding("escape", "back", "Back to sessions", id="model.back", show=False),
    ]

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = Path(root)
        self.snapshot: view.Snapshot | None = None
        self.reads = 0  # folder reads shown so far (tests wait on it)
        self._asked = 0  # the generation of the last read asked for
        self._shown = 0  # the generation of the read shown
        self._narrow: bool | None = None
        self._error = ""

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        narrow = self._narrow if self._narrow is not None else self.app.size.width < NARROW_WIDTH
        self._narrow = narrow
        yield Static(f"reading {self.root}…", id="model-header")
        yield Static("", id="model-estimate")
        tasks: DataTable[str] = DataTable(id="model-tasks", cursor_type="row", zebra_stripes=True)
        profile = VerticalScroll(Static("", id="model-profile"), id="model-profile-box")
        yield tasks
        if narrow:
            with PaneTabs(id="model-panes"):
                with Pane("Profile", id="pane-profile"):
                    yield profile
                with Pane("Chart", id="pane-chart"):
                    yield ShareChart(id="model-chart")
        else:
            with Horizontal(id="model-body"):
                yield profile
                yield ShareChart(id="model-chart")
        yield KeyFooter()

    def on_mount(self) -> None:
        self._fill()
        self.query_one(DataTable).focus()
        self.set_interval(RELOAD_S, self._tick)

    def on_screen_resume(self) -> None:
        self.action_refresh()  # shown first, or again (back from a workbench, whose session may have grown)

    async def on_resize(self, event: Resize) -> None:
        narrow = event.size.width < NARROW_WIDTH
        if self._narrow is None or narrow == self._narrow:
            return
        self._narrow = narrow
        row = self.query_one(DataTable).cursor_row
        await self.recompose()
        self._fill()
        table = self.query_one(DataTable)
        table.move_cursor(row=row)
        table.focus()

    # ------------------------------------------------------------------ reading the folder

    @property
    def reading(self) -> bool:
        """A read asked for has not been shown yet."""
        return self._shown < self._asked

    def _tick(self) -> None:
        if self.is_current and not self.reading:  # shown, and no read in flight
            self.action_refresh()

    def action_refresh(self) -> None:
        self._asked += 1
        self._read(self._asked)

    @work(thread=True, exclusive=True, group="model-folder", exit_on_error=False)
    def _read(self, generation: int) -> None:
        try:
            snapshot = view.read(self.root)
        except Exception as error:  # a folder being rewritten, a session mid-commit: keep what is shown
            self.post_message(FolderRead(generation, None, str(error)))
            return
        self.post_message(FolderRead(generation, snapshot))

    def on_folder_read(self, message: FolderRead) -> None:
        if message.generation <= self._shown:
            return  # an older read finished after a newer one
        self._shown = message.generation
        if message.snapshot is None:
            if message.error != self._error:
                self.notify(f"cannot read {self.root}: {message.error}", severity="warning")
            self._error = message.error
            return
        self._error = ""
        self.snapshot = message.snapshot
        self.reads += 1
        self._fill()

    # ------------------------------------------------------------------ showing it

    def _fill(self) -> None:
        snapshot = self.snapshot
        folder = snapshot.folder if snapshot is not None else None
        if folder is not None:
            self.query_one("#model-header", Static).update(view.header_line(folder))
            self.query_one("#model-estimate", Static).update(end_to_end_line(folder))
        self._fill_tasks()
        self.query_one("#model-profile", Static).update(view.profile_table(snapshot))
        note = "no profile.json in this folder" if folder is not None else "reading the profile…"
        self.query_one(ShareChart).show(snapshot.bars if snapshot is not None else [], note)

    def _fill_tasks(self) -> None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        cells = [view.task_cells(task, bool(self._narrow)) for task in self.tasks()]
        sized_table.fill(table, view.TASK_COLUMNS, cells, [task.name for task in self.tasks()])
        if self.tasks():
            table.move_cursor(row=max(0, min(row, len(self.tasks()) - 1)))

    def tasks(self) -> list[TaskState]:
        return self.snapshot.folder.tasks if self.snapshot is not None else []

    # ------------------------------------------------------------------ keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pane":
            return bool(self._narrow)  # side by side when wide: nothing to switch
        return True

    def action_pane(self, step: int) -> None:
        tabs = self.query_one(PaneTabs)
        here = PANES.index(tabs.active) if tabs.active in PANES else 0
        tabs.active = PANES[(here + step) % len(PANES)]

    def action_back(self) -> None:
        self.app.show_browser()  # type: ignore[attr-defined]  (CudaforgeApp: screens navigate through it)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        """The highlighted task's session in the live workbench, created first when it has none."""
        tasks = self.tasks()
        if not tasks:
            self.notify("no task to open", severity="warning")
            return
        task = tasks[max(0, min(self.query_one(DataTable).cursor_row, len(tasks) - 1))]
        folder = self.snapshot.folder  # type: ignore[union-attr]  (tasks come from it)
        try:
            repo = self._session(folder, task)
        except (SessionError, OSError) as error:
            self.notify(f"cannot open a session for {task.name}: {error}", severity="error")
            return
        self.app.open_workbench(repo, LIVE)  # type: ignore[attr-defined]  (CudaforgeApp)

    def _session(self, folder: ModelFolder, task: TaskState) -> SessionRepo:
        path = folder.session_for(task.name)
        if is_session_dir(path):
            return SessionRepo.open(path)
        from engine.loop.session_settings import session_settings

        config = self.app.config  # type: ignore[attr-defined]  (CudaforgeApp: the command line's settings)
        settings = session_settings(config, config.eval.device)
        repo = SessionRepo.create(folder.sessions_root, task.file, name=task.name, settings=settings)
        self.notify(f"new session {repo.path}")
        return repo
