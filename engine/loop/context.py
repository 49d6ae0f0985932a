"""The standing context of a round's prompts, from the loop's real settings and the session repo.

The loop asks for it once per stage; this keeps :mod:`engine.loop.machine` about control flow. The
correctness bar comes from the ``EvalOptions`` the loop evaluates with (trials, tolerances), so do
the guard policy and the changed rules (the latest EvalResult's record of them stands in while the
options carry none), the target from the spec table by the GPU's name (known from an EvalResult's ``env``, or
from ``nvidia-smi`` before the first evaluation), and the history from the branch's commits.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from engine.agents.context import POLICIES, Contract, GuardChanges, PromptContext
from engine.guard.policy import GuardSettings
from engine.loop import feedback, history


@functools.cache
def probe_gpu_name(index: int = 0) -> str | None:
    """The GPU's name from nvidia-smi (no torch in the engine process); None without one."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, f"--id={index}", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    return name or None


def _option(eval_options: Any, *names: str) -> Any:
    for name in names:
        value = getattr(eval_options, name, None)
        if value is not None:
            return value
    return None


def _guard_settings(eval_options: Any) -> GuardSettings | None:
    """The options' own guard settings (``EvalOptions.guard``), read as they are; None for options
    that carry them otherwise (loose fields) or not at all."""
    guard = getattr(eval_options, "guard", None)
    return guard if isinstance(guard, GuardSettings) else None


def guard_policy(eval_options: Any, result: Mapping[str, Any] | None = None) -> str:
    """The policy the next version will be judged by: the options' (what the harness will apply),
    else the latest result's record of it (options from before guard policies existed), else ``default``."""
    settings = _guard_settings(eval_options)
    own = settings.policy if settings is not None else _option(eval_options, "guard_policy", "guard")
    for value in (own, (result or {}).get("guard_policy")):
        if value in POLICIES:
            return str(value)
    return "default"


def guard_changes(eval_options: Any, result: Mapping[str, Any] | None = None) -> GuardChanges:
    """Rules turned into refusals or off: the options' when they say, else the latest result's."""
    settings = _guard_settings(eval_options)
    if settings is not None:
        return GuardChanges(tuple(settings.refuse), tuple(settings.relax))
    refuse = _option(eval_options, "guard_refuse", "refuse")
    relax = _option(eval_options, "relax", "relaxed_rules")
    if refuse is None and relax is None and result:
        return GuardChanges.from_result(result)
    return GuardChanges(tuple(refuse or ()), tuple(relax or ()))


def _task_source(session: Any) -> str:
    try:
        return str(session.task_source)
    except Exception:  # noqa: BLE001 - a session without its task text: no precision line
        return ""


def round_context(
    session: Any, branch: str, eval_options: Any, hardware: str = "", with_history: bool = True
) -> tuple[PromptContext, str]:
    """``(context, policy)`` for the next round of ``branch``."""
    items = session.history(branch)
    latest = items[-1].eval_result if items else None
    device = (latest or {}).get("device") or getattr(eval_options, "device", "cuda")
    device = "cuda" if str(device).startswith("cuda") else "cpu"
    if hardware.strip():
        target = hardware.strip()
    else:
        name = feedback.gpu_name(latest)
        if device == "cuda" and not name:
            name = probe_gpu_name(int(getattr(eval_options, "gpu_index", None) or 0))
        target = feedback.target_text(latest, device, name)
    settings = eval_options.settings() if hasattr(eval_options, "settings") else {}
    table = history.render(history.rows_from_iterations(items)) if with_history else ""
    context = PromptContext(
        target=target,
        contract=Contract.from_settings(settings, _task_source(session)),
        guard=guard_changes(eval_options, latest),
        history=table,
    )
    return context, guard_policy(eval_options, latest)
