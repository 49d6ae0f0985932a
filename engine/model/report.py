"""``cudaforge report OUT -o FILE.html`` for a model folder: the model as one self-contained page.

The same rules as a session's report (``engine.batch.report``): everything inside the file, no script,
nothing fetched, charts as PNG data URIs when matplotlib is there. What it holds, read from the folder
(``engine.model.folder``): the profile (where the time goes, a chart of the heaviest modules, each one's
time over its hardware floor), the tasks with their sessions' best kernels, the modules that could not
stand alone and why, and the end to end: the estimate from the tasks' bests and the last ``apply``'s
measured figures (per kernel and whole model, beside torch.compile, at the bar it was checked at).
"""

from __future__ import annotations

from typing import Any

from engine.batch.report import CHARTS_HINT, STYLE, _e, _png, _table, _x
from engine.model import folder as model_folder
from engine.model.tables import pct, rows_shown, short_type
from sessions.errors import SessionError
from sessions.repo import SessionRepo


def share_chart(profile: dict[str, Any], limit: int = 12) -> str:
    """The heaviest leaf modules' share of device time as horizontal bars (a PNG data URI; "" without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ""
    leaves = sorted((m for m in profile["modules"] if m.get("leaf") and m["share"]["total"] > 0), key=lambda m: -m["share"]["total"])[:limit]
    if not leaves:
        return ""
    figure, axes = plt.subplots(figsize=(8, 0.35 * len(leaves) + 1))
    labels = [f"{m['path']} ({short_type(m['type'])})" for m in reversed(leaves)]
    axes.barh(labels, [100 * m["share"]["total"] for m in reversed(leaves)], color="#3b6ea8")
    axes.set_xlabel("share of the model's device time (%)")
    axes.set_title("heaviest modules")
    return _png(figure)


def profile_section(profile: dict[str, Any] | None) -> list[str]:
    if not profile:
        return ["<p>No profile.json in the folder.</p>"]
    latency = profile["latency"]
    rows = []
    for m in rows_shown(profile, 0.01, 40):
        floor = m.get("floor") or {}
        rows.append([
            _e(m["path"] or "(model)"), _e(short_type(m["type"])), str(m["calls"]), pct(m["share"]["total"]),
            pct(m["share"]["self"]), f"{m['total_ms']:.3f}", f"{floor['floor_ms']:.3f}" if floor else "—",
            f"{m['headroom']:.1f}" if m.get("headroom") else "—", _e(floor.get("bound", "")),
        ])  # fmt: skip
    chart = share_chart(profile)
    return [
        f"<p>Eager forward {latency['median_ms']:.3f} ms (quartiles {latency['q1_ms']:.3f}–{latency['q3_ms']:.3f}, "
        f"{latency['runs']} runs); operators' device time {profile['device_ms']:.3f} ms per forward on "
        f"{_e(profile.get('gpu') or profile['device'])}.</p>",
        f'<img alt="share chart" src="{chart}">' if chart else f"<p class=note>{_e(CHARTS_HINT)}</p>",
        _table(["module", "type", "calls", "total", "self", "ms", "floor ms", "× floor", "bound"], rows, {2, 3, 4, 5, 6, 7}),
        "<p class=note>× floor: the module's measured device time over the least the GPU allows for its bytes "
        "and FLOPs at its dtype's peak (engine/model/headroom.py); none without a spec-table GPU.</p>",
    ]


def _best_kernel(task: model_folder.TaskState) -> str:
    if task.session is None or task.best_iteration is None:
        return ""
    try:
        with SessionRepo.open(task.session) as repo:
            source = repo.iteration(task.best_iteration, task.best_branch or None).kernel_source
    except SessionError:
        return ""
    return f"<details><summary>{_e(task.name)}: best kernel (branch {_e(task.best_branch)}, iteration {task.best_iteration})</summary><pre>{_e(source)}</pre></details>"


def tasks_section(folder: model_folder.ModelFolder) -> list[str]:
    rows = [
        [_e(t.name), str(len(t.paths)), pct(t.share), _e(", ".join(t.paths[:4]) + (" …" if len(t.paths) > 4 else "")),
         str(t.iterations) if t.session else "no session", _x(t.best_speedup)]
        for t in folder.tasks
    ]  # fmt: skip
    parts = [_table(["task", "modules", "share", "paths", "iterations", "best speedup"], rows, {1, 2, 4, 5})]
    parts += [_best_kernel(t) for t in folder.tasks]
    skipped = folder.manifest.get("skipped") or []
    if skipped:
        parts.append("<h3>Not extracted</h3>")
        parts.append(_table(["modules", "type", "share", "why"], [[_e(", ".join(s["paths"][:3])), _e(short_type(s["type"])), pct(s.get("share")), _e(s["reason"])] for s in skipped], {2}))
    return parts


def applied_section(folder: model_folder.ModelFolder) -> list[str]:
    parts = [f"<p><b>{_e(model_folder.end_to_end_line(folder))}</b></p>"]
    applied = folder.applied
    if not applied:
        return [*parts, "<p>No apply yet: <code>cudaforge apply MODEL --tasks OUT --kernel TASK=KERNEL.py …</code> measures the whole model.</p>"]
    rows = [[_e(k["label"]), _e(k["task"]), str(len(k["paths"])), _e(k["status"]), _x(k.get("speedup")),
             "—" if not k.get("interval") else f"{k['interval'][0]:.2f}–{k['interval'][1]:.2f}"] for k in applied["kernels"]]  # fmt: skip
    parts.append(_table(["kernel", "task", "modules", "status", "on its task", "quartile range"], rows, {2, 4, 5}))
    tolerance = applied.get("tolerance") or {}
    if tolerance.get("noise"):
        parts.append(
            f"<p class=note>Whole model checked at {_e(tolerance['dtype'])} tolerance {tolerance['used']:.3g}: the eager model's "
            f"own deviation from its {_e(tolerance['noise']['truth'])} run is {tolerance['noise']['deviation']:.3g} "
            f"(×{tolerance['factor']:g}, never under the default {tolerance['default']:g}).</p>"
        )
    if applied.get("failure"):
        parts.append(f"<p class=failed>Refused: {_e(applied['failure'])}</p>")
    return parts


def render(root: Any) -> str:
    """The page for the model folder at ``root``."""
    folder = model_folder.load(root)
    manifest = folder.manifest
    title = f"cudaforge model report: {manifest.get('model', root)}"
    spec = manifest.get("spec") or {}
    return "\n".join([
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{_e(spec.get('dtype', ''))} · {_e(manifest.get('gpu') or manifest.get('device') or '')} · {len(folder.tasks)} task(s) extracted.</p>",
        "<h2>End to end</h2>", *applied_section(folder),
        "<h2>Where the time goes</h2>", *profile_section(folder.profile),
        "<h2>Tasks</h2>", *tasks_section(folder),
        "</body></html>",
    ])  # fmt: skip
