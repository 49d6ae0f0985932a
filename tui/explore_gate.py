"""An exploration branch waiting at its gate, shown in the workbench's approval view (``X`` then ``s``).

One branch at a time: escape leaves it waiting (``a`` shows it again), and after a decision the next
one that waits is shown. The decision goes to the exploration (tui/explore_run.py): approve, reject
with the note, or let every branch go on unasked (ARCHITECTURE.md §2 "Explore", §8). Kept out of
tui/screens/workbench.py, which calls :func:`ask_gate`.
"""

from __future__ import annotations

from typing import Any


def ask_gate(screen: Any) -> None:
    """Show the first branch waiting at its gate on the workbench ``screen`` (none: nothing to do)."""
    from tui.screens.approval import Approval, ApprovalScreen
    from tui.widgets.status_line import StatusLine

    run = screen.exploration
    waiting = run.awaiting() if run is not None and run.active else []
    if not waiting or screen._gate_shown:
        return
    branch, suggestion = waiting[0]

    def done(result: Approval | None) -> None:
        screen._gate_shown = False
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
            ask_gate(screen)

    evidence = screen.approval_evidence(suggestion, screen.repo.history(branch))
    screen._gate_shown = True
    screen.app.clear_notifications()
    screen.app.push_screen(ApprovalScreen(suggestion, False, evidence, branch=branch), done)
