"""Where a round's time goes (engine/eval/stagetimes.py), and the parent's own cost of starting one.

``outside`` is the wall time of ``evaluate`` that no worker stage explains; every front end reads the
same breakdown (the eval summary, the headless table, the TUI's checks table and status line).
"""

from __future__ import annotations

import subprocess
import sys

from engine.eval import stagetimes
from tests.conftest import REPO

DURATIONS = {
    "process_start": 0.1, "setup": 0.9, "reference": 0.4, "build": 1.8, "check": 0.6, "time": 0.4,
    "ablation": 0.1, "shapes": 0.3, "done": 0.0, "total": 4.6, "evaluate": 5.0, "defence_nan_fill": 0.01,
}  # fmt: skip


def test_the_stages_and_what_no_stage_explains() -> None:
    parts = stagetimes.breakdown(DURATIONS)
    assert list(parts) == ["start", "reference", "build", "check", "time", "late", "outside"]
    assert round(parts["start"], 3) == 1.0 and round(parts["late"], 3) == 0.4
    assert round(parts["outside"], 3) == round(5.0 - 4.6, 3)  # the sub-stage and total keys are not stages
    assert stagetimes.total(DURATIONS) == 5.0
    text = stagetimes.line(DURATIONS, profile_s=6.1)
    assert text == "start 1.0 · reference 0.4 · build 1.8 · check 0.6 · time 0.4 · late 0.4 · profile 6.1 · outside 0.4 s"


def test_a_gated_checks_wait_for_its_gpu_is_its_own_stage_and_column(tmp_path) -> None:
    """An exploration's check waits, built, for its GPU (engine/eval/pipe.py, GPU_WAIT): that wait is
    neither the harness's time (``outside``) nor the build's, and the headless table shows its column
    only where an evaluation had one."""
    from engine.cli.run import stage_table
    from sessions.records import IterationRecord
    from sessions.repo import SessionRepo

    waited = {**DURATIONS, "gpu_wait": 3.0, "total": 7.6, "evaluate": 8.0}
    parts = stagetimes.breakdown(waited)
    assert list(parts)[:2] == ["start", "gpu wait"] and parts["gpu wait"] == 3.0
    assert round(parts["outside"], 3) == round(8.0 - 7.6, 3)
    session = SessionRepo.create(tmp_path / "sessions", REPO / "examples" / "tasks" / "relu.py", name="t")
    try:
        kernel = (REPO / "examples" / "kernels" / "relu_cpu.py").read_text()
        session.record_iteration(IterationRecord(kernel, {"status": "correct", "durations": DURATIONS}, phase="seed"))
        assert "gpu wait" not in stage_table(session, "main")[0]
        session.record_iteration(IterationRecord(kernel, {"status": "correct", "durations": waited}))
        header, first, second = stage_table(session, "main")
        column = header.index("gpu wait")
        assert first[column] == "" and second[column] == "3.0"
    finally:
        session.close()


def test_torch_compile_baselines_are_their_own_stage_not_the_harnesss_time() -> None:
    """Measured by the evaluating process after the verdict (a minute of max-autotune on the H200's first
    correct round): counted as ``outside`` it read as the harness's own cost."""
    durations = {**DURATIONS, "baselines": 47.5, "evaluate": 52.5}
    parts = stagetimes.breakdown(durations)
    assert list(parts) == ["start", "reference", "build", "check", "time", "late", "baselines", "outside"]
    assert parts["baselines"] == 47.5 and round(parts["outside"], 3) == round(5.0 - 4.6, 3)
    assert stagetimes.total(durations) == 52.5
    assert stagetimes.line(durations).endswith("late 0.4 · baselines 47.5 · outside 0.4 s")


def test_a_refused_or_unmeasured_evaluation_has_no_stages() -> None:
    assert stagetimes.breakdown({"guard": 0.003, "evaluate": 0.01}) == {"outside": 0.01}
    assert stagetimes.breakdown(None) == {} and stagetimes.line(None) == "" and stagetimes.total({}) is None
    older = {"process_start": 0.1, "setup": 2.0, "build": 1.0}  # before evaluate's own wall was recorded
    assert "outside" not in stagetimes.breakdown(older) and stagetimes.total(older) == 3.1


def test_the_status_line_says_where_the_committed_rounds_time_went() -> None:
    from tui.loop_status import round_timing

    class Item:
        number = 3

        def files(self) -> list[str]:
            return ["eval.json", "loop.json"]

        def read_json(self, name: str) -> dict:
            return {"durations": DURATIONS} if name == "eval.json" else {"stage_seconds": {"profile": 6.1}}

    assert round_timing(3, Item()) == f"#3 11.1 s: {stagetimes.line(DURATIONS, 6.1)}"
    assert round_timing(4, Item()) == ""  # another iteration's record says nothing about #4


def test_auto_resolves_without_importing_torch_on_a_cpu_build() -> None:
    """A front end that only hands work to a worker must not spend 2-3 s importing torch to learn the device."""
    code = (
        "import os, sys; from engine.eval.options import resolve_device, cuda_available; "
        "print(resolve_device('auto'), 'torch' in sys.modules); os.environ['CUDA_VISIBLE_DEVICES'] = ''; "
        "print(cuda_available(), 'torch' in sys.modules); import torch; print(cuda_available() == torch.cuda.is_available())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    import torch

    if torch.version.cuda is None:  # a CPU build of torch: the build file alone decides
        assert done.stdout.split("\n")[:2] == ["cpu False", "False False"], done.stderr
    assert done.stdout.split("\n")[2] == "True", done.stderr


def test_the_headless_round_table_gives_baselines_a_column_only_where_they_were_measured(tmp_path) -> None:
    """The table after `cudaforge run`, read from a real session repository's eval.json records."""
    from engine.cli.run import stage_table
    from sessions.records import IterationRecord
    from sessions.repo import SessionRepo

    session = SessionRepo.create(tmp_path / "sessions", REPO / "examples" / "tasks" / "relu.py", name="t")
    try:
        kernel = (REPO / "examples" / "kernels" / "relu_cpu.py").read_text()
        result = {"status": "correct", "speedup": 1.0, "durations": DURATIONS}
        session.record_iteration(IterationRecord(kernel, result, phase="seed"))
        assert stage_table(session, "main")[0] == [
            "iter", "start", "reference", "build", "check", "time", "late", "outside", "profile", "total"
        ]  # fmt: skip
        measured = {**result, "durations": {**DURATIONS, "baselines": 47.5, "evaluate": 52.5}}
        session.record_iteration(IterationRecord(kernel, measured))
        header, first, second = stage_table(session, "main")
        assert header[7:9] == ["baselines", "outside"]
        assert first[7] == "" and second[7] == "47.5" and second[8] == "0.4" and second[-1] == "52.5"
    finally:
        session.close()
