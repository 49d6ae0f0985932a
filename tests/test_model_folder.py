"""A model folder read back (engine.model.folder) and shown as one page (engine.model.report): the tasks'
sessions, the best over every branch, the end-to-end estimate beside what apply measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.model.folder import TaskState, end_to_end_line, estimate, load
from engine.model.report import render
from engine.model.spec import ModelError
from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, python_path

TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()


def module(path: str, share: float, ms: float, leaf: bool = True) -> dict:
    return {"path": path, "type": "torch.nn.modules.linear.Linear" if leaf else "m.Net", "calls": 1, "leaf": leaf,
            "share": {"self": share if leaf else 0.0, "total": share}, "self_ms": ms if leaf else 0.0, "total_ms": ms,
            "args": [{"t": "tensor", "shape": [8, 4], "dtype": "float32"}], "kwargs": {}, "floor": None, "headroom": None}  # fmt: skip


def make_folder(root: Path, applied: dict | None = None) -> Path:
    (root / "tasks").mkdir(parents=True)
    for name in ("relu", "relu_2"):
        (root / "tasks" / f"{name}.py").write_text(TASK)
    manifest = {
        "model": "net.py:make", "spec": {"dtype": "fp32"}, "device": "cpu", "gpu": None,
        "tasks": [{"name": "relu", "file": "tasks/relu.py", "paths": ["a.0", "a.1"], "share": 0.5},
                  {"name": "relu_2", "file": "tasks/relu_2.py", "paths": ["b"], "share": 0.2}],
        "skipped": [{"paths": ["c"], "type": "m.Holder", "share": 0.1, "reason": "constructor argument `inner` is a module"}],
    }  # fmt: skip
    profile = {"model": "net.py:make", "device": "cpu", "gpu": None, "dtype": "fp32", "device_ms": 2.0,
               "latency": {"median_ms": 1.5, "q1_ms": 1.4, "q3_ms": 1.6, "runs": 50},
               "modules": [module("", 1.0, 2.0, leaf=False), module("a.0", 0.25, 0.5), module("a.1", 0.25, 0.5), module("b", 0.2, 0.4)]}  # fmt: skip
    (root / "manifest.json").write_text(json.dumps(manifest))
    (root / "profile.json").write_text(json.dumps(profile))
    if applied:
        (root / "apply.json").write_text(json.dumps(applied))
    return root


def test_the_estimate_is_amdahls_over_the_tasks_with_a_correct_kernel() -> None:
    tasks = [TaskState("a", Path("a"), ["x"], 0.5, best_speedup=2.0), TaskState("b", Path("b"), ["y"], 0.2, best_speedup=4.0),
             TaskState("c", Path("c"), ["z"], 0.2)]  # fmt: skip
    found = estimate(tasks)
    assert found["speedup"] == pytest.approx(1 / (1 - 0.7 + 0.25 + 0.05)) and found["tasks"] == 2
    assert found["covered"] == pytest.approx(0.7)
    assert estimate(tasks[2:])["speedup"] is None


def test_a_tasks_best_is_the_best_over_every_branch_and_the_line_says_estimate_and_measured(tmp_path: Path) -> None:
    applied = {"kernels": [], "whole": {"status": "correct", "speedup": 1.1, "interval": [1.0, 1.2],
               "baselines": {"default": {"eager_ms": 3.0, "compiled_ms": 2.0, "speedup": 0.73}}}}  # fmt: skip
    root = make_folder(tmp_path / "m", applied)
    with SessionRepo.create(root / "sessions", root / "tasks" / "relu.py", name="relu") as repo:
        repo.record_iteration(kernel_source=KERNEL, eval_result={"status": "correct", "speedup": 1.5, "stage": "time"}, phase="seed")
        repo.branch_from(0, name="faster")
        repo.record_iteration(kernel_source=KERNEL + "\n# v2\n", eval_result={"status": "correct", "speedup": 2.0, "stage": "time"}, phase="optimize", branch="faster")
    folder = load(root)
    relu, other = folder.tasks
    assert (relu.best_speedup, relu.best_branch, relu.best_iteration, relu.iterations) == (2.0, "faster", 1, 2)
    assert other.session is None and other.best_speedup is None
    line = end_to_end_line(folder)
    assert "estimated end to end 1.33x from 1 task(s)' best (50% of the device time)" in line
    assert "measured by apply 1.10x (1.00–1.20), torch.compile 1.50x" in line


def test_a_folder_without_a_manifest_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="is not a folder cudaforge extract wrote"):
        load(tmp_path)


def test_the_model_report_holds_the_profile_the_tasks_and_the_end_to_end(tmp_path: Path) -> None:
    applied = {
        "kernels": [{"label": "relu", "task": "relu", "paths": ["a.0", "a.1"], "status": "correct", "speedup": 1.8, "interval": [1.7, 1.9]}],
        "whole": {"status": "incorrect", "speedup": None}, "failure": "the whole model with the kernels is incorrect: output[0] differs",
        "tolerance": {"dtype": "bfloat16", "default": 0.01, "used": 0.113, "factor": 3.0, "noise": {"truth": "float32", "deviation": 0.0377}},
    }  # fmt: skip
    root = make_folder(tmp_path / "m", applied)
    with SessionRepo.create(root / "sessions", root / "tasks" / "relu.py", name="relu") as repo:
        repo.record_iteration(kernel_source=KERNEL, eval_result={"status": "correct", "speedup": 1.5, "stage": "time"}, phase="seed")
    page = render(root)
    for expected in ("Where the time goes", "Eager forward 1.500 ms", "a.0", "constructor argument `inner` is a module",
                     "tolerance 0.113", "own deviation from its float32 run is 0.0377", "Refused: the whole model",
                     "relu: best kernel (branch main, iteration 0)", "cf_relu_cpu", "<td class=num>1.80x</td>"):  # fmt: skip
        assert expected in page, expected
    done = subprocess.run([sys.executable, "-m", "tui.cli", "report", str(root), "-o", str(tmp_path / "m.html")], capture_output=True, text=True,
                          env={"PYTHONPATH": python_path(), "PATH": "/usr/bin:/bin"}, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m.html").read_text() == render(root)


def test_the_terminal_table_names_a_row_from_its_nearest_shown_ancestor_and_says_what_cpu_time_is(tmp_path: Path) -> None:
    from engine.model.tables import profile_table

    profile = json.loads((make_folder(tmp_path / "m") / "profile.json").read_text())
    lines = profile_table(profile).splitlines()
    assert "operators' time under the profiler 2.000 ms per forward" in lines[1]
    [row] = [line for line in lines if line.lstrip().startswith("a.0")]
    assert row.startswith("  a.0 ") and "25.0%" in row  # "a" is no module of the profile: the row says a.0, under the model


def test_the_apply_table_keeps_a_long_kernel_paths_file_name_behind_an_ellipsis() -> None:
    from engine.model.tables import apply_table

    entry = {"task": "bottleneck_with_a_long_name", "paths": ["layer1.1", "layer1.2"], "status": "correct", "speedup": 0.5, "interval": [0.4, 0.6]}
    report = {"kernels": [{**entry, "label": "/tmp/cf-results/model/resnet50/tasks/tasks/bottleneck_2.py"}]}
    row = apply_table(report).splitlines()[1]
    assert row.startswith("…") and "bottleneck_2.py " in row and " …ck_with_a_long_name " in row
    assert row.index("bottleneck_2.py") + len("bottleneck_2.py") == 28  # the column keeps its width


def test_a_refused_kernels_line_in_apply_is_the_verdicts_reason_not_an_earlier_note() -> None:
    """The evaluator appends its verdict after its notes (which kernels one forward launched, say): apply
    names the reason (on the H200 it once printed the launch note as if it were the refusal)."""
    from engine.eval.result import EvalResult
    from engine.model.apply import summary

    result = EvalResult(status="rejected", messages=[
        "kernels launched by one forward: rmsnorm_kernel<8>(...)",
        "refused by the runtime guard [output-replayed]: a seen call launched none of its own kernels",
    ])  # fmt: skip
    assert summary(result)["message"].startswith("refused by the runtime guard [output-replayed]")
    assert summary(EvalResult(status="correct", messages=["kernels launched by one forward: k"]))["message"] == ""
