"""A model folder: what ``cudaforge extract`` wrote, the sessions of its tasks, and the end-to-end figures.

``OUT/manifest.json`` and ``OUT/profile.json`` (extract), ``OUT/tasks/*.py`` (the tasks), ``OUT/sessions/``
(one session per task, named as the task: the workbench makes them there), ``OUT/apply.json`` (the last
``cudaforge apply --tasks OUT``). The workbench's model view and the HTML report read it through here.

**The end-to-end estimate.** Before ``apply`` measures the whole model, each task's best correct speedup
(over every branch of its session, ranked as exploration ranks branches) gives an Amdahl estimate from
the profile's shares of device time: ``1 / (1 − Σ share + Σ share / speedup)``. It is an estimate (the
shares are device time, a kernel's speedup was timed on its task's random inputs) and is always shown as
one, beside the measured figure when there is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.model.spec import ModelError
from sessions.errors import SessionError
from sessions.repo import SessionRepo

MANIFEST, PROFILE, APPLY, SESSIONS, TASKS = "manifest.json", "profile.json", "apply.json", "sessions", "tasks"


def is_model_folder(path: Path) -> bool:
    return (path / MANIFEST).is_file() and (path / TASKS).is_dir()


@dataclass
class TaskState:
    """One extracted task and where its optimisation stands."""

    name: str
    file: Path
    paths: list[str]
    share: float
    session: Path | None = None
    iterations: int = 0
    best_speedup: float | None = None
    best_iteration: int | None = None
    best_branch: str = ""


@dataclass
class ModelFolder:
    root: Path
    manifest: dict[str, Any]
    profile: dict[str, Any] | None = None
    applied: dict[str, Any] | None = None
    tasks: list[TaskState] = field(default_factory=list)

    @property
    def sessions_root(self) -> Path:
        return self.root / SESSIONS

    def session_for(self, task: str) -> Path:
        return self.sessions_root / task


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _state(task: dict[str, Any], folder: Path) -> TaskState:
    from engine.bench.results import best_of_branches

    state = TaskState(task["name"], folder / task.get("file", f"tasks/{task['name']}.py"), list(task["paths"]), float(task.get("share") or 0.0))
    path = folder / SESSIONS / task["name"]
    if not path.is_dir():
        return state
    state.session = path
    try:
        with SessionRepo.open(path) as session:
            state.iterations = len(session.all_iterations())
            best, branch = best_of_branches(session)
    except SessionError:
        return state
    if best is not None:
        state.best_speedup, state.best_iteration, state.best_branch = best.speedup, best.number, branch
    return state


def load(root: Path) -> ModelFolder:
    """The folder at ``root`` with its tasks' sessions read; :class:`ModelError` when it is not one."""
    manifest = _json(root / MANIFEST)
    if manifest is None or not isinstance(manifest.get("tasks"), list):
        raise ModelError(f"{root} is not a folder cudaforge extract wrote (no readable {MANIFEST})")
    folder = ModelFolder(root, manifest, _json(root / PROFILE), _json(root / APPLY))
    folder.tasks = [_state(task, root) for task in manifest["tasks"]]
    return folder


def estimate(tasks: list[TaskState]) -> dict[str, Any]:
    """The Amdahl estimate from each task's share and best speedup (see the module docstring)."""
    counted = [(t.share, t.best_speedup) for t in tasks if t.best_speedup and t.best_speedup > 0]
    remaining = 1.0 - sum(s for s, _ in counted) + sum(s / x for s, x in counted)
    return {
        "speedup": 1.0 / remaining if counted and remaining > 0 else None,
        "tasks": len(counted),
        "covered": sum(s for s, _ in counted),
    }


def measured(folder: ModelFolder) -> dict[str, Any] | None:
    """The last apply's whole-model figures (status, speedup, interval, torch.compile), or None."""
    whole = (folder.applied or {}).get("whole")
    if not whole:
        return None
    base = (whole.get("baselines") or {}).get("default") or {}
    return {
        "status": whole.get("status"), "speedup": whole.get("speedup"), "interval": whole.get("interval"),
        "compile_speedup": (base["eager_ms"] / base["compiled_ms"]) if base.get("eager_ms") and base.get("compiled_ms") else None,
        "vs_compile": base.get("speedup"), "failure": (folder.applied or {}).get("failure"),
    }  # fmt: skip


def end_to_end_line(folder: ModelFolder) -> str:
    """One line: the estimate from the tasks' bests and, when there is one, the measured end to end."""
    guess = estimate(folder.tasks)
    parts = []
    if guess["speedup"]:
        parts.append(
            f"estimated end to end {guess['speedup']:.2f}x from {guess['tasks']} task(s)' best "
            f"({100 * guess['covered']:.0f}% of the device time)"
        )
    else:
        parts.append("no task has a correct kernel yet")
    found = measured(folder)
    if found and found.get("speedup"):
        low_high = found.get("interval")
        spread = f" ({low_high[0]:.2f}–{low_high[1]:.2f})" if low_high else ""
        compiled = f", torch.compile {found['compile_speedup']:.2f}x" if found.get("compile_speedup") else ""
        parts.append(f"measured by apply {found['speedup']:.2f}x{spread}{compiled}")
    elif found:
        parts.append(f"last apply: {found['status']}")
    return " · ".join(parts)
