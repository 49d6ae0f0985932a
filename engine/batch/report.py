"""``cudaforge report``: one self-contained HTML file that shows a session to someone without the TUI.

Why (ARCHITECTURE.md §8, "The report"): a session's evidence lives in a git repository read through a
terminal app; a colleague asked to review a kernel needs a page. Everything is inside the file: the
styles, the syntax-highlighted diff (pygments, inline styles), the charts as PNG data URIs (matplotlib,
the ``plots`` extra). No script and nothing fetched, so it opens in any browser, offline.

What it holds, all read from the committed records (the same ones the headless table prints):
- the task, and the best correct kernel with its diff from the seed;
- the speedup per iteration of the branch and the roofline of the best kernel's own kernels (arithmetic
  intensity against achieved FLOP/s under the GPU's memory and compute roofs, from the profile's summary);
- the per-iteration table: status, speedup with the kernel time's spread, own-kernel share, review
  flags, the human's decision and note;
- what moved from the seed (or the first profiled iteration) to the best (``engine.profile.diff``);
- the environment: GPU, driver, torch, guard policy, sandbox.
Without matplotlib the charts are left out and the page says how to get them.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.batch.report_html import escape, table, times
from engine.eval.arbiter import CONSTANT_LEGEND, CONSTANT_MARK
from engine.eval.baselines import against_text
from engine.loop.history import HistoryRow, rows_from_iterations
from engine.profile.diff import diff_lines, iteration_diff
from engine.profile.summary import roofline_position

CHARTS_HINT = "charts need matplotlib: pip install 'cudaforge[plots]'"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #1d1d1f; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: .9em; } th, td { border: 1px solid #ccc; padding: .25em .5em; }
th { background: #f0f0f3; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: .85em; }
.correct { color: #116611; } .failed { color: #a01515; } .note { color: #555; font-style: italic; }
img { max-width: 100%; border: 1px solid #ddd; }
"""


@dataclass
class IterationRow:
    number: int
    phase: str
    status: str
    speedup: float | None
    kernel_ms: float | None
    kernel_iqr_ms: float | None
    share: float | None
    flags: list[str]
    versus: str  # the speedup against each torch.compile baseline measured ("" when none)
    decisions: list[HistoryRow] = field(default_factory=list)
    # the float64 arbiter found the exact answer constant to rounding (EvalResult.arbiter): a speedup
    # there is not evidence, so the row carries CONSTANT_MARK and the table a legend line
    constant: bool = False


@dataclass
class Report:
    session: str
    branch: str
    task_name: str
    task_source: str
    rows: list[IterationRow]
    best: Any  # sessions.records.Iteration or None
    seed: Any  # the branch's first iteration
    compared: Any  # the iteration the best is compared with (the seed, or the first profiled one)
    other_branches: dict[str, list[tuple[int, float | None]]] = field(default_factory=dict)


def _timing(result: dict[str, Any]) -> tuple[float | None, float | None]:
    candidate = (result.get("timing") or {}).get("candidate") or {}
    return candidate.get("median_ms"), candidate.get("iqr_ms")


def gather(repo: Any, branch: str | None = None) -> Report:
    """What the report shows, read from a ``sessions.repo.SessionRepo``'s branch (default: current)."""
    branch = branch or repo.current_branch
    history = repo.history(branch)
    decisions: dict[int | None, list[HistoryRow]] = {}
    pending: list[HistoryRow] = []
    for row in rows_from_iterations(history):
        pending.append(row)
        if row.iteration is not None:  # a rejected suggestion belongs to the iteration of its round
            decisions[row.iteration] = pending
            pending = []
    rows = []
    for item in history:
        result = item.eval_result
        median, iqr = _timing(result)
        share = (result.get("kernel_share") or {}).get("share")
        rows.append(
            IterationRow(
                item.number, item.phase, item.status, item.speedup, median, iqr, share,
                list(result.get("flags") or []), against_text(item.speedup, result.get("baselines")),
                decisions.get(item.number, []),
                bool((result.get("arbiter") or {}).get("constant_to_rounding")),
            )
        )  # fmt: skip
    best = repo.best(branch)
    seed = history[0] if history else None
    compared = seed
    if seed is not None and seed.profile is None:
        compared = next((it for it in history if it.profile is not None and it is not best), seed)
    others = {
        name: [(it.number, it.speedup if it.correct else None) for it in repo.history(name)]
        for name in repo.branches()
        if name != branch
    }
    return Report(repo.name, branch, repo.task_name, repo.task_source, rows, best, seed, compared, others)


# -- charts ------------------------------------------------------------------------------------------
def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def speedup_chart(report: Report) -> str:
    """:func:`speedup_figure` as a PNG data URI."""
    return _png(speedup_figure(report))


def speedup_figure(report: Report) -> Any:
    """The branch's speedup per iteration (correct: filled, incorrect: x at 0, best: starred), other
    branches faint; a matplotlib Figure on Agg."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 3.2))
    for name, points in report.other_branches.items():
        xs = [n for n, s in points if s is not None]
        axes.plot(xs, [s for _, s in points if s is not None], color="0.8", marker=".", label=f"{name}")
    correct = [(r.number, r.speedup) for r in report.rows if r.status == "correct" and r.speedup is not None]
    failed = [r.number for r in report.rows if r.status != "correct"]
    if correct:
        axes.plot(*zip(*correct, strict=True), color="tab:blue", marker="o", label=f"{report.branch} (correct)")
    if failed:
        axes.scatter(failed, [0] * len(failed), color="tab:red", marker="x", label="not correct", zorder=3)
    if report.best is not None and report.best.speedup is not None:
        axes.scatter([report.best.number], [report.best.speedup], s=180, marker="*", color="gold",
                     edgecolors="black", zorder=4, label=f"best: #{report.best.number}")  # fmt: skip
    axes.axhline(1.0, color="0.5", linewidth=0.8, linestyle="--")
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("iteration")
    axes.set_ylabel("speedup over eager PyTorch")
    axes.legend(fontsize="small", loc="best")
    return figure


def roofline_rows(profile: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per own kernel of a profile's summary: its intensity and throughput where FLOPs were counted,
    and the roof that limits it with the percentage reached (``engine.profile.summary.roofline_position``,
    what the Judge reads)."""
    kernels = (((profile or {}).get("summary") or {}).get("data") or {}).get("kernels") or []
    rows = []
    for k in kernels:
        position = roofline_position(k)
        if position is None:
            continue
        row = {"name": str(k.get("name", "")), "ai": k.get("arithmetic_intensity"), "tflops": k.get("tflops")}
        row.update(bound=k.get("bound") or "", roof=position[0], percent=position[1])
        if k.get("arithmetic_intensity") and k.get("tflops") and k.get("peak_tflops"):
            row.update(peak_tflops=k["peak_tflops"], peak_bandwidth_gbs=k["peak_bandwidth_gbs"])
        rows.append(row)
    return rows


def roofline_chart(rows: Sequence[dict[str, Any]]) -> str:
    """The kernels under the GPU's roofs (spec table), as a PNG data URI: achieved TFLOP/s against
    arithmetic intensity on log axes where FLOPs were counted; otherwise the share of the memory roof
    each kernel reaches (its DRAM bandwidth against the peak)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    placed = [r for r in rows if "peak_tflops" in r]
    figure, axes = plt.subplots(figsize=(7.5, 3.4 if placed else 0.8 + 0.45 * len(rows)))
    if placed:
        bandwidth_tbs = placed[0]["peak_bandwidth_gbs"] / 1000.0
        peak = max(r["peak_tflops"] for r in placed)
        ridge = peak / bandwidth_tbs
        low = min(min(r["ai"] for r in placed) / 4, ridge / 16)
        high = max(max(r["ai"] for r in placed) * 4, ridge * 16)
        xs = [low * (high / low) ** (i / 200) for i in range(201)]
        axes.plot(xs, [min(peak, bandwidth_tbs * x) for x in xs], color="black", label="roofs (spec table)")
        for r in placed:
            axes.scatter([r["ai"]], [r["tflops"]], s=60, zorder=3, label=f"{r['name'].split('(')[0][:40]}: {r['percent']:.0f}%")
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("arithmetic intensity (FLOP/byte of DRAM)")
        axes.set_ylabel("achieved TFLOP/s")
        axes.legend(fontsize="small", loc="lower right")
    else:
        names = [r["name"].split("(")[0][:40] for r in rows]
        axes.barh(names, [r["percent"] for r in rows], color="tab:blue")
        axes.axvline(100.0, color="black", linewidth=1.0)
        axes.set_xlim(0, 105)
        axes.set_xlabel("% of the memory roof (DRAM bandwidth / peak); no FLOPs counted")
    return _png(figure)


# -- the page ------------------------------------------------------------------------------------------
_e, _x, _table = escape, times, table


def _iteration_table(report: Report) -> str:
    rows = []
    for r in report.rows:
        status = f"<span class={'correct' if r.status == 'correct' else 'failed'}>{_e(r.status)}</span>"
        time = f"{r.kernel_ms:.4g} ms ± {r.kernel_iqr_ms:.2g} (IQR)" if r.kernel_ms is not None else "—"
        share = f"{r.share:.0%}" if isinstance(r.share, (int, float)) else "—"
        decided = "<br>".join(
            _e(d.decision) + (f" <span class=note>{_e(d.note)}</span>" if d.note else "")
            + ("" if d.iteration is not None else f" — <i>{_e(d.suggestion)}</i>")
            for d in r.decisions
        )  # fmt: skip
        speedup = _x(r.speedup) + (f"<br><small>{_e(r.versus)}</small>" if r.versus else "")
        if r.constant:
            status += f" <span class=note title='{_e(CONSTANT_LEGEND)}'>{CONSTANT_MARK}</span>"
        rows.append([str(r.number), _e(r.phase), status, speedup, time, share, _e(", ".join(r.flags)) or "—", decided or "—"])
    header = ("iter", "phase", "status", "speedup (eager; vs torch.compile)", "kernel time (spread)", "own-kernel share", "flags", "human decision and note")
    legend = f"<p class=note>{_e(CONSTANT_LEGEND)}</p>" if any(r.constant for r in report.rows) else ""
    return _table(header, rows, numeric={0, 3, 4, 5}) + legend


def _diff_html(old: str, new: str, old_label: str, new_label: str) -> str:
    import difflib

    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import DiffLexer

    text = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), old_label, new_label))
    if not text:
        return "<p>(the best kernel is the seed itself)</p>"
    return highlight(text, DiffLexer(), HtmlFormatter(noclasses=True, nowrap=False))


def _environment(best: Any) -> str:
    result = best.eval_result if best is not None else {}
    env = result.get("env") or {}
    rows = [
        ("GPU", env.get("gpu") or env.get("device") or "—"),
        ("driver", env.get("driver") or "—"),
        ("clocks", env.get("clocks") or "not recorded (ncu ran with --clock-control none)"),
        ("torch", f"{env.get('torch', '—')} (CUDA {env.get('torch_cuda') or '—'})"),
        ("Python", env.get("python") or "—"),
        ("guard policy", result.get("guard_policy") or "—"),
        ("sandbox", result.get("sandbox") or "—"),
    ]
    return _table(("what", "value"), [[_e(k), _e(v)] for k, v in rows])


def _charts(report: Report) -> str:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"<p class=note>{_e(CHARTS_HINT)}</p>"
    if not report.rows:
        return "<p>No iterations yet: nothing to chart.</p>"
    parts = [f'<h3>Speedup per iteration</h3><img alt="speedup per iteration" src="{speedup_chart(report)}">']
    rows = roofline_rows(report.best.profile if report.best is not None else None)
    if rows:
        cells = [
            [_e(r["name"]), f"{r['ai']:.3g}" if r.get("ai") else "—", f"{r['tflops']:.3g}" if r.get("tflops") else "—",
             f"{r['percent']:.0f}% ({r['roof']})", _e(r["bound"] or "—")]
            for r in rows
        ]  # fmt: skip
        parts.append(f'<h3>Roofline of the best kernel</h3><img alt="roofline" src="{roofline_chart(rows)}">')
        parts.append(_table(("kernel", "FLOP/byte", "TFLOP/s", "of the limiting roof", "bound"), cells, {1, 2, 3}))
    else:
        parts.append("<p class=note>No roofline: the best kernel has no Nsight Compute summary (not profiled, or the fallback profiler ran).</p>")
    return "".join(parts)


def render_html(report: Report) -> str:
    """The whole page, self-contained."""
    best = report.best
    parts = [
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>cudaforge report: {_e(report.session)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>cudaforge report: {_e(report.session)}</h1>",
        f"<p>Task <b>{_e(report.task_name)}</b>, branch <b>{_e(report.branch)}</b>, {len(report.rows)} iterations. "
        + (f"Best: iteration {best.number}, {_x(best.speedup)} over eager PyTorch.</p>" if best else "No correct kernel.</p>"),
        "<h2>Task</h2>",
        f"<pre>{_e(report.task_source)}</pre>",
        "<h2>Best kernel</h2>",
    ]
    if best is not None and report.seed is not None:
        parts.append(f"<p>Diff from the seed (iteration {report.seed.number}) to iteration {best.number}:</p>")
        parts.append(_diff_html(report.seed.kernel_source, best.kernel_source, f"iter {report.seed.number}", f"iter {best.number}"))
    else:
        parts.append("<p>No correct kernel on this branch.</p>")
    parts += ["<h2>Charts</h2>", _charts(report), "<h2>Iterations</h2>", _iteration_table(report)]
    parts.append("<h2>What moved</h2>")
    if best is not None and report.compared is not None and report.compared.number != best.number:
        old = report.compared
        diff = iteration_diff(old.eval_result, old.profile, best.eval_result, best.profile)
        parts.append(f"<pre>{_e(chr(10).join(diff_lines(diff, f'iter {old.number}', f'iter {best.number}')))}</pre>")
    else:
        parts.append("<p>Nothing to compare: the best kernel is the first iteration, or there is none.</p>")
    parts += ["<h2>Environment</h2>", _environment(best), "</body></html>"]
    return "\n".join(parts)
