"""How guard settings and the own-kernel share read in tables and headers (ARCHITECTURE.md §3, "Guard policy").

Every front end that lists iterations or tasks (``run``'s summary, the bench table, ``sessions``) shows
the guard a result was judged under and the share of device time the candidate's own kernels took;
one wording here keeps them the same.
"""

from __future__ import annotations

from typing import Any

from engine.guard.policy import guard_label


def format_share(share: dict[str, Any] | float | None) -> str:
    """``37%`` for a share record (or a bare fraction), ``-`` when not measured."""
    if isinstance(share, dict):
        share = share.get("share")
    return "-" if share is None else f"{share:.0%}"


def share_of_iteration(item: Any) -> dict[str, Any] | None:
    """The ``kernel_share`` of one session iteration's eval.json (None when absent or unreadable)."""
    try:
        return (item.read_json("eval.json") or {}).get("kernel_share")
    except Exception:  # a table cell: an unreadable record shows as '-', it never stops the listing
        return None


def settings_guard_label(settings: dict[str, Any]) -> str:
    """``guard default · relax …`` from a session.toml ``settings`` table (sessions from before policies
    record none: they ran under today's strict rules)."""
    if not settings:  # nothing committed yet: the root commit records no settings, and nothing was judged
        return "guard: not recorded (no iteration committed)"
    guard = settings.get("guard")
    if not guard:
        return "guard strict (recorded before policies)"
    return guard_label(guard.get("policy", "default"), guard.get("relax", []), guard.get("refuse", []))
