"""The workbench screen: task, kernel, output, conversation, timeline and status, in three modes.

* ``replay`` — read-only stepping through a recorded branch (``n``/``p``, space plays);
* ``live`` — a loop (via :class:`~tui.live.LoopAdapter`) drives the panes through events;
* ``view`` — a session opened when no loop is available: browse like replay, nothing runs.

Below ``NARROW_WIDTH`` columns the panes become tabs (80×24 over SSH stays usable); the screen
recomposes when the width crosses it and refills the panes from what it holds, so nothing is lost.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.geometry import Size
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import AwaitMount
from textual.widgets import Tree

from engine import events as ev
from sessions.errors import SessionError
from tui.live import LoopAdapter, LoopFactory, default_loop_factory
from tui.messages import ApprovalDecided, BranchCreated, EngineEvent, IterationShown, KernelEdited
from tui.model import ChatMessage, conversation
from tui.widgets.conversation import ConversationPane
from tui.widgets.footer import KeyFooter
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.output_pane import OutputPane
from tui.widgets.status_line import StatusLine
from tui.widgets.tabs import Pane, PaneTabs
from tui.widgets.task_pane import TaskPane
from tui.widgets.timeline import NodeRef, Timeline, TimelineItem

if TYPE_CHECKING:  # the modal screens are imported when first opened: not needed for the first frame
    from tui.screens.approval import Approval

NARROW_WIDTH = 110
PLAY_INTERVAL_S = 1.0
REPLAY, LIVE, VIEW = "replay", "live", "view"
LIVE_ONLY = {"step", "run", "pause", "edit_kernel", "external_editor", "show_approval"}
BROWSE_ONLY = {"next", "previous", "play"}


class WorkbenchScreen(Screen[None]):
    CSS_PATH = "../styles/workbench.tcss"

    AUTO_FOCUS = ""  # nothing focused: keys (arrows too) go to the screen first; Tab moves into a pane

    BINDINGS = [
        Binding("n,right", "next", "Next iteration", id="workbench.next"),
        Binding("p,left", "previous", "Previous iteration", id="workbench.previous"),
        Binding("space", "play", "Play/pause replay", id="workbench.play"),
        Binding("b", "branch", "Branch here", id="workbench.branch"),
        Binding("d", "diff", "Diff iterations", id="workbench.diff"),
        Binding("c", "toggle_cuda", "Python/CUDA view", id="workbench.toggle-cuda"),
        Binding("s", "step", "Step one stage", id="workbench.step"),
        Binding("r", "run", "Run rounds", id="workbench.run"),
        Binding("x", "pause", "Pause loop", id="workbench.pause"),
        Binding("e", "edit_kernel", "Edit kernel", id="workbench.edit"),
        Binding("ctrl+s", "save_edit", "Hand edit to loop", id="workbench.save-edit", show=False),
        Binding("escape", "cancel_edit", "Cancel edit", id="workbench.cancel-edit", show=False),
        Binding("ctrl+e", "external_editor", "Edit in $EDITOR", id="workbench.editor"),
        Binding("a", "show_approval", "Pending approval", id="workbench.approval"),
        Binding("t", "focus_timeline", "Timeline", id="workbench.timeline"),
        Binding("escape", "back", "Back to sessions", id="workbench.back", show=False),
    ]

    def __init__(
        self,
        repo: Any,
        mode: str = REPLAY,
        branch: str | None = None,
        loop_factory: LoopFactory | None = None,
        iteration: int | None = None,
    ) -> None:
        super().__init__()
        self.repo = repo
        self.mode = mode
        self.branch = branch or repo.current_branch
        self.loop_factory = loop_factory or default_loop_factory
        self.running = False  # True after `r`: an approval or rejection continues the rounds
        self.adapter = LoopAdapter(self)
        self.history: list[Any] = []
        self.index = 0
        self._start_iteration = iteration
        self._narrow: bool | None = None
        self._laid_out_size: Size | None = None
        self._player: Timer | None = None
        self.pending_approval: ev.AwaitingApproval | None = None
        self._live_chat: list[ChatMessage] = []
        self._live_log: list[str] = []
        self._live_result: dict[str, Any] | None = None
        self._live_profile: dict[str, Any] | None = None

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        narrow = self._narrow if self._narrow is not None else self.app.size.width < NARROW_WIDTH
        self._narrow = narrow
        if narrow:
            with PaneTabs(id="narrow"):
                with Pane("Kernel", id="pane-kernel"):
                    yield KernelPane()
                with Pane("Output", id="pane-output"):
                    yield OutputPane()
                with Pane("Chat", id="pane-chat"):
                    yield ConversationPane()
                with Pane("Task", id="pane-task"):
                    yield TaskPane()
                with Pane("Timeline", id="pane-timeline"):
                    yield Timeline()
        else:
            with Horizontal(id="wide"):
                with Vertical(id="col-left"):
                    yield TaskPane()
                    yield KernelPane()
                with Vertical(id="col-center"):
                    yield OutputPane()
                with Vertical(id="col-right"):
                    yield ConversationPane()
                    yield Timeline()
        yield StatusLine()
        yield KeyFooter()

    async def on_resize(self, event: Resize) -> None:
        if event.size == self._laid_out_size:
            # Textual posts the terminal's first size to the screen once more when the app goes
            # idle; laying out and painting every pane again for it cost ~0.1 s of the first frame.
            event.prevent_default()
            return
        self._laid_out_size = event.size
        narrow = event.size.width < NARROW_WIDTH
        if self._narrow is not None and narrow != self._narrow:
            self._narrow = narrow
            await self.recompose()
            self._fill()
            self.set_focus(None)

    async def on_mount(self) -> None:
        if self.mode == LIVE:
            self._start_loop()
        self._load_history()
        if self._start_iteration is not None:
            for k, item in enumerate(self.history):
                if item.number == self._start_iteration:
                    self.index = k
        elif self.history:
            self.index = len(self.history) - 1 if self.mode != REPLAY else 0
        # Awaiting the chat's mount lets the first frame paint it: laying out the screen a second
        # time for messages that arrived after the first paint cost ~0.1 s of start-up.
        await self._fill()

    def _start_loop(self) -> None:
        """Become the session's writer: adopt this app's loop of it (left while it finished a stage),
        or make one; when another writer holds the lock, open read-only and say who writes."""
        writers = getattr(self.app, "writers", None)
        adopted = writers.adopt(self.repo.path) if writers is not None else None
        if adopted is not None:  # the one writer of this session in this app, continued here
            self.adapter = adopted
            adopted.retarget(self)
            self.apply_policy(getattr(self.app, "approval_policy", None))
            return
        try:
            loop = self.loop_factory(self.repo, self.adapter.on_event)
            problem = "the loop is not available here"
        except Exception as error:  # a missing API key, a bad config, another writer: say so, keep it usable
            loop, problem = None, f"the loop could not start ({error})"
        if loop is None:
            self.mode = VIEW
            self.notify(f"{problem[0].upper()}{problem[1:]}: the session opens read-only.", severity="warning")
            return
        self.adapter.attach(loop)
        if writers is not None:
            writers.add(self.repo.path, self.adapter)
        self.apply_policy(getattr(self.app, "approval_policy", None))
        for notice in getattr(loop, "notices", None) or []:  # a stale lock taken over, a repaired journal
            self.notify(notice, severity="warning", timeout=30)

    def on_unmount(self) -> None:
        """Leaving the workbench hands the session's writer lock back (after the stage in flight)."""
        if self.adapter.loop is None:
            return
        writers = getattr(self.app, "writers", None)
        if writers is not None:
            writers.leave(self.repo.path, self.adapter)
        else:
            self.adapter.retarget(None)
            self.adapter.release_when_idle()

    # ------------------------------------------------------------------ filling the panes

    def _load_history(self) -> None:
        self.history = self.repo.history(self.branch)
        self.index = min(self.index, max(0, len(self.history) - 1))

    @property
    def shown(self) -> Any | None:
        return self.history[self.index] if self.history else None

    def _fill(self) -> AwaitMount:
        """Fill every pane from the shown iteration (and, live, from what streamed since).

        Returns the conversation's mount; callers other than the first fill need not await it.
        """
        self.query_one(TaskPane).show(self.repo.task_name, self.repo.task_source)
        item = self.shown
        output = self.query_one(OutputPane)
        chat = self.query_one(ConversationPane)
        if item is not None:
            self.query_one(KernelPane).show(item.kernel_source, f"iter {item.number} ({self.branch})")
            output.show_result(item.eval_result, replace_log=True)
            output.show_profile(item.profile)
            mounted = chat.show(conversation(item.transcript))
        else:
            self.query_one(KernelPane).show("", "no iterations yet")
            output.show_result(None, replace_log=True)
            mounted = chat.show([])
        if self.mode == LIVE and (self._live_chat or self._live_log):
            output.append_build(self._live_log)
            for message in self._live_chat:
                chat.finish_reply(message)
        output.show_chart([(it.number, it.status, it.speedup) for it in self.history])
        self._fill_timeline()
        self._fill_status()
        if item is not None:
            self.app.post_message(IterationShown(self.branch, item.number))
        return mounted

    def _fill_timeline(self) -> None:
        branches: dict[str, list[TimelineItem]] = {}
        names = [self.branch] + [b for b in self.repo.branches() if b != self.branch]
        for name in names:
            branches[name] = [
                TimelineItem(it.number, it.sha, it.phase, it.status, it.speedup)
                for it in self.repo.history(name)
            ]
        best = self.repo.best(self.branch)
        current = NodeRef(self.branch, self.shown.number) if self.shown is not None else None
        self.query_one(Timeline).show(branches, best.sha if best else None, current)

    def _fill_status(self) -> None:
        status = self.query_one(StatusLine)
        upto = self.history[: self.index + 1] if self.mode != LIVE else self.history
        correct = [it.speedup for it in upto if it.correct and it.speedup is not None]
        status.best = max(correct) if correct else None
        status.tokens = sum(it.tokens for it in upto)
        status.set_cost([it.cost_usd for it in upto])
        status.round = self.shown.number if self.shown is not None else 0
        total = len(self.history)
        playing = " ▶" if self._player is not None else ""
        status.mode = f"{self.mode} {self.index + 1 if total else 0}/{total}{playing} · {self.branch}{self._guard_text()}"

    def _guard_text(self) -> str:
        """`` · guard default`` from the shown iteration's eval.json (the policy it was judged under; none
        for results recorded before policies)."""
        result = getattr(self, "_shown_result", None)
        if self.shown is None:
            return ""
        if result is None or result[0] != self.shown.sha:
            try:
                data = self.shown.read_json("eval.json") or {}
            except Exception:
                data = {}
            policy = data.get("guard_policy") or ""  # results from before policies: not shown
            self._shown_result = (self.shown.sha, policy)
            result = self._shown_result
        return f" · guard {result[1]}" if result[1] else ""

    def show_index(self, index: int) -> None:
        if not self.history:
            return
        self.index = max(0, min(len(self.history) - 1, index))
        self._fill()

    # ------------------------------------------------------------------ which actions apply

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in LIVE_ONLY and self.mode != LIVE:
            return False
        if action in BROWSE_ONLY and self.mode == LIVE:
            return False
        if action in ("save_edit", "cancel_edit"):
            return self._editing()
        if action == "back":
            return not self._editing()
        if action == "edit_kernel":
            return not self.adapter.busy and not self._editing()
        if action == "show_approval":
            return self.pending_approval is not None
        return True

    def _editing(self) -> bool:
        """Whether the kernel pane is in edit mode (asked only by the actions it changes: a DOM query
        per binding each time the footer reads the keys added up at start-up)."""
        panes = self.query(KernelPane)  # none for a moment while the screen recomposes (width change)
        return bool(panes) and panes.first().editing

    # ------------------------------------------------------------------ replay

    def action_next(self) -> None:
        self.show_index(self.index + 1)

    def action_previous(self) -> None:
        self.show_index(self.index - 1)

    def action_play(self) -> None:
        if self._player is not None:
            self._player.stop()
            self._player = None
        else:
            if self.index >= len(self.history) - 1:
                self.index = -1
            self._player = self.set_interval(PLAY_INTERVAL_S, self._play_tick)
            self._play_tick()
        self._fill_status()

    def _play_tick(self) -> None:
        if self.index >= len(self.history) - 1:
            if self._player is not None:
                self._player.stop()
                self._player = None
            self._fill_status()
            return
        self.show_index(self.index + 1)

    def action_branch(self) -> None:
        item = self.shown
        if item is None:
            return
        try:
            name = self.repo.branch_from(item.number, branch=self.branch)
        except SessionError as error:
            self.notify(f"cannot branch: {error}", severity="error")
            return
        self.app.post_message(BranchCreated(name, item.number))
        self._fill_timeline()
        continue_live = getattr(self.app, "continue_on_branch", None)
        if not (callable(continue_live) and continue_live(self.repo, name)):
            self.notify(
                f"Branch {name} created at iteration {item.number}; continue it with `cudaforge open`."
            )

    def action_diff(self) -> None:
        if not self.history:
            return
        from tui.screens.dialogs import DiffScreen

        sources = {it.number: it.kernel_source for it in self.history}
        new = self.shown.number
        old = self.history[max(0, self.index - 1)].number
        self.app.push_screen(DiffScreen(sources, old, new))

    def action_toggle_cuda(self) -> None:
        self.query_one(KernelPane).toggle_view()

    def action_focus_timeline(self) -> None:
        if self._narrow:
            self.query_one("#narrow", PaneTabs).active = "pane-timeline"
        self.query_one(Timeline).focus()

    def action_back(self) -> None:
        """Back to the session browser (built now when the app started on this session)."""
        from tui.screens.browser import BrowserScreen

        if any(isinstance(s, BrowserScreen) for s in self.app.screen_stack):
            self.app.pop_screen()
        else:
            self.app.switch_screen(BrowserScreen(getattr(self.app, "sessions_root", self.repo.path.parent)))

    @on(Tree.NodeSelected)
    def _node_selected(self, event: Tree.NodeSelected[NodeRef]) -> None:
        ref = event.node.data
        if ref is None:
            return
        if ref.branch != self.branch:
            self.branch = ref.branch
            self._load_history()
        for k, item in enumerate(self.history):
            if item.number == ref.number:
                self.show_index(k)
                return

    # ------------------------------------------------------------------ live: commands

    def action_step(self) -> None:
        self.running = False
        self.adapter.call("step")

    def action_run(self) -> None:
        self.running = True  # decisions made while running continue the rounds
        self.adapter.call("run")

    def action_pause(self) -> None:
        self.running = False
        self.adapter.call("pause")

    def action_edit_kernel(self) -> None:
        self.query_one(KernelPane).begin_edit()
        self.refresh_bindings()

    def action_save_edit(self) -> None:
        source = self.query_one(KernelPane).end_edit(keep=True)
        self.refresh_bindings()
        if source is not None:
            self._hand_kernel(source)

    def action_cancel_edit(self) -> None:
        self.query_one(KernelPane).end_edit(keep=False)
        self.refresh_bindings()

    def _hand_kernel(self, source: str) -> None:
        self.app.post_message(KernelEdited(source))
        self.adapter.call("edit_kernel", source)

    def action_external_editor(self) -> None:
        """Edit the shown kernel in ``$VISUAL``/``$EDITOR`` with the app suspended, then hand it over."""
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        pane = self.query_one(KernelPane)
        with tempfile.TemporaryDirectory(prefix="cudaforge-edit-") as folder:
            path = Path(folder) / "kernel.py"
            path.write_text(pane.source, encoding="utf-8")
            command = [*shlex.split(editor), str(path)]
            try:
                with self.app.suspend():
                    completed = subprocess.run(command, check=False)
            except SuspendNotSupported:  # headless (tests, --serve): the editor must not need the tty
                completed = subprocess.run(command, check=False, stdin=subprocess.DEVNULL)
            except OSError as error:
                self.notify(f"cannot run {editor}: {error}", severity="error")
                return
            edited = path.read_text(encoding="utf-8")
        if completed.returncode != 0:
            self.notify(f"{editor} exited with {completed.returncode}; kernel unchanged", severity="warning")
        elif edited != pane.source:
            pane.show(edited, f"{pane.label} + human edit")
            self._hand_kernel(edited)

    def action_show_approval(self) -> None:
        if self.pending_approval is not None:
            self._ask_approval(self.pending_approval)

    # ------------------------------------------------------------------ live: events

    @on(EngineEvent)
    def _engine_event(self, message: EngineEvent) -> None:
        event = message.event
        status = self.query_one(StatusLine)
        output = self.query_one(OutputPane)
        if isinstance(event, ev.StageStarted):
            status.start_stage(event.stage, event.round)
            if event.stage in ("evaluate", "build"):
                self._live_log.clear()
                output.clear_build()
        elif isinstance(event, ev.BuildLog):
            self._live_log.append(event.line)
            output.append_build([event.line])
        elif isinstance(event, ev.LLMToken):
            self.query_one(ConversationPane).stream_token(event.role, event.text)
        elif isinstance(event, ev.LLMReply):
            chat = ChatMessage(
                event.role, event.model, event.text, event.input_tokens + event.output_tokens, event.cost_usd
            )
            self._live_chat.append(chat)
            self.query_one(ConversationPane).finish_reply(chat)
            status.tokens += chat.tokens
            status.add_cost(event.cost_usd)
        elif isinstance(event, ev.EvalFinished):
            self._live_result = event.result
            output.show_result(event.result, replace_log=False)
        elif isinstance(event, ev.ProfileFinished):
            self._live_profile = event.profile
            output.show_profile(event.profile)
        elif isinstance(event, ev.AwaitingApproval):
            self.pending_approval = event
            self.refresh_bindings()
            self._ask_approval(event)  # the loop applied the approval policy: it asks only when a human must
        elif isinstance(event, ev.IterationCommitted):
            self._live_chat.clear()
            self._live_log.clear()
            self._load_history()
            self.index = len(self.history) - 1
            self._fill()
            status.stop("committed")
        elif isinstance(event, ev.LoopFinished):
            status.stop(f"finished: {event.reason}")
            self.notify(f"Loop finished ({event.reason}).")
        elif isinstance(event, ev.LoopNotice):
            self.notify(event.message, severity="warning", timeout=10)
            self._live_log.append(f"note: {event.message}")
            output.append_build([f"note: {event.message}"])
        elif isinstance(event, ev.LoopError):
            status.stop(f"error in {event.stage}")
            self.notify(f"{event.stage}: {event.message}", severity="error", timeout=10)
            # the notice fades; the log keeps why the loop stopped (a broken task, a failed call)
            line = f"error in {event.stage}: {event.message}"
            self._live_log.append(line)
            output.append_build([line])

    def apply_policy(self, policy: str | None) -> None:
        """Hand the approval policy to the loop, which alone decides (engine.approval) and records
        who did: the TUI never approves on a policy's behalf."""
        setter = getattr(self.adapter.loop, "set_approval_policy", None)
        if policy and setter is not None:
            setter(policy)

    def _ask_approval(self, event: ev.AwaitingApproval) -> None:
        from tui.screens.approval import ApprovalScreen

        def done(result: Approval | None) -> None:
            if result is not None:
                self._decide(result, by="human")

        evidence = self.approval_evidence(dict(event.suggestion))
        self.app.push_screen(ApprovalScreen(dict(event.suggestion), event.flagged, evidence), done)

    def approval_evidence(self, suggestion: dict[str, Any]) -> Any:
        """What the suggestion is about: the branch's latest iteration, the one the Judge looked at."""
        from tui.evidence import gather_evidence

        if not self.history:
            return None
        item = self.history[-1]
        return gather_evidence(suggestion, item.number, item.eval_result, item.profile, item.kernel_source)

    def _decide(self, approval: Approval, by: str) -> None:
        self.pending_approval = None
        self.refresh_bindings()
        self.app.post_message(ApprovalDecided(approval.decision, approval.suggestion, approval.note, by))
        then = "run" if self.running else None
        if approval.decision == "reject":
            self.adapter.call("reject", approval.note, then=then)
        else:
            self.adapter.call("approve", approval.suggestion, then=then)
