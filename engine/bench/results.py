"""Read a task's outcome back from its session repo (and the runner's status file).

The session is the source of truth, so a bench that was killed and rerun reports every
iteration, whichever run made it. Per task: the best correct kernel of the session's current
branch, the rounds reached (the last iteration number), tokens and cost summed over the
branch's iterations, and minutes = the loop's own stage timings (``loop.json``), so time spent
killed or waiting for a worker is not counted.

With ``bench --explore K`` the session is a seed (iteration 0 on ``main``) and an exploration from it
(``explore/0-1`` … ``explore/0-K``). Then the best is the best correct iteration on *any* branch, with
the branch it is on; every iteration counts once in the tokens, cost and minutes, whichever branches
share it; and the task is done when the exploration's plan says every branch ran its rounds (or the
beam cut it) and its summary (``OUT/explore/<task>.json``) was written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.batch.statistics import TaskRow
from engine.bench.compile_baseline import compile_speedup, read_baseline, speedup_vs_compile
from engine.bench.tasks import BenchTask
from engine.explore.plan import DONE as BRANCH_DONE
from engine.explore.plan import FAILED as BRANCH_FAILED
from engine.explore.plan import PRUNED, load_plan
from engine.guard.report import settings_guard_label, share_of_iteration
from sessions import ranking
from sessions.errors import SessionError
from sessions.paths import is_session_dir
from sessions.records import Iteration
from sessions.repo import DEFAULT_BRANCH, SessionRepo

DONE, UNFINISHED, ERROR, PENDING = "done", "unfinished", "error", "pending"
# The session's run stopped on cudaforge's own fault (``cudaforge run`` exit 3): redone by the next bench run
HARNESS = "harness_error"
HARNESS_EXIT = 3


def session_dir(out: Path, task: BenchTask) -> Path:
    return out / "sessions" / task.name


def explore_summary_file(out: Path, task: BenchTask) -> Path:
    """Where ``bench --explore`` has ``cudaforge explore --json`` write the task's exploration summary."""
    return out / "explore" / f"{task.name}.json"


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
    """The best's speedup after each round 0..last (an iteration's number is its round), by the one
    noise-aware rule (sessions.ranking.leader over the correct iterations so far), so the last entry is
    the session's best speedup and a round never "improves" on noise.

    A round with no iteration (a branch that skipped numbers) carries the best so far forward.
    """
    if not history:
        return ()
    contenders = [ranking.measured("", it) for it in history if it.correct and it.speedup is not None]
    curve: list[float | None] = []
    for number in range(history[-1].number + 1):
        best = ranking.leader([m for m in contenders if m.number <= number])
        curve.append(best.speedup if best is not None else None)
    return tuple(curve)


def seeded(out: Path, task: BenchTask) -> bool:
    """Whether the task's session has its seed (iteration 0 on ``main``): what ``--explore`` starts from."""
    path = session_dir(out, task)
    if not is_session_dir(path):
        return False
    try:
        with SessionRepo.open(path) as session:
            return any(it.number == 0 for it in session.history(DEFAULT_BRANCH))
    except SessionError:
        return False


def exploration_state(session: SessionRepo, rounds: int | None) -> str:
    """``done`` when the exploration from the seed ran every branch to ``rounds`` (the beam's cuts count
    as finished), ``error`` when a branch failed (a rerun tries it again), else ``unfinished``."""
    plan = load_plan(session.path, 0)
    if plan is None or not plan.asked or not plan.branches:
        return UNFINISHED
    if any(b.state == BRANCH_FAILED for b in plan.branches):
        return ERROR
    names = session.branches()
    for branch in plan.branches:
        if branch.state == PRUNED:
            continue
        if branch.state != BRANCH_DONE or branch.name not in names:
            return UNFINISHED
        if rounds is not None and session.history(branch.name)[-1].number < rounds:
            return UNFINISHED
    return DONE


def best_of_branches(session: SessionRepo) -> tuple[Iteration | None, str]:
    """The best correct iteration on any branch and that branch, by the session's one rule
    (sessions.ranking via SessionRepo.session_best: the incumbent keeps the lead unless beaten beyond
    both timings' spread); ``main`` first, then by name, among branches sharing it."""
    found = session.session_best()
    return found if found is not None else (None, "")


def task_row(
    out: Path, task: BenchTask, rounds: int | None = None, explore: int | None = None, beam: int | None = None
) -> TaskRow:
    """The task's row; ``rounds`` (the bench's ``--rounds``) beats the session's stored rounds.
    ``explore``: the bench's ``--explore K`` (and ``beam`` its ``--beam``), so the row is over every branch."""
    path = session_dir(out, task)
    exploring = {"explore_width": explore, "explore_beam": beam} if explore is not None else {}
    if not is_session_dir(path):
        code = read_status(out, task).get("exit_code")
        status = HARNESS if code == HARNESS_EXIT else ERROR if code not in (None, 0, 130) else PENDING
        return TaskRow(task.name, status, False, None, None, 0, None, 0.0, session="", **exploring)
    try:
        with SessionRepo.open(path) as session:
            read = _read_session(session, rounds, explore is not None)
    except SessionError:
        return TaskRow(task.name, ERROR, False, None, None, 0, None, 0.0, session=str(path), **exploring)
    history, best = read["history"], read["best"]
    reached = history[-1].number if history else None
    exit_code = read_status(out, task).get("exit_code")
    if explore is not None:
        summary = explore_summary_file(out, task)
        exploring.update(
            best_branch=read["branch"], explore_summary=str(summary) if summary.is_file() else ""
        )
        done = read["explored"] == DONE and summary.is_file()
    else:
        target = rounds if rounds is not None else read["stored_rounds"]
        done = reached is not None and target is not None and reached >= target
    if done:
        status = DONE
    elif exit_code == HARNESS_EXIT:
        status = HARNESS
    elif exit_code not in (None, 0, 130) or (explore is not None and read["explored"] == ERROR):
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
        minutes=round(read["seconds"] / 60.0, 4),
        device=str(read["settings"].get("eval", {}).get("device", "cpu")),
        session=str(path),
        compile_speedup=compile_speedup(baseline),
        speedup_vs_compile=speedup_vs_compile(best_speedup, baseline),
        best_by_round=best_by_round(history),
        guard=settings_guard_label(read["settings"]),
        best_share=_share(share_of_iteration(best)) if best is not None else None,
        best_shapes=_shapes(best),
        **_review(best),
        **exploring,
    )


def _read_session(session: SessionRepo, rounds: int | None, explored: bool) -> dict[str, Any]:
    """What a row needs from the session: its iterations (every branch's, each once, by number, when it
    explored; else the current branch's), the best one and its branch, and the loop's stage seconds."""
    if explored:
        history = sorted(session.all_iterations(), key=lambda it: (it.number, it.timestamp))
        best, branch = best_of_branches(session)
        state = exploration_state(session, rounds)
    else:
        history, best, branch, state = session.history(), session.best(), session.current_branch, ""
    seconds = 0.0
    for item in history:
        if "loop.json" in item.files():
            seconds += sum(item.read_json("loop.json").get("stage_seconds", {}).values())
    return {
        "history": history,
        "best": best,
        "branch": branch,
        "explored": state,
        "stored_rounds": stored_rounds(session),
        "settings": session.settings().get("settings", {}),
        "seconds": seconds,
    }


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
