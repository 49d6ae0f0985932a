"""What saving a human kernel edit does in the workbench: the static check, then the loop or the editor.

``cudaforge check``'s verdict (tui/edit_check.py) goes to the Build log; an edit that passes is handed
to the loop at once (a notice says so, with any warnings); one that fails is kept and the person is
asked: hand it over anyway, or back to the editor with the edit as it was. Saving used to hand every
edit over unchecked (issue 46.5; ARCHITECTURE.md §8). Kept out of tui/screens/workbench.py, which
only calls :func:`check_then_hand`.
"""

from __future__ import annotations

from typing import Any

MAX_SHOWN = 3  # problems quoted in the question; the Build log has them all


def check_then_hand(screen: Any, source: str) -> None:
    """Check ``source``, show the result on the workbench ``screen``, then hand it over or ask."""
    from tui.edit_check import check_edit, finding_line
    from tui.screens.dialogs import ConfirmScreen
    from tui.widgets.kernel_pane import KernelPane
    from tui.widgets.output_pane import OutputPane

    options = getattr(getattr(screen.adapter.loop, "options", None), "eval_options", None)
    verdict = check_edit(source, options)
    screen._live_log.extend(verdict.lines())
    screen.query_one(OutputPane).append_build(verdict.lines())
    if verdict.would_build:
        warned = f" · {len(verdict.findings)} warning(s) in the Build log" if verdict.findings else ""
        screen.notify(f"check: {verdict.verdict()}{warned}", timeout=4)
        screen._hand_kernel(source)
        return

    def decide(hand: bool | None) -> None:
        if hand:
            screen._hand_kernel(source)
        else:  # back to the editor, the edit as it was
            screen.action_edit_kernel()
            screen.query_one(KernelPane).text_area.text = source

    problems = [finding_line(f).strip() for f in verdict.problems]
    more = len(problems) - MAX_SHOWN
    shown = problems[:MAX_SHOWN] + ([f"… {more} more in the Build log"] if more > 0 else [])
    question = "\n".join(
        [f"The check says your edit {verdict.verdict()}:", *shown, "Hand it to the loop anyway?"]
    )
    screen.app.push_screen(ConfirmScreen(question, yes="hand it over", no="edit on"), decide)
