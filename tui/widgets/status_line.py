"""The status line: what the loop does or waits for, round, best speedup, tokens, dollars.

Its first field tells the truth about the loop (wording in :mod:`tui.loop_status`): while a
stage runs, what runs and for how long (``⏳ evaluating #3 · build 12s``); while the loop waits,
for whom and the key that goes on (``your turn: press s to run the Judge on #2``); when it has
finished, why and what next. Only a running stage ticks.

Dollars only when every call so far had a price: one call to an unpriced model (a local
OpenAI-compatible server, say) makes the total "cost unknown" — adding it as $0 would understate it.

An 80-column terminal cuts the line from the right, with a closing "…" (never a silent cut); ``i``
shows every field of it in full (tui/screens/workbench_keys.py, ARCHITECTURE.md §8).

The progress indicator is a ticking elapsed-time counter rather than a spinner: it tells the user
the stage is alive without relying on animation, which is off or choppy over slow SSH links.
"""

from __future__ import annotations

import time

from textual.reactive import reactive
from textual.widgets import Static

from tui.model import format_speedup


class StatusLine(Static):
    stage: reactive[str] = reactive("idle")
    round: reactive[int] = reactive(0)
    best: reactive[float | None] = reactive(None)
    versus: reactive[str] = reactive("")  # the best kernel against torch.compile, when measured
    spread: reactive[str] = reactive("")  # the best speedup's interval ("±0.03"), when its timing recorded one
    #: the session's best when another branch holds it ("session 2.10x on side"): both bests, never one moved
    elsewhere: reactive[str] = reactive("")
    tokens: reactive[int] = reactive(0)
    cost: reactive[float] = reactive(0.0)  # the priced calls' sum
    cost_unknown: reactive[bool] = reactive(False)  # True once any call had no price
    mode: reactive[str] = reactive("")
    busy: reactive[bool] = reactive(False)
    waiting: reactive[bool] = reactive(False)  # the loop waits for the human (nothing runs)
    # where the last round's time went ("9.8 s: build 1.8 · check 0.7 …"): last, an 80-column line cuts it first
    timing: reactive[str] = reactive("")

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self._started = time.monotonic()

    def on_mount(self) -> None:
        self.set_interval(1.0, self._tick)
        self._redraw()

    def start_stage(self, stage: str, round_: int | None = None) -> None:
        """A stage began: ``stage`` is the activity shown; the elapsed time starts from now."""
        self._started = time.monotonic()
        self.waiting = False
        self.stage = stage
        self.busy = True
        if round_ is not None:
            self.round = round_

    def update_activity(self, stage: str) -> None:
        """The running stage moved on inside itself (an evaluation's build, check …): same clock."""
        self.waiting = False
        self.stage = stage
        self.busy = True

    def wait_for_human(self, text: str) -> None:
        """Nothing runs; ``text`` says whom the loop waits for and which key goes on."""
        self.busy = False
        self.waiting = True
        self.stage = text

    def stop(self, label: str = "idle") -> None:
        self.busy = False
        self.waiting = False
        self.stage = label

    def snapshot(self) -> dict[str, object]:
        """What the line says now, to carry it over when the screen is laid out anew."""
        return {
            "stage": self.stage,
            "busy": self.busy,
            "waiting": self.waiting,
            "started": self._started,
            "tokens": self.tokens,
            "cost": self.cost,
            "cost_unknown": self.cost_unknown,
            "timing": self.timing,
        }

    def restore(self, state: dict[str, object]) -> None:
        self._started = float(state["started"])  # type: ignore[arg-type]
        for name in ("stage", "busy", "waiting", "tokens", "cost", "cost_unknown", "timing"):
            setattr(self, name, state[name])

    def _tick(self) -> None:
        if self.busy:
            self._redraw()

    def watch_busy(self, busy: bool) -> None:
        self.set_class(busy, "-busy")

    def watch_waiting(self, waiting: bool) -> None:
        self.set_class(waiting, "-waiting")

    def _watch_any(self) -> None:
        if self.is_mounted:
            self._redraw()

    watch_elsewhere = watch_spread = watch_stage = watch_round = watch_best = watch_versus = watch_tokens = watch_cost = watch_mode = _watch_any
    watch_cost_unknown = watch_timing = _watch_any

    def set_cost(self, costs: list[float | None]) -> None:
        """The total of these calls' or iterations' costs; any None makes it unknown."""
        self.cost_unknown = any(c is None for c in costs)
        self.cost = sum(c for c in costs if c is not None)

    def add_cost(self, cost: float | None) -> None:
        """One more call: its price, or None when its model has none."""
        if cost is None:
            self.cost_unknown = True
        else:
            self.cost += cost

    def cost_text(self) -> str:
        return "cost unknown" if self.cost_unknown else f"${self.cost:.4f}"

    def text(self) -> str:
        return " │ ".join(self.parts())

    def full_text(self) -> tuple[str, str]:
        """Every field on its own line (``i``): what a narrow line ends with "…"."""
        return "Status line", "\n".join(self.parts())

    def parts(self) -> list[str]:
        stage = self.stage
        if self.busy:
            stage = f"⏳ {stage} {int(time.monotonic() - self._started)}s"
        elif self.waiting:
            stage = f"your turn: {stage}"
        # what the loop does, then where you are (mode, position, branch), then the figures: an
        # 80-column terminal cuts from the right, so the least needed comes last
        parts = [stage, *([self.mode] if self.mode else [])]
        best = f"best {format_speedup(self.best)}" + (f" {self.spread}" if self.spread and self.best else "")
        best += f" ({self.versus})" if self.versus else ""
        best += f" · {self.elsewhere}" if self.elsewhere else ""
        parts += [f"round {self.round}", best, f"{self.tokens} tok", self.cost_text()]
        if self.timing:
            parts.append(self.timing)
        return parts

    def _redraw(self) -> None:
        self.update(self.text())
