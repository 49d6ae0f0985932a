"""Approval policies: who decides whether the Judge's suggestion goes to the Coder.

``ask`` waits for a human every round (the TUI's default); ``auto`` approves everything (headless
``--auto-approve``); ``ask-if-flagged`` approves on its own unless a guard flagged the kernel the
suggestion is about — the moment a human look is worth its cost.

This module is the one definition: the config validates ``[loop] approval`` against it, the loop
decides with it, and the TUI's palette lists it. It imports nothing heavy, so the TUI can use it
without loading the loop. A decision records who made it: ``human`` or ``policy:<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

ApprovalPolicy = Literal["ask", "auto", "ask-if-flagged"]
POLICIES: tuple[str, ...] = get_args(ApprovalPolicy)
ASK, AUTO, ASK_IF_FLAGGED = POLICIES


HUMAN = "human"


def decided_by_policy(policy: str) -> str:
    """The ``approved_by`` value of a suggestion a policy approved on its own."""
    return f"policy:{check_policy(policy)}"


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"unknown approval policy {policy!r}: use one of {', '.join(POLICIES)}")
    return policy


def needs_human(policy: str, eval_result: Mapping[str, Any] | None) -> bool:
    """True when the loop must wait for a human decision on a suggestion about ``eval_result``."""
    check_policy(policy)
    if policy == ASK:
        return True
    if policy == AUTO:
        return False
    return bool((eval_result or {}).get("flags"))
