"""The workbench screen: task, kernel, output, conversation, timeline and status, in three modes.

* ``replay`` — read-only stepping through a recorded branch (``n``/``p``, space plays);
* ``live`` — a loop (via :class:`~tui.live.LoopAdapter`) drives the panes through events; ``n``/``p``
  browse the branch's iterations meanwhile, and the next commit shows the newest again;
* ``view`` — a session opened when no loop is available: browse like replay, nothing runs.

The screen lays the panes out, fills them from the shown iteration, keeps the status line and moves
along the shown branch. Every other job is a small controller it holds, one module each, reached
through one-line ``action_*`` and ``@on`` methods here, since Textual dispatches those on the screen:

* ``live`` (tui/screens/workbench_loop.py) — ``s``/``r``/``x``/``+`` to the loop, its events back;
* ``edits`` (tui/screens/workbench_edit.py) — the kernel edited, checked and handed to the loop;
* ``approvals`` (tui/screens/workbench_approval.py) — the policy, the approval view, the decision;
* ``branching`` (tui/screens/workbench_branches.py) — ``b`` and ``X``: new branches, explorations;
* ``browsing`` (tui/screens/workbench_browse.py) — a timeline node on another branch, the diff dialog;
* ``availability`` (tui/screens/workbench_availability.py) — which keys apply now;
* ``hold`` (tui/screens/workbench_session.py) — the writer's role, taken live and handed back on leaving;
* the keys of one pane (``1``–``5``, ``i``) are a base class: tui/screens/workbench_keys.py.

The controllers share the screen's state (history, index, the adapter, what streamed since the last
commit) through the screen; none imports this module (the modes are tui/screens/workbench_modes.py).

Below ``NARROW_WIDTH`` columns the panes become tabs (80×24 over SSH stays usable); the screen
recomposes when the width crosses it and refills the panes from what it holds, so nothing is lost.
"""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.geometry import Size
from textual.timer import Timer
from textual.widget import AwaitMount
from textual.widgets import Tree

from engine import events as ev
from engine.eval.baselines import against_text, compile_ratio
from sessions import ranking
from tui.explore_run import ExploreCommitted, ExploreFinished, ExploreGate, ExploreIdeas, ExploreLine
from tui.live import LoopAdapter, LoopFactory, default_loop_factory
from tui.messages import EngineEvent, IterationShown, LoopReturned
from tui.model import ChatMessage, conversation, exploration_notes, format_speedup
from tui.screens.workbench_approval import Approvals
from tui.screens.workbench_availability import KeyAvailability
from tui.screens.workbench_branches import Branching
from tui.screens.workbench_browse import Browsing
from tui.screens.workbench_edit import KernelEdits
from tui.screens.workbench_keys import WorkbenchKeys
from tui.screens.workbench_loop import LiveLoop
from tui.screens.workbench_modes import LIVE, REPLAY
from tui.screens.workbench_session import SessionHold
from tui.widgets.conversation import ConversationPane
from tui.widgets.footer import KeyFooter
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.output_pane import OutputPane
from tui.widgets.status_line import StatusLine
from tui.widgets.tabs import Pane, PaneTabs
from tui.widgets.task_pane import TaskPane
from tui.widgets.timeline import NodeRef, Timeline, TimelineItem

NARROW_WIDTH = 110
PLAY_INTERVAL_S = 1.0
NARROW_PANES = ("pane-kernel", "pane-output", "pane-chat", "pane-task", "pane-timeline")


class WorkbenchScreen(WorkbenchKeys):  # 1–5 (output tabs) and i (full text): tui/screens/workbench_keys.py
    CSS_PATH = "../styles/workbench.tcss"

    AUTO_FOCUS = ""  # nothing focused: keys (arrows too) go to the screen first; Tab moves into a pane

    BINDINGS = [
        # first: while editing they are the keys that apply, and the footer shows them first
        Binding("ctrl+s", "save_edit", "Save edit", id="workbench.save-edit"),
        Binding("escape", "cancel_edit", "Cancel edit", id="workbench.cancel-edit"),
        Binding("s", "step", "Step one stage", id="workbench.step"),
        Binding("r", "run", "Run rounds", id="workbench.run"),
        Binding("plus", "add_rounds", "Add rounds", id="workbench.add-rounds"),
        Binding("x", "pause", "Pause loop", id="workbench.pause"),
        Binding("a", "show_approval", "Pending approval", id="workbench.approval"),
        Binding("e", "edit_kernel", "Edit kernel", id="workbench.edit"),
        Binding("n,right", "next", "Next iteration", id="workbench.next"),
        Binding("p,left", "previous", "Previous iteration", id="workbench.previous"),
        Binding("space", "play", "Play/pause replay", id="workbench.play"),
        Binding("b", "branch", "Branch here", id="workbench.branch"),
        Binding(
            "X", "explore", "Explore ideas from here", id="workbench.explore", show=False
        ),  # in help and palette
        Binding("d", "diff", "Diff iterations", id="workbench.diff"),
        Binding("c", "toggle_cuda", "Python/CUDA view", id="workbench.toggle-cuda"),
        Binding("ctrl+e", "external_editor", "Edit in $EDITOR", id="workbench.editor"),
        Binding("t", "focus_timeline", "Timeline", id="workbench.timeline"),
        Binding("left_square_bracket", "pane(-1)", "Previous pane", id="workbench.pane-previous"),
        Binding("right_square_bracket", "pane(1)", "Next pane", id="workbench.pane-next"),
        Binding("escape", "back", "Back to sessions", id="workbench.back", show=False),
    ]

    def __init__(
        self,
        repo: Any,
        mode: str = REPLAY,
        branch: str | None = None,
        loop_factory: LoopFactory | None = None,
        iteration: int | None = None,
        owns_repo: bool = False,
    ) -> None:
        """``owns_repo``: this screen opened ``repo`` (the browser did) and closes it when it leaves."""
        super().__init__()
        self.repo = repo
        self.owns_repo = owns_repo
        self.mode = mode
        self.branch = branch or repo.current_branch
        self.loop_factory = loop_factory or default_loop_factory
        self.running = False  # True after `r`: an approval or rejection continues the rounds
        self.adapter = LoopAdapter(self)
        self.exploration: Any = None  # tui.explore_run.ExploreRun while one is asked for or runs
        self.history: list[Any] = []
        self._compiled: dict[str, float] = {}  # torch.compile on the chart's scale (_compile_ratios)
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
        self._rejected: list[str] = []  # notes of the suggestions rejected in the round in progress
        self._task_weak = ""  # the task check's "weak task: …" notice, until an evaluation records its own
        self.browsing = Browsing(self)  # a timeline node, the diff dialog: across the branches
        self.branching = Branching(self)  # b and X: new branches from the shown iteration
        self.live = LiveLoop(self)  # commands to the loop, its events and returns to the panes
        self.edits = KernelEdits(self)  # human edits of the kernel, checked, then handed to the loop
        self.approvals = Approvals(self)  # the approval gate: policy, view, decision
        self.availability = KeyAvailability(self)  # which keys apply now (check_action)
        self.hold = SessionHold(self)  # the writer's role: taken on mount (live), handed back on leaving

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
            # The kernel gets a full-height column; output and conversation share the middle one,
            # so both are as wide as the kernel (chat code and compiler errors need the columns);
            # the task and the timeline, read at a glance, sit on the right.
            with Horizontal(id="wide"):
                with Vertical(id="col-left"):
                    yield KernelPane()
                with Vertical(id="col-center"):
                    yield OutputPane()
                    yield ConversationPane()
                with Vertical(id="col-right"):
                    yield TaskPane()
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
            status = self.query_one(StatusLine).snapshot()  # what runs or waits: not in the repo
            pane = self.query_one(KernelPane)
            edited = pane.text_area.text if pane.editing else None
            await self.recompose()
            self._fill()
            self.query_one(StatusLine).restore(status)
            self.set_focus(None)
            if edited is not None:  # an edit in progress survives the new layout
                self.action_edit_kernel()
                self.query_one(KernelPane).text_area.text = edited

    async def on_mount(self) -> None:
        if self.mode == LIVE:
            self.hold.start_loop()
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
        if self.adapter.loop is not None:
            self.live.say_waiting()

    # ------------------------------------------------------------------ filling the panes

    def _load_history(self) -> None:
        self.history = self.repo.history(self.branch)
        self.index = min(self.index, max(0, len(self.history) - 1))
        self._compiled = self._compile_ratios()

    def _compile_ratios(self) -> dict[str, float]:
        """Where torch.compile sits on the chart's scale (eager ÷ compiled, per mode), from the branch's
        latest correct iteration that measured it: read once per history, not on every step."""
        for item in reversed(self.history):
            baselines = item.eval_result.get("baselines") if item.correct else None
            if baselines:
                ratios = {mode: compile_ratio(b) for mode, b in baselines.items()}
                return {mode: r for mode, r in ratios.items() if r is not None}
        return {}

    @property
    def shown(self) -> Any | None:
        return self.history[self.index] if self.history else None

    @property
    def following(self) -> bool:
        """Live and showing the branch's newest iteration: what streams in belongs on screen."""
        return self.mode == LIVE and self.index >= len(self.history) - 1

    def _weak_text(self, item: Any | None) -> str:
        """What the task check or the shown iteration's evaluation found weak about the task."""
        from engine.eval.degenerate import describe_weak

        weak = ((item.eval_result if item is not None else None) or {}).get("weak_outputs")
        return describe_weak(weak) if weak else self._task_weak

    def _fill(self) -> AwaitMount:
        """Fill every pane from the shown iteration (and, live, from what streamed since).

        Returns the conversation's mount; callers other than the first fill need not await it.
        """
        item = self.shown
        self.query_one(TaskPane).show(self.repo.task_name, self.repo.task_source, self._weak_text(item))
        output = self.query_one(OutputPane)
        chat = self.query_one(ConversationPane)
        if item is not None:
            self.query_one(KernelPane).show(item.kernel_source, f"iter {item.number} ({self.branch})")
            output.show_result(item.eval_result, replace_log=True)
            output.show_profile(item.profile)
            mounted = chat.show(conversation(item.transcript))
        else:
            label = "no iterations yet" + (" · the seed is next" if self.mode == LIVE else "")
            self.query_one(KernelPane).show("", label)
            output.show_result(None, replace_log=True)
            mounted = chat.show([])
        if self.following and (self._live_chat or self._live_log):
            output.append_build(self._live_log)
            for message in self._live_chat:
                chat.finish_reply(message)
        others = {
            name: [(it.number, it.status, it.speedup) for it in self.repo.history(name)]
            for name in self.repo.branches()
            if name != self.branch
        }
        output.show_chart([(it.number, it.status, it.speedup) for it in self.history], others, self._compiled)
        self._fill_timeline()
        self._fill_status()
        if item is not None:
            self.app.post_message(IterationShown(self.branch, item.number))
        return mounted

    def _timeline_items(self) -> dict[str, list[TimelineItem]]:
        """Every branch's iterations as the timeline shows them."""
        return {
            name: [
                TimelineItem(it.number, it.sha, it.phase, it.status, it.speedup, it.cost_usd)
                for it in self.repo.history(name)
            ]
            for name in self.repo.branches()
        }

    def _fill_timeline(self) -> None:
        branches = self._timeline_items()
        notes = exploration_notes(self.repo.path, branches)
        best = self.repo.best(self.branch)
        current = NodeRef(self.branch, self.shown.number) if self.shown is not None else None
        self.query_one(Timeline).show(branches, best.sha if best else None, current, self.branch, notes)

    def _session_best_elsewhere(self) -> str:
        """``session 2.10x on side`` when the session's best (every branch, sessions.ranking) is not on
        the shown branch; "" when it is."""
        found = self.repo.session_best()
        if found is None or any(it.sha == found[0].sha for it in self.history):
            return ""
        return f"session {format_speedup(found[0].speedup)} on {found[1]}"

    def _fill_status(self) -> None:
        status = self.query_one(StatusLine)
        upto = self.history[: self.index + 1] if self.mode != LIVE else self.history
        correct = [self.repo.measured(self.branch, it) for it in upto if it.correct and it.speedup is not None]
        leader = ranking.leader(correct)  # the timeline's ★ by the same rule, up to the shown iteration
        best = next(it for it in upto if it.sha == leader.sha) if leader is not None else None
        status.best = best.speedup if best else None
        status.spread = ranking.label(leader).partition(" ")[2] if leader is not None else ""
        status.versus = against_text(best.speedup, best.eval_result.get("baselines")) if best else ""
        status.elsewhere = self._session_best_elsewhere()
        status.tokens = sum(it.tokens for it in upto)
        status.set_cost([it.cost_usd for it in upto])
        status.round = self.shown.number if self.shown is not None else 0
        total = len(self.history)
        playing = " ▶" if self._player is not None else ""
        shown = self.index + 1 if total else 0
        status.mode = f"{self.mode} {shown}/{total}{playing} · {self.branch}{self._guard_text()}"
        if self.mode != LIVE:  # nothing runs here: say what this screen is and how to move
            status.stop(self._browse_text())

    def _browse_text(self) -> str:
        """The status line's first field where no loop runs (first: it is what 80 columns show)."""
        if getattr(self.app, "notice", None):
            return "scripted demo · n/p step, space plays"
        if self.mode == REPLAY:
            return "n/p step, space plays"
        return "read-only, no loop · n/p browse"

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

    # ------------------------------------------------------------------ keys (workbench_availability.py)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Shown, dimmed (None) or hidden (False), as KeyAvailability's rules say."""
        return self.availability.check(action)

    # ------------------------------------------------------------------ browsing

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

    def action_toggle_cuda(self) -> None:
        self.query_one(KernelPane).toggle_view()

    def action_focus_timeline(self) -> None:
        if self._narrow:
            self.query_one("#narrow", PaneTabs).active = "pane-timeline"
        self.query_one(Timeline).focus()

    def action_pane(self, step: int) -> None:
        """``[``/``]``: the previous or next pane of a narrow terminal's tabs."""
        tabs = self.query_one("#narrow", PaneTabs)
        here = NARROW_PANES.index(tabs.active) if tabs.active in NARROW_PANES else 0
        tabs.active = NARROW_PANES[(here + step) % len(NARROW_PANES)]
        self.set_focus(None)

    # ------------------------------------------------------------------ branches (workbench_browse.py)

    def action_diff(self) -> None:
        self.browsing.diff()

    @on(Tree.NodeSelected)
    def _node_selected(self, event: Tree.NodeSelected[NodeRef]) -> None:
        self.browsing.node_selected(event)

    # ------------------------------------------------------------------ the live loop (workbench_loop.py)

    def action_step(self) -> None:
        self.live.step()

    def action_run(self) -> None:
        self.live.run()

    def action_pause(self) -> None:
        self.live.pause()

    def action_add_rounds(self) -> None:
        self.live.ask_rounds()

    def add_rounds(self, more: int) -> None:
        """Raise the loop's round target by ``more`` (``Loop.add_rounds``); ``r`` then runs them."""
        self.live.add_rounds(more)

    @on(LoopReturned)
    def _loop_returned(self, message: LoopReturned) -> None:
        self.live.returned(message)

    @on(EngineEvent)
    def _engine_event(self, message: EngineEvent) -> None:
        self.live.event(message)

    # ------------------------------------------------------------------ editing (workbench_edit.py)

    def action_edit_kernel(self) -> None:
        self.edits.begin()

    def action_save_edit(self) -> None:
        self.edits.save()

    def action_cancel_edit(self) -> None:
        self.edits.cancel()

    def action_external_editor(self) -> None:
        self.edits.external_editor()

    # ------------------------------------------------------------------ approval (workbench_approval.py)

    def action_show_approval(self) -> None:
        """``a``: an exploration branch waiting at its gate first, else the loop's own suggestion."""
        if self.branching.waits():
            self.branching.ask_gate()
        elif self.pending_approval is not None:
            self.approvals.ask(self.pending_approval)

    def apply_policy(self, policy: str | None) -> None:
        """Hand the approval policy to the loop, which alone decides (the app calls this)."""
        self.approvals.apply_policy(policy)

    def rejected_notes(self) -> list[str]:
        return self.approvals.rejected_notes()

    def approval_evidence(self, suggestion: dict[str, Any], history: list[Any] | None = None) -> Any:
        return self.approvals.evidence(suggestion, history)

    # ------------------------------------------------------------------ branching (workbench_branches.py)

    def action_branch(self) -> None:
        self.branching.branch()

    def action_explore(self) -> None:
        self.branching.explore()

    @on(ExploreIdeas)
    def _explore_ideas(self, message: ExploreIdeas) -> None:
        self.branching.ideas(message)

    @on(ExploreGate)
    def _explore_gate(self, message: ExploreGate) -> None:
        self.branching.ask_gate()
        self.refresh_bindings()

    @on(ExploreLine)
    def _explore_line(self, message: ExploreLine) -> None:
        self.branching.line(message)

    @on(ExploreCommitted)
    def _explore_committed(self) -> None:
        self._fill_timeline()

    @on(ExploreFinished)
    def _explore_finished(self, message: ExploreFinished) -> None:
        self.branching.finished(message)

    # ------------------------------------------------------------------ leaving (workbench_session.py)

    def action_back(self) -> None:
        self.hold.back()

    def release_session(self) -> None:
        """Drop the loop and give up the writer lock, now or once the stage in flight has ended."""
        self.hold.release()

    def on_unmount(self) -> None:
        self.hold.release()
