"""cudaforge's own faults are never the kernel's (engine/eval/faults.py, issue 24).

Each fault is real: a module of cudaforge's that the worker cannot import (hidden by a
``sitecustomize`` on the worker's PYTHONPATH, as a broken install would), a build cache the hook
cannot write, the split grammar missing. The candidate is the honest example kernel throughout,
so any status other than ``harness_error`` would blame a kernel that did nothing wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from engine.events import EvalFinished, IterationCommitted, LoopError
from engine.loop.machine import ERROR
from tests.conftest import EXAMPLES, REPO, python_path
from tests.loop_helpers import make_loop, new_session

RELU_TASK = EXAMPLES / "tasks" / "relu.py"
RELU_KERNEL = EXAMPLES / "kernels" / "relu_cpu.py"

pytestmark = pytest.mark.slow


def hide_modules(monkeypatch: pytest.MonkeyPatch, folder: Path, *names: str) -> None:
    """Subprocesses started from now on cannot import ``names`` (a real import error, in a real process)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"HIDDEN = {list(names)!r}\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name in HIDDEN:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), python_path()]))


def options(cache: Path, **overrides) -> EvalOptions:
    return EvalOptions(device="cpu", cache_root=cache, timing=TimingPlan(min_trials=5, budget_s=1.0), **overrides)


def relu(cache: Path, kernel: str | None = None, **overrides):
    return evaluate(
        RELU_TASK.read_text(), kernel or RELU_KERNEL.read_text(), options(cache, **overrides), task_name="relu"
    )


def assert_harness(result, kind: str, stage: str) -> None:
    assert result.status == "harness_error", result.messages
    assert result.harness_fault["kind"] == kind and result.harness_fault["stage"] == stage
    assert result.failed_side == "harness" and not result.task_error and not result.ok
    assert "cudaforge's own fault" in result.messages[-1] and "not the kernel's" in result.messages[-1]


@pytest.mark.parametrize(
    ("module", "stage"),
    [("engine.eval.compare", "reference"), ("engine.guard.runtime", "check")],
    ids=["reference-stage", "check-stage"],
)
def test_an_import_error_in_cudaforges_own_code_is_not_the_kernels_nor_the_tasks(
    ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, stage: str
) -> None:
    hide_modules(monkeypatch, tmp_path / "site", module)
    result = relu(ext_cache)
    assert_harness(result, "import", stage)
    assert module.rsplit(".", 1)[-1] in result.harness_fault["message"]
    if stage == "check":
        assert result.build.extensions and result.build.extensions[0].ok  # the kernel built fine


def test_a_worker_that_cannot_start_is_not_the_kernels(
    ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_modules(monkeypatch, tmp_path / "site", "engine.eval.job")  # the worker's own first import
    result = relu(ext_cache)
    assert_harness(result, "import", "start")
    assert "engine.eval.job" in result.harness_fault["message"]


@pytest.mark.parametrize("candidate_catches_it", [False, True], ids=["raised", "caught-by-candidate"])
def test_a_build_cache_the_hook_cannot_write_is_not_the_kernels(tmp_path: Path, candidate_catches_it: bool) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "extensions").write_text("a file where the hook needs a folder")
    kernel = RELU_KERNEL.read_text()
    if candidate_catches_it:  # a candidate that swallows the failure and falls back to PyTorch
        kernel = kernel.replace("ext = load_inline(", "try:\n    ext = load_inline(", 1)
        kernel = kernel.replace("\n)\n", "\n)\nexcept Exception:\n    ext = None\n", 1)
        compile(kernel, "kernel.py", "exec")
    result = relu(cache, kernel, guards=False)
    assert_harness(result, "environment", "build")
    assert "build hook failed" in result.harness_fault["message"]


def test_cudaforge_eval_exits_3_and_says_it_is_no_verdict(
    ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_modules(monkeypatch, tmp_path / "site", "engine.eval.compare")
    env = {**os.environ, "CUDAFORGE_CACHE_DIR": str(ext_cache)}
    command = [sys.executable, "-m", "tui.cli", "eval", str(RELU_TASK), str(RELU_KERNEL), "--device", "cpu"]
    text = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert text.returncode == 3, text.stdout + text.stderr
    assert "HARNESS ERROR" in text.stdout and "NOT a verdict on the kernel" in text.stdout
    as_json = subprocess.run([*command, "--json"], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    data = json.loads(as_json.stdout)
    assert as_json.returncode == 3 and data["status"] == "harness_error" and data["failed_side"] == "harness"


def test_a_split_transform_that_crashes_builds_the_stock_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grammar missing (a plain install before issue 24): a slower build, never a failed kernel."""
    from engine.eval.build.extension import BuildRecorder
    from engine.eval.build.split import parse
    from tests.test_build_split import DISPATCH, _Compiler

    monkeypatch.setitem(sys.modules, "tree_sitter_cuda", None)  # import raises ImportError
    parse.parser.cache_clear()
    try:
        recorder = BuildRecorder(tmp_path, use_pch=False)
        recorder._original = compiler = _Compiler(fail_split=False)
        recorder._build("ext", "torch::Tensor square_cuda(torch::Tensor x);", DISPATCH, (), {})
    finally:
        parse.parser.cache_clear()
    [record] = recorder.builds
    assert record.path == "stock" and compiler.calls[0]["cuda"] == DISPATCH
    assert "split transform failed (ModuleNotFoundError" in (record.split_skipped or "")
    assert recorder.fault is None and any("split transform failed" in n for n in recorder.notices)


def test_the_loop_never_commits_a_harness_error_nor_shows_it_to_the_judge(
    ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = new_session(tmp_path)
    events: list = []
    loop = make_loop(session, ext_cache, "steady", events=events, rounds=1)
    loop.options.check_task = False  # the fault is injected for the evaluation alone
    # broken before the seed is written: the worker the loop starts ahead (engine.eval.spare) has it too
    hide_modules(monkeypatch, tmp_path / "site", "engine.eval.compare")
    assert loop.step() is None and loop.stage == "evaluate"  # the seed's kernel is written
    assert loop.step() == ERROR
    errors = [e for e in events if isinstance(e, LoopError)]
    assert len(errors) == 2 and "evaluating again" in errors[0].message  # retried once, then stopped
    assert all("cudaforge's own fault" in e.message and e.recoverable for e in errors)
    assert not [e for e in events if isinstance(e, (EvalFinished, IterationCommitted))]
    assert session.history() == [] and loop.stage == "evaluate"  # nothing committed; the stage is redone
    monkeypatch.undo()  # the install is repaired: the same stage now gives the kernel its verdict
    assert loop.step() is None
    loop.step()  # commit
    [seed] = session.history()
    assert seed.status == "correct" and seed.number == 0
    session.close()


def test_a_headless_run_stopped_by_cudaforges_fault_exits_3_and_resumes(
    ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker cannot import engine.eval.compare (the reference check needs it): nothing is committed,
    the run says whose fault it is and exits 3; once the install is whole the same session goes on."""
    from tests.test_loop_cli import command, env, project, scripted

    cwd = project(tmp_path)
    hide_modules(monkeypatch, tmp_path / "site", "engine.eval.compare")
    broken = {**env(ext_cache, tmp_path), "PYTHONPATH": os.environ["PYTHONPATH"]}
    args = command(tmp_path, str(RELU_TASK), "--auto-approve", "--device", "cpu", "--rounds", "1", *scripted("steady"))
    done = subprocess.run(args, capture_output=True, text=True, env=broken, cwd=cwd, timeout=600)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "cudaforge's own fault (import)" in done.stdout and "Traceback" not in done.stderr
    from sessions.repo import SessionRepo

    [path] = [p for p in (tmp_path / "s").iterdir() if p.is_dir()]
    with SessionRepo.open(path) as session:
        assert session.history() == []
    monkeypatch.undo()
    resumed = subprocess.run(
        [*command(tmp_path, "--session", str(path), "--auto-approve", "--device", "cpu", "--rounds", "1"),
         *scripted("steady")],
        capture_output=True, text=True, env=env(ext_cache, tmp_path), cwd=cwd, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    with SessionRepo.open(path) as session:
        assert [i.number for i in session.history()] == [0, 1]


def test_bench_shows_a_task_stopped_by_cudaforges_fault_apart_and_a_rerun_redoes_it(
    ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_bench_cli import bench_cmd, run, setup

    cwd, good_env = setup(tmp_path, ext_cache)
    out = tmp_path / "out"
    hide_modules(monkeypatch, tmp_path / "site", "engine.eval.compare")
    broken = {**good_env, "PYTHONPATH": os.environ["PYTHONPATH"]}
    first = run(bench_cmd(out, "--rounds", "1", "--workers", "2"), cwd, broken)
    data = json.loads((out / "summary.json").read_text())
    assert {t["status"] for t in data["tasks"]} == {"harness_error"}, first.stdout + first.stderr
    assert not any(t["correct"] for t in data["tasks"])
    again = run(bench_cmd(out, "--rounds", "1", "--workers", "2"), cwd, good_env)
    data = json.loads((out / "summary.json").read_text())
    assert again.returncode == 0, again.stdout + again.stderr
    assert {t["status"] for t in data["tasks"]} == {"done"} and all(t["correct"] for t in data["tasks"])


def test_a_candidate_that_fails_only_while_timed_is_still_the_candidates_fault(ext_cache: Path) -> None:
    """An exception no stage catches is judged by its traceback: through the candidate's file, its own."""
    kernel = RELU_KERNEL.read_text().replace(
        "        return ext.relu(x)",
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        if self.calls > 40:  # after the check's trials: only the timing loop gets here\n"
        "            raise RuntimeError('worn out')\n"
        "        return ext.relu(x)",
    )
    result = relu(ext_cache, kernel, guards=False)
    assert result.status == "runtime_error" and result.failed_side == "candidate", result.messages
    assert result.stage == "time" and "worn out" in result.messages[-1]


def test_a_reference_that_fails_only_while_timed_is_the_tasks_fault(ext_cache: Path) -> None:
    task = RELU_TASK.read_text().replace(
        "        return torch.relu(x)",
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        if self.calls > 40:\n"
        "            raise RuntimeError('the reference gave up')\n"
        "        return torch.relu(x)",
    )
    assert task != RELU_TASK.read_text()
    result = evaluate(task, RELU_KERNEL.read_text(), options(ext_cache), task_name="relu")
    assert result.status == "runtime_error" and result.failed_side == "reference" and result.task_error
    assert "the task's code failed in stage time" in result.messages[-1]


def test_a_candidate_cannot_pass_its_failure_off_as_cudaforges(ext_cache: Path) -> None:
    """Candidate code is hostile: raising cudaforge's own HarnessFault (to dodge the blame, or to stall
    a loop on 'harness errors') is still the candidate's runtime error."""
    kernel = RELU_KERNEL.read_text().replace(
        "        return ext.relu(x)",
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        if self.calls > 40:  # while timed: past the stages that catch a forward's exceptions\n"
        "            from engine.eval.faults import HarnessFault\n"
        "            raise HarnessFault('internal', 'not me')\n"
        "        return ext.relu(x)",
    )
    result = relu(ext_cache, kernel, guards=False)
    assert result.status == "runtime_error" and result.failed_side == "candidate", result.messages
    assert result.harness_fault is None
