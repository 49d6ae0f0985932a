"""Anti-cheating guards for candidate kernels.

The static part (`check_source`) reads the candidate's source and refuses kernels whose forward does
its work in PyTorch, falls back on errors, hides work from the timer, or tampers with the evaluator.
Rule ids and their meaning: `engine.guard.rules` (its docstring holds the table).
"""

from __future__ import annotations

from engine.guard.findings import Finding, GuardSummary, summarize
from engine.guard.rules import RULES, Rule, validate_relax
from engine.guard.static import check_file, check_source

__all__ = [
    "RULES",
    "Finding",
    "GuardSummary",
    "Rule",
    "check_file",
    "check_source",
    "summarize",
    "validate_relax",
]
