"""The workbench's side of the approval gate: the policy handed to the loop, the suggestion shown in the
approval view with its evidence, and the decision sent back.

Why a class of its own: the loop alone decides under a policy (engine.approval); when it asks a human,
the view needs the evidence, this round's rejected notes and a note typed and left undecided (kept for
``a``), and the decision must reach the loop in order (``approve``/``reject``, then ``run`` when ``r`` was
running the rounds). The screen (tui/screens/workbench.py) keeps ``apply_policy``, ``approval_evidence``
and ``rejected_notes`` as one-line delegations: the app, the explore gate and tests call them there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine import events as ev
from tui.messages import ApprovalDecided

if TYPE_CHECKING:  # the approval view is imported when first opened: not needed for the first frame
    from tui.screens.approval import Approval


class Approvals:
    """The approval gate of one workbench screen."""

    def __init__(self, screen: Any) -> None:
        """``screen``: the WorkbenchScreen (typed loosely: it imports this module)."""
        self.screen = screen
        self._note_draft: tuple[dict[str, Any], str] | None = None  # (suggestion, note) left undecided

    def apply_policy(self, policy: str | None) -> None:
        """Hand the approval policy to the loop, which alone decides (engine.approval) and records
        who did: the TUI never approves on a policy's behalf."""
        setter = getattr(self.screen.adapter.loop, "set_approval_policy", None)
        if policy and setter is not None:
            setter(policy)

    def ask(self, event: ev.AwaitingApproval) -> None:
        """The suggestion the loop waits on, in the approval view (a note left there is offered again)."""
        from tui.screens.approval import ApprovalScreen

        screen = self.screen
        suggestion = dict(event.suggestion)
        draft = self._note_draft[1] if self._note_draft and self._note_draft[0] == suggestion else ""

        def done(result: Approval | None) -> None:
            self._note_draft = None if result is not None else (suggestion, view.draft_note)
            if result is not None:
                self.decide(result, by="human")
            else:
                screen.live.say_waiting()

        evidence = self.evidence(suggestion)
        screen.app.clear_notifications()  # an older notice must not sit over the decision
        view = ApprovalScreen(suggestion, event.flagged, evidence, rejected=self.rejected_notes(), note=draft)
        screen.app.push_screen(view, done)

    def rejected_notes(self) -> list[str]:
        """The notes of the suggestions rejected in this round (the loop's own record when it has one)."""
        pending = getattr(self.screen.adapter.loop, "pending", None)
        recorded = getattr(pending, "rejections", None)
        if isinstance(recorded, list):
            return [str(r.get("note", "")) for r in recorded if isinstance(r, dict)]
        return list(self.screen._rejected)

    def evidence(self, suggestion: dict[str, Any], history: list[Any] | None = None) -> Any:
        """What the suggestion is about: the branch's latest iteration, the one the Judge looked at
        (``history``: another branch's, e.g. an exploration branch waiting at its gate)."""
        from tui.evidence import gather_evidence

        history = self.screen.history if history is None else history
        if not history:
            return None
        item = history[-1]
        return gather_evidence(suggestion, item.number, item.eval_result, item.profile, item.kernel_source)

    def decide(self, approval: Approval, by: str) -> None:
        """Send the decision to the loop; while ``r`` runs the rounds, the loop runs on after it."""
        screen = self.screen
        screen.pending_approval = None
        screen.refresh_bindings()
        screen.app.post_message(ApprovalDecided(approval.decision, approval.suggestion, approval.note, by))
        then = "run" if screen.running else None
        if approval.decision == "reject":
            screen._rejected.append(approval.note)
            screen.adapter.call("reject", approval.note, then=then)
        else:
            screen.adapter.call("approve", approval.suggestion, then=then)
