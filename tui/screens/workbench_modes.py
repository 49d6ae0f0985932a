"""The workbench's three modes (``replay``, ``live``, ``view``; tui/screens/workbench.py says what each is).

A module of their own so that the screen's controllers (``tui/screens/workbench_*.py``) can name them
without importing the screen, which imports the controllers: that would be an import cycle.
"""

from __future__ import annotations

REPLAY, LIVE, VIEW = "replay", "live", "view"
