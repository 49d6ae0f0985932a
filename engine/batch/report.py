"""``cudaforge report``: one self-contained HTML file that shows a session to someone without the TUI.

Why (ARCHITECTURE.md §8, "The report"): a session's evidence lives in a git repository read through a
terminal app; a colleague asked to review a kernel needs a page. Everything is inside the file: the
styles, the syntax-highlighted diff (pygments, inline styles), the charts as PNG data URIs (matplotlib,
the ``plots`` extra). No script and nothing fetched, so it opens in any browser, offline.

What it holds, all read from the committed records (the same ones the headless table prints), for the
whole session:
- the task; a leaderboard of the branches (``engine.batch.report_branches``): each branch's best with
  its speedup interval and kernel-time spread, the session's best, "within spread" where the timing
  cannot order two, and the line saying how best is chosen (``sessions.ranking``);
- one branch's best kernel in detail (``--branch``, default the session best's): its diff from the
  seed, the shapes it was tested at (``engine.batch.report_shapes``), the roofline of its own kernels
  (arithmetic intensity against achieved FLOP/s under the GPU's roofs, from the profile's summary);
- every branch's speedup per iteration on one chart, the legend outside the axes so it hides no point;
- the per-iteration tables, one per branch, each iteration once (under the branch it was made on):
  status, speedup with its interval, the kernel time's spread, own-kernel share, review flags, the
  human's decision and note;
- what moved from the seed (or the first profiled iteration) to the best (``engine.profile.diff``);
- the environment: GPU, driver and ncu's clocks on a GPU session (a CPU one never ran ncu, so its page
  does not mention it), torch, guard policy, sandbox.
Without matplotlib the charts are left out and the page says how to get them.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.batch.report_branches import (
    SESSION_BEST,
    BranchSection,
    Standing,
    branch_sections,
    leaderboard,
    leaderboard_html,
    section_heading,
)
from engine.batch.report_html import escape, table, times
from engine.batch.report_shapes import shapes_html
from engine.eval.arbiter import CONSTANT_LEGEND, CONSTANT_MARK
from engine.eval.baselines import against_text
from engine.loop.history import HistoryRow, rows_from_iterations
from engine.profile.diff import diff_lines, iteration_diff
from engine.profile.summary import roofline_position
from sessions import ranking

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
    # the speedup with its bootstrap interval (``1.42× ±0.03``, sessions.ranking.interval_label); "" to
    # print the bare speedup
    speedup_label: str = ""


@dataclass
class Report:
    session: str
    branch: str  # the branch whose best kernel the page details (diff, roofline, shapes, what moved)
    task_name: str
    task_source: str
    rows: list[IterationRow]  # that branch's whole history
    best: Any  # sessions.records.Iteration or None
    seed: Any  # the branch's first iteration
    compared: Any  # the iteration the best is compared with (the seed, or the first profiled one)
    # the whole session (ARCHITECTURE.md §8): each branch with the rows of the iterations made on it
    sections: list[tuple[BranchSection, list[IterationRow]]] = field(default_factory=list)
    ranked_by: str = ""
    standings: list[Standing] = field(default_factory=list)
    device: str = ""  # "cpu" when the session was evaluated on the CPU, else the GPU's name or ""


def _timing(result: dict[str, Any]) -> tuple[float | None, float | None]:
    candidate = (result.get("timing") or {}).get("candidate") or {}
    return candidate.get("median_ms"), candidate.get("iqr_ms")


def iteration_rows(branch: str, history: Sequence[Any], shown: Sequence[Any] | None = None) -> list[IterationRow]:
    """The table rows of ``shown`` (default: all of ``history``), with the human's decisions of each
    round: read from the whole ``history``, since a rejected suggestion belongs to the next iteration."""
    decisions: dict[int | None, list[HistoryRow]] = {}
    pending: list[HistoryRow] = []
    for row in rows_from_iterations(history):
        pending.append(row)
        if row.iteration is not None:  # a rejected suggestion belongs to the iteration of its round
            decisions[row.iteration] = pending
            pending = []
    rows = []
    for item in history if shown is None else shown:
        result = item.eval_result
        median, iqr = _timing(result)
        share = (result.get("kernel_share") or {}).get("share")
        rows.append(
            IterationRow(
                item.number, item.phase, item.status, item.speedup, median, iqr, share,
                list(result.get("flags") or []), against_text(item.speedup, result.get("baselines")),
                decisions.get(item.number, []),
                bool((result.get("arbiter") or {}).get("constant_to_rounding")),
                ranking.label(ranking.measured(branch, item)) if item.speedup is not None else "",
            )
        )  # fmt: skip
    return rows


def _device(history: Sequence[Any]) -> str:
    """Where the session's kernels were evaluated: the first recorded ``env.device`` (or the result's
    ``device``), as ``cpu`` or the GPU's name."""
    for item in history:
        result = item.eval_result
        env = result.get("env") or {}
        device = str(env.get("device") or result.get("device") or "")
        if device:
            return "cpu" if device == "cpu" else str(env.get("gpu") or device)
    return ""


def gather(repo: Any, branch: str | None = None) -> Report:
    """What the report shows, read from a ``sessions.repo.SessionRepo``: every branch, and the best kernel
    of ``branch`` in detail (default: the branch holding the session's best, else the current one)."""
    top = repo.session_best()
    branch = branch or (top[1] if top is not None else repo.current_branch)
    history = repo.history(branch)
    best = repo.best(branch)
    seed = history[0] if history else None
    compared = seed
    if seed is not None and seed.profile is None:
        compared = next((it for it in history if it.profile is not None and it is not best), seed)
    sections = branch_sections(repo)
    how, standings = leaderboard(repo, sections)
    report = Report(repo.name, branch, repo.task_name, repo.task_source, iteration_rows(branch, history), best,
                    seed, compared, ranked_by=how, standings=standings)  # fmt: skip
    report.sections = [(s, iteration_rows(s.name, s.history, s.own)) for s in sections]
    report.device = _device(repo.all_iterations())
    return report


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
    """Every branch's speedup per iteration, one colour each, each line starting at its fork point
    (correct kernels; an incorrect one is an x at 0), the session's best starred; a matplotlib Figure
    on Agg. The legend sits outside the axes, right of them, so it covers no point whatever the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=(7.5, 3.2))
    failed: list[int] = []
    for k, (section, rows) in enumerate(report.sections):
        points = [(r.number, r.speedup) for r in rows if r.status == "correct" and r.speedup is not None]
        fork = section.fork_point
        if fork is not None and fork.correct and fork.speedup is not None:
            points.insert(0, (fork.number, fork.speedup))
        failed += [r.number for r in rows if r.status != "correct"]
        if points:
            axes.plot(*zip(*points, strict=True), color=f"C{k % 10}", marker="o", label=section.name)
    if failed:
        axes.scatter(failed, [0] * len(failed), color="tab:red", marker="x", label="not correct", zorder=3)
    top = next((s for s in report.standings if s.verdict == SESSION_BEST), None)
    if top is not None and top.best.speedup is not None:
        axes.scatter([top.best.number], [top.best.speedup], s=180, marker="*", color="gold", edgecolors="black",
                     zorder=4, label=f"session best: {top.branch} #{top.best.number}")  # fmt: skip
    axes.axhline(1.0, color="0.5", linewidth=0.8, linestyle="--")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("iteration")
    axes.set_ylabel("speedup over eager PyTorch")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
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


def _iteration_table(shown: Sequence[IterationRow]) -> str:
    rows = []
    for r in shown:
        status = f"<span class={'correct' if r.status == 'correct' else 'failed'}>{_e(r.status)}</span>"
        time = f"{r.kernel_ms:.4g} ms ± {r.kernel_iqr_ms:.2g} (IQR)" if r.kernel_ms is not None else "—"
        share = f"{r.share:.0%}" if isinstance(r.share, (int, float)) else "—"
        decided = "<br>".join(
            _e(d.decision) + (f" <span class=note>{_e(d.note)}</span>" if d.note else "")
            + ("" if d.iteration is not None else f" — <i>{_e(d.suggestion)}</i>")
            for d in r.decisions
        )  # fmt: skip
        speedup = (_e(r.speedup_label) or _x(r.speedup)) + (f"<br><small>{_e(r.versus)}</small>" if r.versus else "")
        if r.constant:
            status += f" <span class=note title='{_e(CONSTANT_LEGEND)}'>{CONSTANT_MARK}</span>"
        rows.append([str(r.number), _e(r.phase), status, speedup, time, share, _e(", ".join(r.flags)) or "—", decided or "—"])
    header = ("iter", "phase", "status", "speedup (eager; vs torch.compile)", "kernel time (spread)", "own-kernel share", "flags", "human decision and note")
    legend = f"<p class=note>{_e(CONSTANT_LEGEND)}</p>" if any(r.constant for r in shown) else ""
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


def _environment(best: Any, device: str) -> str:
    """Where the best kernel ran. Only a GPU session names the driver and ncu's clocks: a CPU session was
    never profiled by Nsight Compute, and its page must not suggest it was."""
    result = best.eval_result if best is not None else {}
    env = result.get("env") or {}
    torch = (f"{env.get('torch', '—')}",)
    if device == "cpu":
        rows = [("device", f"CPU ({env['cpu']})" if env.get("cpu") else "CPU"), ("torch", torch[0])]
    else:
        rows = [
            ("GPU", env.get("gpu") or env.get("device") or device or "—"),
            ("driver", env.get("driver") or "—"),
            ("clocks", env.get("clocks") or "not recorded (ncu ran with --clock-control none)"),
            ("torch", f"{torch[0]} (CUDA {env.get('torch_cuda') or '—'})"),
        ]
    rows += [
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
    elif report.device == "cpu":
        parts.append("<p class=note>No roofline: the session was evaluated on the CPU.</p>")
    else:
        parts.append("<p class=note>No roofline: the best kernel has no Nsight Compute summary (not profiled, or the fallback profiler ran).</p>")
    return "".join(parts)


def _intro(report: Report) -> str:
    best, branches = report.best, len(report.sections)
    total = sum(len(rows) for _, rows in report.sections)
    text = f"Task <b>{_e(report.task_name)}</b>, {branches} branch{'es' if branches != 1 else ''}, {total} iterations. "
    if best is None:
        return f"<p>{text}No correct kernel.</p>"
    text += f"Best: iteration {best.number}, {_x(best.speedup)} over eager PyTorch, on branch <b>{_e(report.branch)}</b>"
    top = any(s.branch == report.branch and s.verdict == SESSION_BEST for s in report.standings)
    return f"<p>{text}{' (the session best)' if top else ''}.</p>"


def _best_kernel(report: Report) -> str:
    best, seed = report.best, report.seed
    if best is None or seed is None:
        return "<p>No correct kernel on this branch.</p>"
    label = ranking.label(ranking.measured(report.branch, best))
    return (
        f"<p>Branch {_e(report.branch)}'s best, iteration {best.number} ({_e(label)}); diff from the seed "
        f"(iteration {seed.number}) to iteration {best.number}:</p>"
        + _diff_html(seed.kernel_source, best.kernel_source, f"iter {seed.number}", f"iter {best.number}")
    )


def _what_moved(report: Report) -> str:
    best, old = report.best, report.compared
    if best is None or old is None or old.number == best.number:
        return "<p>Nothing to compare: the best kernel is the first iteration, or there is none.</p>"
    diff = iteration_diff(old.eval_result, old.profile, best.eval_result, best.profile)
    if report.device == "cpu" and diff.missing:  # a CPU run is never profiled: no missing profile to name
        diff.missing = "no kernel metrics: the session was evaluated on the CPU"
    return f"<pre>{_e(chr(10).join(diff_lines(diff, f'iter {old.number}', f'iter {best.number}')))}</pre>"


def render_html(report: Report) -> str:
    """The whole page, self-contained: the session's branches first, then the chosen branch's best in
    detail, then every branch's iterations, each once."""
    parts = [
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>cudaforge report: {_e(report.session)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>cudaforge report: {_e(report.session)}</h1>",
        _intro(report),
        "<h2>Task</h2>",
        f"<pre>{_e(report.task_source)}</pre>",
        "<h2>Branches</h2>",
        leaderboard_html(report.ranked_by, report.standings) if report.standings else "<p>No branches.</p>",
        "<h2>Best kernel</h2>",
        _best_kernel(report),
        "<h2>Shapes</h2>",
        shapes_html(report.best, report.branch),
        "<h2>Charts</h2>",
        _charts(report),
        "<h2>Iterations</h2>",
    ]
    for section, rows in report.sections:
        parts += [section_heading(section), _iteration_table(rows) if rows else ""]
    parts += ["<h2>What moved</h2>", _what_moved(report), "<h2>Environment</h2>"]
    parts += [_environment(report.best, report.device), "</body></html>"]
    return "\n".join(parts)
