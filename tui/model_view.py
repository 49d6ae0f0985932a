"""What the model view (``tui/screens/model.py``) shows of a model folder, as plain data and text.

No Textual here. :func:`read` is what the screen's thread worker runs: the folder (``engine.model.folder``:
the manifest, the profile, each task's session and its best), the profile tree's rows and the chart's bars.
Its formatting and rows come from ``engine.model.tables``, which loads no torch, so opening the app stays
light; the folder's sessions are read in the screen's worker, not in the first frame.

The profile tree is ``rows_shown(profile, 0.01, 40)`` as ``cudaforge profile`` prints it, each module
marked with the task that covers it: the task's own modules by name, the modules inside them by the
name in parentheses. The chart is the heaviest leaf modules' share of the device time, as the HTML
report draws it (``engine.model.report.share_chart``), in block characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from engine.model.folder import ModelFolder, TaskState, load
from engine.model.spec import ModelError
from engine.model.tables import label, ms, pct, rows_shown, short_type

MIN_SHARE, ROW_LIMIT, CHART_LIMIT = 0.01, 40, 12
EIGHTHS = " ▏▎▍▌▋▊▉"
CHART_TITLE = "share of the device time, heaviest modules"


@dataclass
class ProfileRow:
    """One module of the profile tree."""

    path: str
    depth: int
    label: str  # the path from the nearest shown ancestor (engine.model.tables.label)
    type: str
    calls: int
    total: float
    self_share: float
    total_ms: float | None
    headroom: float | None
    task: str = ""  # the task covering the module ("" when none)
    own: bool = False  # the task's own module (else one inside it)

    @property
    def name(self) -> str:
        return "  " * self.depth + self.label


@dataclass
class Snapshot:
    """The folder as read once, with what the profile tree and the chart show of it."""

    folder: ModelFolder
    rows: list[ProfileRow] = field(default_factory=list)
    hidden: int = 0  # modules under MIN_SHARE (or past ROW_LIMIT), not shown
    bars: list[tuple[str, float]] = field(default_factory=list)  # (label, share of device time)


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, an ellipsis where it was cut."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


# ---------------------------------------------------------------------- reading


def _check_profile(profile: Any) -> None:
    """What the tree and the chart read of each module is there (``rows_shown`` reads the shares)."""
    numbers = []
    for m in profile["modules"]:
        if not isinstance(m["path"], str) or not isinstance(m["type"], str):
            raise TypeError(f"a module's path and type are not text: {m['path']!r}")
        numbers += [m["calls"], m["share"]["total"], m["share"]["self"]]
    if not all(isinstance(n, (int, float)) for n in numbers):
        raise TypeError("a module's calls or shares are not numbers")


def check(root: Path) -> ModelFolder:
    """The folder at ``root``, loaded and checked to be one the view can show; :class:`ModelError`
    (one line) when it is not."""
    try:
        folder = load(root)
        if folder.profile is not None:
            _check_profile(folder.profile)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        what = f"{type(error).__name__}: {error}".replace("\n", " ")
        raise ModelError(f"{root}: not a model folder cudaforge extract wrote ({what})") from None
    return folder


def read(root: Path) -> Snapshot:
    """The folder and its view (the screen's worker runs this off the UI thread)."""
    folder = check(root)
    snapshot = Snapshot(folder)
    if folder.profile:

        shown = rows_shown(folder.profile, MIN_SHARE, ROW_LIMIT)
        snapshot.rows = profile_rows(shown, folder.tasks)
        snapshot.hidden = len(folder.profile["modules"]) - len(shown)
        snapshot.bars = heaviest(folder.profile)
    return snapshot


def task_of(path: str, owners: dict[str, str]) -> tuple[str, bool]:
    """(the task covering ``path``, whether ``path`` is one of its own modules); ("", False) when none."""
    if path in owners:
        return owners[path], True
    for owned, name in owners.items():
        if owned and path.startswith(owned + "."):
            return name, False
    return "", False


def profile_rows(modules: list[dict[str, Any]], tasks: list[TaskState]) -> list[ProfileRow]:

    owners = {path: task.name for task in tasks for path in task.paths}
    shown = {m["path"] for m in modules}
    rows = []
    for m in modules:
        task, own = task_of(m["path"], owners)
        depth, text = label(m["path"], shown)
        rows.append(ProfileRow(
            m["path"], depth, text, short_type(m["type"]), int(m["calls"]),
            float(m["share"]["total"]), float(m["share"]["self"]), m.get("total_ms"), m.get("headroom"), task, own,
        ))  # fmt: skip
    return rows


def heaviest(profile: dict[str, Any], limit: int = CHART_LIMIT) -> list[tuple[str, float]]:
    """The heaviest leaf modules (by total share) as (label, share); leaves are the profile's ``leaf``
    modules, or those with no module under them in a profile that does not say."""

    modules = [m for m in profile["modules"] if m["path"]]
    if any("leaf" in m for m in modules):
        leaves = [m for m in modules if m.get("leaf")]
    else:
        paths = [m["path"] for m in modules]
        leaves = [m for m in modules if not any(p.startswith(m["path"] + ".") for p in paths)]
    leaves = sorted((m for m in leaves if m["share"]["total"] > 0), key=lambda m: -m["share"]["total"])
    return [(f"{m['path']} ({short_type(m['type'])})", float(m["share"]["total"])) for m in leaves[:limit]]


# ---------------------------------------------------------------------- text


def header_line(folder: ModelFolder) -> str:
    """``model · dtype · GPU · eager forward … ms · device time … ms per forward``."""
    profile, manifest = folder.profile, folder.manifest
    if profile:
        latency = profile.get("latency") or {}
        runs = f" (median of {latency['runs']})" if latency.get("runs") else ""
        parts = [
            profile.get("model") or manifest.get("model"), profile.get("dtype"),
            profile.get("gpu") or profile.get("device"), f"eager forward {ms(latency.get('median_ms'))} ms{runs}",
            f"device time {ms(profile.get('device_ms'))} ms per forward",
        ]  # fmt: skip
    else:
        spec = manifest.get("spec") or {}
        parts = [
            manifest.get("model"),
            spec.get("dtype"),
            manifest.get("gpu") or manifest.get("device"),
            "no profile.json",
        ]
    return " · ".join(str(p) for p in parts if p)


def task_cells(task: TaskState, narrow: bool) -> tuple[str, str, str, str, str]:
    """The tasks table's row: name, modules, share, session (none / N iterations), best (speedup, branch, #)."""
    if task.session is None:
        session = "none"
    else:
        session = f"{task.iterations} iteration{'' if task.iterations == 1 else 's'}"
    best = "—"
    if task.best_speedup is not None:
        branch = cut(task.best_branch or "main", 12 if narrow else 24)
        best = f"{task.best_speedup:.2f}x · {branch} #{task.best_iteration}"
    return cut(task.name, 18 if narrow else 32), str(len(task.paths)), pct(task.share), session, best


TASK_COLUMNS = ("task", "modules", "share", "session", "best")


def profile_table(snapshot: Snapshot | None) -> RenderableType:
    """The profile tree: one line a module, cut with an ellipsis (never wrapped) to the width it gets."""
    if snapshot is None:
        return Text("reading the profile…", style="italic")
    if not snapshot.folder.profile:
        return Text("no profile.json in this folder: cudaforge extract writes one", style="italic")
    table = Table(
        box=None, padding=(0, 1), collapse_padding=True, pad_edge=False, expand=True, header_style="bold"
    )
    table.add_column("module", ratio=1, no_wrap=True, overflow="ellipsis", min_width=10)
    table.add_column("type", no_wrap=True, overflow="ellipsis", max_width=12)
    for heading in ("calls", "total", "self", "ms", "×floor"):
        table.add_column(heading, justify="right", no_wrap=True)
    table.add_column("task", no_wrap=True, overflow="ellipsis", max_width=12)
    for row in snapshot.rows:
        mark = (
            Text(row.task, style="bold")
            if row.own
            else Text(f"({row.task})" if row.task else "", style="dim")
        )
        table.add_row(
            row.name, row.type, str(row.calls), pct(row.total), pct(row.self_share), ms(row.total_ms),
            f"{row.headroom:.1f}" if isinstance(row.headroom, (int, float)) else "–", mark,
        )  # fmt: skip
    if not snapshot.hidden:
        return table
    note = Text(
        f"({snapshot.hidden} more modules under {100 * MIN_SHARE:g}% of the device time)", style="dim"
    )
    return Group(table, note)


def bar(fraction: float, width: int) -> str:
    """A horizontal bar ``fraction`` of ``width`` cells long, in eighths of a cell."""
    cells = max(0.0, min(1.0, fraction)) * width
    full = int(cells)
    part = int((cells - full) * 8)
    return "█" * full + (EIGHTHS[part] if part and full < width else "")


def chart_lines(bars: list[tuple[str, float]], width: int, height: int) -> list[tuple[str, str, str]]:
    """(label, bar, percentage) per line of a chart ``width`` × ``height`` cells (a title line first,
    then as many bars as fit), each part padded to its column; bars scaled to the heaviest."""
    shown = bars[: max(0, height - 1)]
    if not shown or width < 12:
        return []
    label_width = min(max(len(label) for label, _ in shown), max(6, width // 2))
    bar_width = max(1, width - label_width - 8)
    top = max(share for _, share in shown) or 1.0
    return [
        (
            f"{cut(label, label_width):<{label_width}} ",
            f"{bar(share / top, bar_width):<{bar_width}}",
            f" {100 * share:5.1f}%",
        )
        for label, share in shown
    ]
