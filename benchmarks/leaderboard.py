"""Where a KernelBenchLeaderboard solution's task is: one mapping for every corpus script.

``raw_data.json`` numbers problems from 0 (``problem_id``), while the task files are named by
KernelBench's own 1-based numbers (``problems/l{L}_p{N}.py``): solution ``problem_id`` 15 at level 2
is ``l2_p16.py`` (ConvTranspose2d + Mish + add + Hardtanh + scale). Pairing ``p{problem_id}`` gives
every kernel its neighbour's task: constructors and shapes that do not match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def problem_number(entry: dict[str, Any]) -> int:
    """KernelBench's 1-based problem number of a raw_data.json entry."""
    return int(entry["problem_id"]) + 1


def problem_file(assets: Path, entry: dict[str, Any]) -> Path:
    return assets / "problems" / f"l{entry['level']}_p{problem_number(entry)}.py"
