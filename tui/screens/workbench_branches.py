"""New branches from the workbench's shown iteration: ``b`` makes one, ``X`` explores several ideas at once.

Why a class of its own: both write branches (a read-only view hides them) and both move the screen off
the branch it showed. ``b`` live asks the loop itself to move (``Loop.branch_from``) and the screen
follows; elsewhere it writes the branch and lets the app continue it live. ``X`` is a conversation with
an exploration (tui/explore_run.py): the Judge's ideas come back for the chooser, its branches run in
the background, each may wait at its gate (shown one at a time in the approval view: escape leaves it
waiting, ``a`` shows it again, after a decision the next one that waits is shown), and its end brings
``cudaforge explore``'s summary. The screen (tui/screens/workbench.py) keeps the ``action_*`` methods
and the ``@on`` handlers Textual dispatches there, each a one-line delegation, and ``exploration``
itself, which its keys and tests read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sessions.errors import SessionError
from tui.explore_run import ExploreFinished, ExploreIdeas, ExploreLine
from tui.messages import BranchCreated
from tui.screens.workbench_modes import LIVE
from tui.widgets.status_line import StatusLine

if TYPE_CHECKING:  # the approval view is imported when first opened: not needed for the first frame
    from tui.screens.approval import Approval

EXPLORE_WIDTH = 3  # ideas asked of the Judge by ``X``
EXPLORE_ROUNDS = 2  # rounds per branch (the chooser changes it)


class Branching:
    """The branches one workbench screen makes; ``gate_shown``: a branch's gate is in the approval view."""

    def __init__(self, screen: Any) -> None:
        """``screen``: the WorkbenchScreen (typed loosely: it imports this module)."""
        self.screen = screen
        self.gate_shown = False

    # ------------------------------------------------------------------ b: one branch

    def branch(self) -> None:
        """A branch at the shown iteration. Live, the loop itself moves to it (``Loop.branch_from``)
        and this screen follows; elsewhere the app may continue it live (``continue_on_branch``)."""
        screen = self.screen
        item = screen.shown
        if item is None:
            return
        if screen.mode == LIVE and screen.adapter.loop is not None:
            self._branch_live(item.number)
            return
        try:
            name = screen.repo.branch_from(item.number, branch=screen.branch)
        except SessionError as error:
            screen.notify(f"cannot branch: {error}", severity="error")
            return
        screen.app.post_message(BranchCreated(name, item.number))
        screen._fill_timeline()
        continue_live = getattr(screen.app, "continue_on_branch", None)
        if not (callable(continue_live) and continue_live(screen.repo, name)):
            screen.notify(
                f"Branch {name} created at iteration {item.number}; continue it with `cudaforge open`."
            )

    def _branch_live(self, number: int) -> None:
        """The loop moves to a new branch at ``number`` of its own branch; the screen shows that branch."""
        screen = self.screen
        loop = screen.adapter.loop
        assert loop is not None
        if screen.branch != getattr(loop, "branch", screen.branch):  # browsing another branch's nodes
            screen.notify(
                "Branch from the loop's own branch (t, then pick a node on it).", severity="warning"
            )
            return
        try:
            name = loop.branch_from(number) or screen.repo.current_branch
        except Exception as error:  # LoopStateError (a stage runs), SessionError
            screen.notify(f"cannot branch: {error}", severity="error")
            return
        screen.app.post_message(BranchCreated(name, number))
        screen.branch = name
        screen._rejected.clear()
        screen._live_chat.clear()
        screen._live_log.clear()
        screen._load_history()
        screen.index = len(screen.history) - 1
        screen._fill()
        screen.live.say_waiting()
        screen.notify(f"Now on branch {name}, made at #{number}: s steps, r runs, + adds rounds.", timeout=4)

    # ------------------------------------------------------------------ X: an exploration

    def explore(self) -> None:
        """Ask the Judge for ideas about the shown iteration; the chooser shows them once they are in."""
        from tui.explore_run import ExploreRun

        screen = self.screen
        item = screen.shown
        if item is None:
            screen.notify("nothing to explore from: no iteration yet", severity="warning")
            return
        if screen.exploration is not None and screen.exploration.active:
            screen.notify("an exploration is running: x stops it", severity="warning")
            return
        config = getattr(screen.app, "loop_config_for", lambda repo: None)(screen.repo)
        if config is None:
            from engine.config import load_config

            config = load_config()
        screen.exploration = ExploreRun(
            screen, screen.repo, config, item.number, screen.branch, EXPLORE_WIDTH, EXPLORE_ROUNDS,
            keep_lock=screen.mode == LIVE,
        )  # fmt: skip
        screen.notify(
            f"asking the Judge for {EXPLORE_WIDTH} ideas about iteration {item.number} of {screen.branch}"
        )
        screen.exploration.propose()
        screen.refresh_bindings()

    def ideas(self, message: ExploreIdeas) -> None:
        """The Judge's ideas are in: the chooser, each idea with its evidence."""
        from tui.evidence import gather_evidence
        from tui.screens.explore import ExploreChooser

        screen = self.screen
        run = screen.exploration
        if run is None:
            return
        item = next((it for it in screen.history if it.number == run.start_at), screen.shown)
        evidence = [
            gather_evidence(i, item.number, item.eval_result, item.profile, item.kernel_source)
            if item
            else None
            for i in message.ideas
        ]

        def chosen(choice: Any) -> None:
            if choice is None:
                run.cancel()
                screen.notify("nothing explored: X again shows the same ideas")
            else:
                run.start(choice.choices, choice.rounds, choice.gated)
            screen.refresh_bindings()

        screen.app.push_screen(
            ExploreChooser(message.ideas, run.start_at, run.source, run.rounds, evidence), chosen
        )

    def waits(self) -> bool:
        """Whether a branch of the running exploration waits at its gate (``a`` shows it)."""
        run = self.screen.exploration
        return bool(run is not None and run.active and run.awaiting())

    def ask_gate(self) -> None:
        """The first branch waiting at its gate, in the approval view (none, or one shown: nothing to do)."""
        from tui.screens.approval import ApprovalScreen

        screen = self.screen
        run = screen.exploration
        waiting = run.awaiting() if run is not None and run.active else []
        if not waiting or self.gate_shown:
            return
        branch, suggestion = waiting[0]

        def done(result: Approval | None) -> None:
            self.gate_shown = False
            try:
                if result is None:
                    screen.query_one(StatusLine).wait_for_human(f"{branch} waits at its gate: a shows it")
                elif result.decision == "let_go":
                    run.let_go()
                    screen.notify("every branch goes on without asking")
                elif result.decision == "reject":
                    run.reject(branch, result.note)
                else:
                    run.approve(branch, result.suggestion)
            except Exception as error:  # ExploreError: the branch stopped waiting meanwhile (a stop)
                screen.notify(f"explore: {error}", severity="warning")
            screen.refresh_bindings()
            if result is not None:
                self.ask_gate()

        evidence = screen.approval_evidence(suggestion, screen.repo.history(branch))
        self.gate_shown = True
        screen.app.clear_notifications()
        screen.app.push_screen(ApprovalScreen(suggestion, False, evidence, branch=branch), done)

    def line(self, message: ExploreLine) -> None:
        self.screen.query_one(StatusLine).update_activity(f"exploring: {message.text}")

    def finished(self, message: ExploreFinished) -> None:
        """The exploration's summary in a dialog, as ``cudaforge explore`` prints it (issue 46.7)."""
        from tui.explore_summary import headline, summary_text
        from tui.screens.dialogs import SummaryScreen

        screen = self.screen
        screen._fill_timeline()
        screen.query_one(StatusLine).stop()
        if message.error:
            screen.notify(f"explore: {message.error}", severity="error", timeout=10)
        elif message.summary is not None:
            title, text = headline(message.summary), summary_text(message.summary, screen.repo.name)
            screen.app.push_screen(SummaryScreen(title, text))
        screen.refresh_bindings()
