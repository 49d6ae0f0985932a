"""One idea a branch will pursue, as a person chose it at the exploration's gate (ARCHITECTURE.md §2,
"Explore"): the Judge's, the Judge's rewritten, or the person's own. Split from engine.explore.runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Choice:
    """One idea a branch will pursue (``Explorer.choose``): ``idea`` as it will be sent to the Coder, and
    ``suggested``, the Judge's idea it was changed from ({} when the idea is the person's own; None when
    it is the Judge's, unchanged)."""

    idea: dict[str, Any]
    suggested: dict[str, Any] | None = None

    @classmethod
    def edited(cls, original: dict[str, Any], text: str) -> Choice:
        """The Judge's ``original`` idea, rewritten by a person as ``text``."""
        from engine.agents.suggestion import Suggestion

        return cls(
            Suggestion.from_text(str(original.get("mode") or "optimize"), text).to_dict(), dict(original)
        )

    @classmethod
    def own(cls, text: str, mode: str = "optimize") -> Choice:
        """An idea the person adds of their own."""
        from engine.agents.suggestion import Suggestion

        return cls(Suggestion.from_text(mode, text).to_dict(), {})
