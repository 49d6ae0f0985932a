"""Textual messages the workbench posts; tests record them with ``run_test(message_hook=...)``.

Engine events cross from the loop's thread as :class:`EngineEvent` (``post_message`` is
thread-safe); everything the human decides is a message too, posted to the app (once, no
bubbling), so a test can assert on exactly what reached the loop.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from engine.events import Event


class EngineEvent(Message):
    """One ``engine.events`` dataclass, delivered on the UI thread."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class LoopCommand(Message):
    """A call the workbench made on the loop (``step``, ``run``, ``pause``, ``approve`` …)."""

    def __init__(self, method: str, argument: Any = None) -> None:
        super().__init__()
        self.method = method
        self.argument = argument


class LoopReturned(Message):
    """A blocking loop call (``step``, ``run``, a decision followed by ``run`` …) returned: nothing
    runs now. ``outcome`` is what it returned (``awaiting``, ``finished``, ``paused``, ``error``),
    None after a ``step`` that simply moved on one stage."""

    def __init__(self, method: str, outcome: str | None) -> None:
        super().__init__()
        self.method = method
        self.outcome = outcome


class IterationShown(Message):
    """The panes now show this iteration of this branch."""

    def __init__(self, branch: str, number: int) -> None:
        super().__init__()
        self.branch = branch
        self.number = number


class ApprovalDecided(Message):
    """The human (or the policy) answered an ``AwaitingApproval``: approve, edit or reject."""

    def __init__(self, decision: str, suggestion: dict[str, Any], note: str = "", by: str = "human") -> None:
        super().__init__()
        self.decision = decision
        self.suggestion = suggestion
        self.note = note
        self.by = by


class BranchCreated(Message):
    """A branch was made at an iteration; ``continue_live`` is the hook for resuming the loop on it."""

    def __init__(self, branch: str, iteration: int) -> None:
        super().__init__()
        self.branch = branch
        self.iteration = iteration


class KernelEdited(Message):
    """The human finished editing the kernel; the source goes to ``loop.edit_kernel``."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source


class SettingChanged(Message):
    """Theme or approval policy changed (and was remembered)."""

    def __init__(self, name: str, value: str) -> None:
        super().__init__()
        self.name = name
        self.value = value
