"""The check a human edit gets on save (ctrl+s, or back from ``$EDITOR``), before it goes to the loop.

It is ``cudaforge check``'s: the static guard alone, with no build and no GPU
(``engine.eval.evaluate.static_findings``, classified as ``engine.cli.guard.check_files`` does), under
the loop's own guard settings and device. Saving used to hand the edit over unchecked, so a typo or a
refused construct cost a whole evaluation round to learn about. The verdict and each finding are
lines for the output pane; a failing one is shown to the person, who decides whether the edit goes to
the loop anyway or is edited on, and the edit is never dropped (ARCHITECTURE.md §4, §8; issue 46.5).
No Textual here: the workbench shows the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.guard.rules import LEFT_TO_BUILD


@dataclass(frozen=True)
class EditCheck:
    """The static check's verdict on an edited kernel."""

    device: str
    label: str  # the guard settings, e.g. ``guard default``
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def problems(self) -> list[dict[str, Any]]:
        """Findings that stop the evaluation: a refusal, or a kernel that does not parse / has no ModelNew."""
        return [f for f in self.findings if f["severity"] == "refuse" and not f["relaxed"]]

    @property
    def would_build(self) -> bool:
        return not self.problems

    def verdict(self) -> str:
        if any(f["rule"] not in LEFT_TO_BUILD for f in self.problems):
            return "REFUSED"
        if self.problems:
            return "would NOT build (eval reports a compile error)"
        return "would build"

    def lines(self) -> list[str]:
        """``check: edited kernel (guard default, cpu): REFUSED`` and a line per finding, as the CLI prints."""
        head = f"check: edited kernel ({self.label}, {self.device}): {self.verdict()}"
        return [head, *(finding_line(f) for f in self.findings)]


def finding_line(finding: dict[str, Any]) -> str:
    tag = f"{finding['severity']}{', relaxed' if finding['relaxed'] else ''}"
    return f"  line {finding['line']}: [{finding['rule']}] ({tag}) {finding['message']}"


def check_edit(source: str, eval_options: Any = None) -> EditCheck:
    """The static check of ``source`` under ``eval_options``: the loop's, whose device was resolved and
    whose guard settings were made when the loop was (engine.loop.factory), read as they are. Without a
    loop, the default guard settings on the device this machine would pick."""
    from engine.eval.evaluate import static_findings
    from engine.eval.options import EvalOptions, resolve_device

    options = eval_options if eval_options is not None else EvalOptions(device=resolve_device("auto"))
    return EditCheck(options.device, options.guard.label(), static_findings(source, options.device, options.guard))
