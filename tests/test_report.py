"""``cudaforge report``: one self-contained HTML page of a session (engine/batch/report.py), rendered by
headless Chromium (Debian's ``chromium``) to check it is a real page, and read against the records."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.batch.report import gather, render_html, roofline_rows
from engine.loop.history import rows_from_iterations
from engine.profile.summary import roofline_position
from sessions.repo import SessionRepo
from tui.demo import unpack

REPO = Path(__file__).resolve().parent.parent
HEADINGS = ("Task", "Branches", "Best kernel", "Shapes", "Charts", "Iterations", "What moved", "Environment")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def page(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "relu.html"
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "report", str(demo), "-o", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}: relu-demo, branch main, 4 iterations, best #2 0.95x" in done.stdout  # #3 is within #2's spread
    return out


def test_the_page_is_self_contained(page: Path) -> None:
    text = page.read_text()
    assert "<script" not in text.lower()
    # nothing fetched: every src and href is a data URI or an in-page anchor
    for link in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert link.startswith(("data:", "#")), link
    assert len(re.findall(r'src="data:image/png;base64,', text)) == 2  # the speedup chart and the roofline


def test_its_numbers_are_the_records_the_headless_table_prints(demo: Path) -> None:
    with SessionRepo.open(demo) as repo:
        report = gather(repo)
        history = repo.history()
        printed = [(r.iteration, r.speedup, r.decision) for r in rows_from_iterations(history) if r.iteration is not None]
        shown = [(r.number, r.speedup, r.decisions[-1].decision) for r in report.rows]
        assert shown == printed
        best = repo.best()
        [kernel] = best.profile["summary"]["data"]["kernels"]
        [row] = roofline_rows(best.profile)
        assert row["roof"] == "memory" and row["percent"] == kernel["dram_pct_of_peak"]  # no FLOPs: memory roof
        page = render_html(report)
    assert f"{row['percent']:.0f}% (memory)" in page
    assert f"Best: iteration {best.number}, {best.speedup:.2f}x" in page
    assert "relu_vec4_kernel" in page and "GPU" in page


def test_the_limiting_roof_is_the_lower_one_at_the_kernels_intensity() -> None:
    # H200-like peaks: 4800 GB/s, 60 TFLOP/s; at 10 FLOP/B the memory roof is 48 TFLOP/s
    point = {"arithmetic_intensity": 10.0, "tflops": 24.0, "peak_tflops": 60.0, "peak_bandwidth_gbs": 4800.0}
    roof, percent = roofline_position(point)
    assert roof == "memory" and percent == pytest.approx(50.0)
    point = {**point, "arithmetic_intensity": 100.0, "tflops": 30.0}  # 480 > 60: the compute roof
    roof, percent = roofline_position(point)
    assert roof == "compute" and percent == pytest.approx(50.0)
    profile = {"summary": {"data": {"kernels": [{"name": "gemm(float *)", **point, "bound": "compute-bound"}]}}}
    [row] = roofline_rows(profile)
    assert (row["roof"], row["percent"]) == ("compute", pytest.approx(50.0))


def test_a_missing_branch_is_an_error_and_nothing_is_written(demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.html"
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "report", str(demo), "--branch", "nope", "-o", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "has no branch 'nope'" in done.stderr and not out.exists()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (CI installs it)")
def test_headless_chromium_renders_the_page_with_its_headings(page: Path, tmp_path: Path) -> None:
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, env=env)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for heading in HEADINGS:
        assert f"<h2>{heading}</h2>" in dom.stdout
    shot = tmp_path / "page.png"
    done = subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.std() > 0.05  # not a blank page: text, the diff's colours, the charts
    dark = (pixels.mean(axis=2) < 0.5).mean()
    assert 0.005 < dark < 0.5


def test_a_session_without_a_correct_kernel_or_without_iterations_still_reports(tmp_path: Path) -> None:
    from tests.test_tui_fixtures import TASK, eval_dict, kernel

    with SessionRepo.create(tmp_path, task_source=TASK, task_name="relu", name="failed") as repo:
        repo.record_iteration(kernel_source=kernel(0), eval_result=eval_dict("compile_error", None), phase="seed")
        page = render_html(gather(repo))
    assert "No correct kernel." in page and "Nothing to compare" in page and "compile_error" in page
    with SessionRepo.create(tmp_path, task_source=TASK, task_name="relu", name="empty") as repo:
        page = render_html(gather(repo))
    assert "0 iterations" in page and "No iterations yet: nothing to chart." in page
    assert "def get_inputs():" in page  # the task, from the session's first commit


def test_an_iteration_whose_exact_answer_is_constant_to_rounding_is_marked_with_a_legend() -> None:
    from engine.batch.report import IterationRow, _iteration_table
    from engine.eval.arbiter import CONSTANT_LEGEND, CONSTANT_MARK

    def row(number: int, constant: bool) -> IterationRow:
        return IterationRow(number, "optimize", "correct", 2.0, 1.0, 0.1, None, [], "", constant=constant)

    plain = _iteration_table([row(1, False)])
    assert CONSTANT_MARK not in plain and "constant to rounding" not in plain
    marked = _iteration_table([row(1, False), row(2, True)])
    assert marked.count(f">{CONSTANT_MARK}</span>") == 1
    assert f"<p class=note>{CONSTANT_LEGEND}</p>" in marked
