"""The evaluator→worker job contract (engine/eval/job.py): one type both ends use; bad jobs are named, not guessed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.eval.job import JOB_VERSION, JobError, WorkerJob
from engine.eval.options import EvalOptions
from engine.eval.supervisor import WorkerSupervisor
from engine.eval.timing import TimingPlan
from engine.guard.policy import GuardSettings
from tests.conftest import REPO


def a_job(tmp_path: Path, **changes: object) -> WorkerJob:
    base = WorkerJob(
        task_path=str(tmp_path / "task.py"),
        kernel_path=str(tmp_path / "kernel.py"),
        cache_root=str(tmp_path / "cache"),
        device="cpu",
        seed=7,
        trials=3,
        tolerances={"float32": 1e-4},
        timing=TimingPlan(min_trials=5, budget_s=1.0),
        relax_runtime=("timing-access",),
        kernel_names=("relu_kernel",),
    )
    return WorkerJob(**{**base.__dict__, **changes})


def test_a_job_survives_the_file_unchanged(tmp_path: Path) -> None:
    job = a_job(tmp_path)
    assert WorkerJob.read(job.write(tmp_path / "job.json")) == job
    untimed = a_job(tmp_path, timing=None)
    assert not WorkerJob.read(untimed.write(tmp_path / "u.json")).do_timing and job.do_timing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(trails=5), "unknown job field(s): trails"),
        (lambda d: d.pop("seed"), "incomplete job"),
        (lambda d: d.update(trials="5"), "job field trials should be int"),
        (lambda d: d.update(guards=1), "job field guards should be bool"),
        (lambda d: d.update(seed=True), "job field seed should be int"),
        (lambda d: d.update(relax_runtime="timing-access"), "job field relax_runtime"),
        (lambda d: d["timing"].update(budget="1"), "unknown field(s) in job field timing: budget"),
        (lambda d: d["timing"].update(min_trials=2.5), "job field timing.min_trials should be int"),
        (lambda d: d.update(version=JOB_VERSION + 1), "different cudaforge installs"),
    ],
)
def test_a_bad_field_is_named(tmp_path: Path, change, message: str) -> None:
    data = a_job(tmp_path).to_dict()
    change(data)
    with pytest.raises(JobError) as caught:
        WorkerJob.from_dict(json.loads(json.dumps(data)))
    assert message in str(caught.value)


def test_the_evaluator_writes_what_its_options_say(tmp_path: Path) -> None:
    options = EvalOptions(
        device="cpu", trials=4, seed=9, do_timing=False, guard=GuardSettings(relax=("timing-access", "output-cached")),
        cpu_threads=2,
    )  # fmt: skip
    run = WorkerSupervisor(tmp_path, options, tmp_path / "cache", None, ["k"])
    job = WorkerJob.read(run.write_job("task", "kernel", "relu"))
    assert (job.trials, job.seed, job.timing, job.cpu_threads, job.task_name) == (4, 9, None, 2, "relu")
    # the worker gets the runtime rules only: timing-access is the static guard's
    assert job.relax_runtime == ("output-cached",) and job.kernel_names == ("k",)
    assert Path(job.task_path).read_text() == "task" and Path(job.kernel_path).read_text() == "kernel"


def test_the_worker_reports_a_bad_job_instead_of_running_it(tmp_path: Path) -> None:
    data = a_job(tmp_path).to_dict()
    data["trails"] = 5
    path = tmp_path / "job.json"
    path.write_text(json.dumps(data))
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "CUDAFORGE_VERDICT_FD": str(write_fd), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "engine.eval.worker", str(path)],
        env=env,
        pass_fds=(write_fd,),
        capture_output=True,
        text=True,
        timeout=120,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        messages = [json.loads(line) for line in pipe.read().splitlines()]
    assert done.returncode == 1
    result = next(m["result"] for m in messages if m["type"] == "result")
    assert result["status"] == "runtime_error" and result["error"]["type"] == "JobError"
    assert "unknown job field(s): trails" in result["messages"][0]


def test_the_result_records_every_option_but_the_machine_local_ones() -> None:
    from dataclasses import fields

    from engine.eval.options import NOT_RECORDED
    from engine.eval.tolerances import DEFAULT_TOLERANCES

    options = EvalOptions(trials=3, guard=GuardSettings(relax=("timing-access",)), tolerances={"float32": 1e-3})
    recorded = options.settings()
    # the guard settings are recorded flat, under the keys results have always had
    flat = {"relax", "guard_policy", "refuse"}
    assert set(recorded) == ({f.name for f in fields(EvalOptions)} - NOT_RECORDED - {"guard"}) | flat
    assert "device" not in recorded and "cache_root" not in recorded
    assert (
        recorded["relax"] == ["timing-access"]
        and recorded["timing"]["min_trials"] == options.timing.min_trials
    )
    assert recorded["tolerances"] == {**DEFAULT_TOLERANCES, "float32": 1e-3}
    assert json.loads(json.dumps(recorded)) == recorded  # stored in git as JSON


def test_a_job_the_worker_refuses_is_the_harness_fault_not_the_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.eval.evaluate import evaluate
    from engine.eval.options import EvaluationError

    def foreign_job(self: WorkerJob, path: Path) -> Path:  # as an evaluator of another version would write
        path.write_text(json.dumps({**self.to_dict(), "version": JOB_VERSION + 1}))
        return path

    monkeypatch.setattr(WorkerJob, "write", foreign_job)
    task = (REPO / "examples" / "tasks" / "relu.py").read_text()
    with pytest.raises(EvaluationError, match="refused its job.*different cudaforge installs"):
        evaluate(task, "", EvalOptions(device="cpu", cache_root=tmp_path / "cache", sandbox="off"))
