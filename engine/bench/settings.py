"""The bench's own settings, kept in ``OUT/bench.json`` so a rerun means the same bench.

A rerun with just ``cudaforge bench TASKS --out DIR`` must give the tasks it has not started yet
the same ``--rounds`` and models as the first run gave the others; sessions already store theirs,
but a task without a session has nothing to go by. Flags given on a rerun win and are stored.
``--explore K`` and its ``--beam W`` are kept the same way, and only once given, so the ``bench.json``
of a bench that never explored looks as it always did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FILENAME = "bench.json"
KEYS = ("rounds", "coder", "judge", "guard", "relax", "refuse")
OPTIONAL_KEYS = ("explore", "beam")  # stored only once set


def stored_settings(out: Path) -> dict[str, Any]:
    """What ``out``'s ``bench.json`` holds (``{}`` when there is none); writes nothing."""
    try:
        stored = json.loads((out / FILENAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def merged_settings(out: Path, flags: dict[str, Any]) -> dict[str, Any]:
    """Stored settings updated with the flags that were given (not None); written back to ``out``."""
    path = out / FILENAME
    stored = stored_settings(out)
    settings = {k: stored.get(k) for k in KEYS}
    settings.update({k: stored[k] for k in OPTIONAL_KEYS if stored.get(k) is not None})
    settings.update({k: v for k, v in flags.items() if k in KEYS + OPTIONAL_KEYS and v is not None})
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(FILENAME + ".tmp")
    tmp.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return settings
