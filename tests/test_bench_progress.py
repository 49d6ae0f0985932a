"""What the bench shows while it runs: the live bar on a terminal, plain lines elsewhere.

The child lines fed in below are the ones ``cudaforge run --headless`` prints (see
tests/test_bench_cli.py for the same lines coming from real runs).
"""

from __future__ import annotations

import io
import os
import re

from engine.batch.progress import LineProgress, LiveProgress, TaskState, make_progress

LINES = [
    "session relu · branch main · /tmp/s",
    "iter 0 · seed (seed)",
    "iter 0 · evaluate (seed)",
    "iter 0 ·   → correct · 0.88x",
    "iter 1 · judge (optimize)",
    "iter 1 · evaluate (optimize)",
    "iter 1 ·   → incorrect · -",
    "iter 2 · evaluate (optimize)",
]


def test_task_state_tracks_stage_round_and_best() -> None:
    state = TaskState("relu")
    results = [state.update(line) for line in LINES]
    assert results == [False, False, False, True, False, False, True, False]  # result lines are marked
    assert (state.round, state.stage, state.best) == (2, "evaluate", 0.88)  # the wrong kernel did not count
    assert state.describe(10) == "round 2/10 · evaluate · best 0.88x"
    assert TaskState("x").describe(None) == "round - · starting · best -"


def test_line_progress_prints_every_line_with_the_best_so_far() -> None:
    out = io.StringIO()
    progress = LineProgress(2, out)
    progress.skipped("done_one", "already done, skipped")
    progress.started("relu", "GPU 1", resumed=False)
    for line in LINES:
        progress.line("relu", line)
    progress.finished("relu", "done · exit 0")
    text = out.getvalue().splitlines()
    assert text[0] == "[1/2 done] done_one: already done, skipped"
    assert text[1] == "[relu] starting on GPU 1"
    assert "[relu] iter 1 · judge (optimize)  (best 0.88x)" in text
    assert text[-1] == "[2/2 done] relu: done · exit 0"


def test_live_progress_shows_a_bar_and_one_line_per_running_task() -> None:
    out = io.StringIO()
    progress = LiveProgress(3, out, rounds=10, width=100)
    progress.started("relu", "GPU 0", resumed=False)
    progress.started("softmax", "GPU 1", resumed=True)
    for line in LINES:
        progress.line("relu", line)
    progress.line("softmax", "iter 4 · profile (optimize)")
    progress.finished("matmul", "done · exit 0 · best 1.20x")
    progress.close()
    text = out.getvalue()
    assert "[relu] starting on GPU 0" in text and "[softmax] continuing on GPU 1" in text
    assert "[relu] iter 0 ·   → correct · 0.88x" in text  # result lines are printed above the block
    assert "[relu] iter 1 · judge" not in text  # stage lines only update the block
    assert "[1/3 done] matmul: done · exit 0 · best 1.20x" in text
    final = text.rsplit("1/3 done ·", 1)[1]  # the last redraw of the live block
    assert "2 running" in final
    assert "relu (GPU 0)" in final and "round 2/10 · evaluate · best 0.88x" in final
    assert "softmax (GPU 1)" in final and "round 4/10 · profile · best -" in final
    assert "━" in text  # the bar itself


def test_auto_picks_the_bar_on_a_terminal_and_lines_elsewhere() -> None:
    assert type(make_progress("auto", 1, io.StringIO())) is LineProgress
    parent, child = os.openpty()
    with os.fdopen(child, "w") as terminal:
        progress = make_progress("auto", 1, terminal)
        assert isinstance(progress, LiveProgress)
        progress.close()
    os.close(parent)
    assert type(make_progress("lines", 1, io.StringIO())) is LineProgress


def test_the_lines_view_says_what_each_running_pair_is_doing_on_a_heartbeat() -> None:
    """A pair that takes minutes is never silent: its stage and how long it has run, every heartbeat."""
    from engine.evalset.progress import EvalsetLines
    from tests.conftest import until

    out = io.StringIO()
    progress = EvalsetLines(2, out, heartbeat_s=0.05)
    progress.started("level_1_problem_19", "GPU 0", False)
    progress.stage("level_1_problem_19", "build")
    assert until(lambda: progress.beats >= 1)
    progress.finished("level_1_problem_19", "correct")
    beats = progress.beats
    assert until(lambda: progress.beats > beats)  # a beat with nothing running prints nothing
    progress.close()
    lines = out.getvalue().splitlines()
    still = [line for line in lines if "still" in line]
    assert still and all(re.fullmatch(r"\[level_1_problem_19\] still build · \d+m\d\ds", line) for line in still), lines
    assert lines.index(still[-1]) < next(i for i, line in enumerate(lines) if "1/2 done" in line)
