"""The live loop as the workbench drives it: the commands it sends (``s``, ``r``, ``x``, ``+``) and the
engine events and returns that come back, routed to the panes and the status line.

Why a class of its own: the loop speaks through :class:`~tui.live.LoopAdapter` (a call runs in a
thread, its events come back as messages), and what the screen does with each of them (stream the
Coder's tokens while the newest iteration is in view, keep the build log for a later refill, ask for
approval, reload the history on a commit, say whom the loop waits for) is one job, apart from laying
out and filling the panes. The screen (tui/screens/workbench.py) keeps the ``action_*`` methods and the
``@on`` handlers Textual dispatches there, each a one-line delegation.
"""

from __future__ import annotations

from typing import Any

from engine import events as ev
from tui import loop_status
from tui.messages import EngineEvent, LoopReturned
from tui.model import ChatMessage
from tui.widgets.conversation import ConversationPane
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.output_pane import OutputPane
from tui.widgets.status_line import StatusLine
from tui.widgets.task_pane import TaskPane

DEFAULT_MORE_ROUNDS = 3


class LiveLoop:
    """The live loop of one workbench screen: commands out, events and returns in."""

    def __init__(self, screen: Any) -> None:
        """``screen``: the WorkbenchScreen (typed loosely: it imports this module)."""
        self.screen = screen

    # ------------------------------------------------------------------ commands

    def step(self) -> None:
        screen = self.screen
        screen.running = False
        screen.adapter.call("step")
        screen.refresh_bindings()

    def run(self) -> None:
        screen = self.screen
        screen.running = True  # decisions made while running continue the rounds
        screen.adapter.call("run")
        screen.refresh_bindings()

    def pause(self) -> None:
        """``x``: stop an exploration that runs, else pause the loop at the end of its stage."""
        screen = self.screen
        if screen.exploration is not None and screen.exploration.active:
            screen.exploration.stop()
            screen.query_one(StatusLine).update_activity(
                "exploration: stopping once the stage in flight is committed"
            )
            return
        screen.running = False
        screen.adapter.call("pause")
        screen.query_one(StatusLine).update_activity("pausing at the end of this stage")

    def ask_rounds(self) -> None:
        """Ask how many rounds to add to this branch (``+``), then raise the loop's target."""
        from tui.screens.dialogs import PromptScreen

        screen = self.screen

        def add(answer: str | None) -> None:
            if answer is None:
                return
            try:
                more = int(answer.strip() or DEFAULT_MORE_ROUNDS)
                if more < 1:
                    raise ValueError
            except ValueError:
                screen.notify(f"not a number of rounds: {answer!r}", severity="warning")
                return
            self.add_rounds(more)

        screen.app.push_screen(
            PromptScreen(
                f"Rounds to add to branch {screen.branch} (enter for {DEFAULT_MORE_ROUNDS}):",
                str(DEFAULT_MORE_ROUNDS),
                str(DEFAULT_MORE_ROUNDS),
            ),
            add,
        )

    def add_rounds(self, more: int) -> None:
        """Raise the loop's round target by ``more`` (``Loop.add_rounds``); ``r`` then runs them."""
        screen = self.screen
        adder = getattr(screen.adapter.loop, "add_rounds", None)
        if adder is None:
            screen.notify("This loop cannot add rounds.", severity="warning")
            return
        try:
            target = adder(more)
        except Exception as error:
            screen.notify(f"cannot add rounds: {error}", severity="error")
            return
        screen.notify(
            f"{more} round(s) added: branch {screen.branch} now runs to #{target}. r runs them, s steps.",
            timeout=4,
        )
        self.say_waiting()
        screen.refresh_bindings()

    # ------------------------------------------------------------------ what comes back

    def say_waiting(self) -> None:
        """Nothing runs: say whom the loop waits for, and the key that goes on (or that it finished)."""
        screen = self.screen
        text = loop_status.waiting_text(screen.adapter.loop, asked=screen.pending_approval is not None)
        if getattr(screen.adapter.loop, "stage", None) == "done":
            screen.query_one(StatusLine).stop(text)
        else:
            screen.query_one(StatusLine).wait_for_human(text)

    def show_pending_kernel(self) -> None:
        """The round's kernel before it is committed (the seed while it builds, the Coder's reply
        before ``s`` evaluates it), when the loop has one and the newest iteration is on screen."""
        screen = self.screen
        pending = getattr(screen.adapter.loop, "pending", None)
        kernel = getattr(pending, "kernel", None)
        if not screen.following or not isinstance(kernel, str) or not kernel:
            return
        number = getattr(screen.adapter.loop, "next_iteration", "?")
        phase = getattr(pending, "phase", "")
        screen.query_one(KernelPane).show(kernel, f"#{number} {phase} · not committed yet ({screen.branch})")

    def returned(self, message: LoopReturned) -> None:
        """A loop call returned: the gate's step at once, else say why it stopped or whom it waits for."""
        screen = self.screen
        screen.refresh_bindings()
        self.show_pending_kernel()
        loop = screen.adapter.loop
        if message.method == "step" and message.outcome is None and getattr(loop, "stage", None) == "gate":
            # The Judge's step ends at the gate, which takes no time: step it at once, so the
            # suggestion is shown (or the policy approves) without a second s for nothing.
            screen.adapter.call("step")
            return
        if message.outcome in ("finished", "error"):
            return  # LoopFinished / LoopError already said why
        if message.outcome == "paused":
            screen.query_one(StatusLine).stop(loop_status.finished_text("paused"))
            return
        self.say_waiting()

    def event(self, message: EngineEvent) -> None:
        """An engine event, to the panes (when the newest iteration is in view) and the status line."""
        screen = self.screen
        event = message.event
        status = screen.query_one(StatusLine)
        output = screen.query_one(OutputPane)
        following = screen.following
        if isinstance(event, ev.StageStarted):
            if event.detail == "evaluate":  # the evaluator's own stages: same clock, finer words
                status.update_activity(loop_status.running_text("evaluate", event.iteration, event.stage))
            else:
                status.start_stage(loop_status.running_text(event.stage, event.iteration), event.round)
                if event.stage == "evaluate":
                    self.show_pending_kernel()
            if event.stage in ("evaluate", "build"):
                screen._live_log.clear()
                if following:
                    output.clear_build()
        elif isinstance(event, ev.BuildLog):
            screen._live_log.append(event.line)
            if following:
                output.append_build([event.line])
        elif isinstance(event, ev.LLMToken):
            if following:
                screen.query_one(ConversationPane).stream_token(event.role, event.text)
        elif isinstance(event, ev.LLMReply):
            chat = ChatMessage(
                event.role, event.model, event.text, event.input_tokens + event.output_tokens, event.cost_usd
            )
            screen._live_chat.append(chat)
            if following:
                screen.query_one(ConversationPane).finish_reply(chat)
            status.tokens += chat.tokens
            status.add_cost(event.cost_usd)
        elif isinstance(event, ev.EvalFinished):
            screen._live_result = event.result
            if following:
                output.show_result(event.result, replace_log=False)
        elif isinstance(event, ev.ProfileFinished):
            screen._live_profile = event.profile
            if following:
                output.show_profile(event.profile)
        elif isinstance(event, ev.AwaitingApproval):
            screen.pending_approval = event
            screen.refresh_bindings()
            status.wait_for_human(loop_status.waiting_text(screen.adapter.loop, asked=True))
            # the loop applied the approval policy: it asks only when a human must
            screen.approvals.ask(event)
        elif isinstance(event, ev.IterationCommitted):
            self._committed(event, status)
        elif isinstance(event, ev.LoopFinished):
            target = loop_status.target_of(screen.adapter.loop)
            status.stop(loop_status.finished_text(event.reason, target))  # says why, and that + goes on
        elif isinstance(event, ev.LoopNotice):
            if event.message.startswith("weak task:"):
                screen._task_weak = event.message
                screen.query_one(TaskPane).show(
                    screen.repo.task_name, screen.repo.task_source, screen._weak_text(screen.shown)
                )
            screen.notify(event.message, severity="warning", timeout=10)
            screen._live_log.append(f"note: {event.message}")
            output.append_build([f"note: {event.message}"])
        elif isinstance(event, ev.LoopError):
            status.stop(loop_status.error_text(event.stage, event.recoverable))
            screen.notify(f"{event.stage}: {event.message}", severity="error", timeout=8)
            # the notice fades; the log keeps why the loop stopped (a broken task, a failed call)
            line = f"error in {event.stage}: {event.message}"
            screen._live_log.append(line)
            output.append_build([line])

    def _committed(self, event: ev.IterationCommitted, status: StatusLine) -> None:
        """A new iteration: what streamed for it is in the history now, shown as the newest."""
        screen = self.screen
        screen._live_chat.clear()
        screen._live_log.clear()
        screen._rejected.clear()
        screen._load_history()
        screen.index = len(screen.history) - 1
        screen._fill()
        status.stop(f"committed #{event.iteration} {event.phase} · {event.status}")
        status.timing = loop_status.round_timing(
            event.iteration, screen.history[-1] if screen.history else None
        )
