"""One EvalResult JSON per kernel under ``OUT``, written atomically: what makes a run resumable.

* ``OUT/checks/<name>.json``: the phase-1 result (build + check, no timing).
* ``OUT/results/<name>.json``: the final result: phase 2's timed one for a correct kernel, or the
  phase-1 verdict for any other.

Each file is an ``EvalResult`` document (``EvalResult.from_json`` reads it) with one extra key,
``evalset``, that says which files produced it (their SHA-256), on which GPU, with what memory
reservation, and how many seconds each phase took. A rerun skips a kernel whose final result is
current (same task and kernel contents, same device), and times one whose check is current but
whose timing never finished, so a killed run loses only the evaluations that were running.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.eval.result import EvalResult
from engine.evalset.pairs import Pair

RESULTS, CHECKS = "results", "checks"


def result_path(out: Path, name: str) -> Path:
    return out / RESULTS / f"{name}.json"


def check_path(out: Path, name: str) -> Path:
    return out / CHECKS / f"{name}.json"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def identity(pair: Pair) -> dict[str, Any]:
    """What a stored result must match to count for this pair."""
    return {
        "task_path": str(pair.task),
        "kernel_path": str(pair.kernel),
        "task_sha256": file_sha256(pair.task),
        "kernel_sha256": file_sha256(pair.kernel),
    }


def write(path: Path, result: EvalResult, meta: dict[str, Any]) -> None:
    """The result and its ``evalset`` record, atomically (a killed run never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = result.to_dict()
    data["evalset"] = {**meta, "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2)
            stream.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(path: Path) -> dict[str, Any] | None:
    """The stored document, or None when there is none (or it is unreadable: then it is redone)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "status" in data else None


def is_current(data: dict[str, Any] | None, ident: dict[str, Any], device: str) -> bool:
    """True when ``data`` was produced from these very files on this device."""
    if not data:
        return False
    meta = data.get("evalset") or {}
    return (
        meta.get("task_sha256") == ident["task_sha256"]
        and meta.get("kernel_sha256") == ident["kernel_sha256"]
        and data.get("device") == device
    )
