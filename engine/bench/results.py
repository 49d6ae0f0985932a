"""Read a task's outcome back from its session repo (and the runner's status file).

The session is the source of truth, so a bench that was killed and rerun reports every
iteration, whichever run made it. Per task: the best correct kernel of the session's current
branch, the rounds reached (the last iteration number), tokens and cost summed over the
branch's iterations, and minutes = the loop's own stage timings (``loop.json``), so time spent
killed or waiting for a worker is not counted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.batch.statistics import TaskRow
from engine.bench.compile_baseline import compile_speedup, read_baseline, speedup_vs_compile
from engine.bench.tasks import BenchTask
from engine.guard.report import settings_guard_label, share_of_iteration
from sessions.errors import SessionError
from sessions.paths import is_session_dir
from sessions.repo import SessionRepo

DONE, UNFINISHED, ERROR, PENDING = "done", "unfinished", "error", "pending"
# The session's run stopped on cudaforge's own fault (``cudaforge run`` exit 3): redone by the next bench run
HARNESS = "harness_error"
HARNESS_EXIT = 3


def session_dir(out: Path, task: BenchTask) -> Path:
    return out / "sessions" / task.name


def status_file(out: Path, task: BenchTask) -> Path:
    return out / "status" / f"{task.name}.json"


def read_status(out: Path, task: BenchTask) -> dict[str, Any]:
    """What the runner recorded about the task's last attempt (``{}`` when none finished)."""
    try:
        return json.loads(status_file(out, task).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_status(out: Path, task: BenchTask, data: dict[str, Any]) -> None:
    path = status_file(out, task)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def stored_rounds(session: SessionRepo) -> int | None:
    rounds = session.settings().get("settings", {}).get("loop", {}).get("rounds")
    return rounds if isinstance(rounds, int) else None


def best_by_round(history: list) -> tuple[float | None, ...]:
    """Best correct speedup reached by each round 0..last (an iteration's number is its round).

    A round with no iteration (a branch that skipped numbers) carries the best so far forward.
    """
    if not history:
        return ()
    by_number: dict[int, float] = {}
    for item in history:
        if item.correct and item.speedup is not None:
            by_number[item.number] = max(by_number.get(item.number, 0.0), item.speedup)
    curve: list[float | None] = []
    best: float | None = None
    for number in range(history[-1].number + 1):
        if number in by_number:
            best = by_number[number] if best is None else max(best, by_number[number])
        curve.append(best)
    return tuple(curve)


def task_row(out: Path, task: BenchTask, rounds: int | None = None) -> TaskRow:
    """The task's row; ``rounds`` (the bench's ``--rounds``) beats the session's stored rounds."""
    path = session_dir(out, task)
    if not is_session_dir(path):
        code = read_status(out, task).get("exit_code")
        status = HARNESS if code == HARNESS_EXIT else ERROR if code not in (None, 0, 130) else PENDING
        return TaskRow(task.name, status, False, None, None, 0, None, 0.0, session="")
    try:
        with SessionRepo.open(path) as session:
            history = session.history()
            best = session.best()
            target = rounds if rounds is not None else stored_rounds(session)
            settings = session.settings().get("settings", {})
            seconds = 0.0
            for item in history:
                if "loop.json" in item.files():
                    seconds += sum(item.read_json("loop.json").get("stage_seconds", {}).values())
    except SessionError:
        return TaskRow(task.name, ERROR, False, None, None, 0, None, 0.0, session=str(path))
    reached = history[-1].number if history else None
    exit_code = read_status(out, task).get("exit_code")
    if reached is not None and target is not None and reached >= target:
        status = DONE
    elif exit_code == HARNESS_EXIT:
        status = HARNESS
    elif exit_code not in (None, 0, 130):
        status = ERROR
    else:
        status = UNFINISHED
    costs = [it.cost_usd for it in history]
    baseline = read_baseline(out, task)
    best_speedup = best.speedup if best is not None else None
    return TaskRow(
        task=task.name,
        status=status,
        correct=best is not None,
        best_speedup=best_speedup,
        rounds=reached,
        tokens=sum(it.tokens for it in history),
        cost_usd=None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 6),
        minutes=round(seconds / 60.0, 4),
        device=str(settings.get("eval", {}).get("device", "cpu")),
        session=str(path),
        compile_speedup=compile_speedup(baseline),
        speedup_vs_compile=speedup_vs_compile(best_speedup, baseline),
        best_by_round=best_by_round(history),
        guard=settings_guard_label(settings),
        best_share=_share(share_of_iteration(best)) if best is not None else None,
        best_shapes=_shapes(best),
        **_review(best),
    )


def _shapes(best: Any) -> str:
    """``2/3`` from the best iteration's eval.json (``engine.eval.shapes.cell``)."""
    from engine.eval.shapes import cell as shapes_cell

    if best is None:
        return ""
    try:
        return shapes_cell((best.read_json("eval.json") or {}).get("shapes"))
    except Exception:  # noqa: BLE001 - a table cell: an unreadable record shows as '-'
        return ""


def _review(best: Any) -> dict[str, bool]:
    """Whether the best kernel carries a review flag, and whether it was timed below the hardware floor."""
    try:
        data = best.read_json("eval.json") if best is not None else {}
    except Exception:  # a table cell: an unreadable record counts as unflagged, it never stops the listing
        data = {}
    floor = data.get("hardware_floor") or {}
    return {"best_flagged": bool(data.get("flags")), "best_implausible": floor.get("implausible") is True}


def _share(record: dict | None) -> float | None:
    return None if not record else record.get("share")
