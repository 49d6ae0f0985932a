"""``cudaforge bench`` as a real subprocess over a 2-task set with scripted providers on the CPU.

Both tasks are ReLU (different batch sizes) solved by the ``steady`` scenario's kernels, whose C++
is shared with the other loop tests, so the extension build comes from the shared cache.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.conftest import python_path
from tests.loop_helpers import SCRIPTED

pytestmark = pytest.mark.slow

SET = Path(__file__).resolve().parent / "fixtures" / "bench" / "set"
FAST_CONFIG = "[eval]\ntrials = 2\ntiming_trials = 5\ntiming_budget_s = 1.0\n"
STEADY = SCRIPTED / "steady"


def bench_cmd(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "engine.cli.bench", str(SET), "--out", str(out), "--device", "cpu",
        "--coder", f"scripted/{STEADY / 'coder'}", "--judge", f"scripted/{STEADY / 'judge'}", *extra,
    ]  # fmt: skip


def setup(tmp_path: Path, cache: Path) -> tuple[Path, dict[str, str]]:
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "cudaforge.toml").write_text(FAST_CONFIG)
    env = {
        **os.environ,
        "PYTHONPATH": python_path(),
        "CUDAFORGE_CACHE_DIR": str(cache),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }
    return cwd, env


def start_until(cmd: list[str], cwd: Path, env: dict[str, str], prefix: str) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``cmd`` in a session of its own and read its output up to the first line starting with
    ``prefix`` (within 300 s): the process, still running, and the lines read."""
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        seen.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return proc, seen
        assert time.monotonic() < deadline, seen
    raise AssertionError("\n".join(seen))


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
    )


def shas(session_dir: Path) -> list[str]:
    with SessionRepo.open(session_dir) as session:
        return [it.sha for it in session.history()]


def test_two_tasks_run_concurrently_and_are_summarised(tmp_path: Path, ext_cache: Path) -> None:
    cwd, env = setup(tmp_path, ext_cache)
    out = tmp_path / "out"
    done = run(bench_cmd(out, "--rounds", "1", "--workers", "2"), cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "not a KernelBench task" in lines[0] and "helper.py" in lines[0]
    # both tasks started before either finished: two workers really ran at once
    first_done = next(i for i, line in enumerate(lines) if line.startswith("[1/2 done]"))
    assert "[relu] starting" in lines[:first_done] and "[relu_small] starting" in lines[:first_done]
    assert any(line.startswith("[relu_small] iter 1 · evaluate") for line in lines)
    assert any(line.startswith("[2/2 done]") for line in lines)
    data = json.loads((out / "summary.json").read_text())
    assert [t["task"] for t in data["tasks"]] == ["relu", "relu_small"]
    for task in data["tasks"]:
        with SessionRepo.open(out / "sessions" / task["task"]) as session:
            assert [it.number for it in session.history()] == [0, 1]
            assert task["best_speedup"] == pytest.approx(session.best().speedup)
        assert task["status"] == "done" and task["rounds"] == 1 and task["correct"] is True
        assert task["minutes"] > 0
    assert data["set"]["correct_pct"] == 100.0 and data["set"]["fast_0.0"] == 1.0
    assert (out / "summary.csv").read_text().splitlines()[0].startswith("task,status,correct,best_speedup")
    table = done.stdout.split("task ", 1)[1]
    assert "correct 2/2 (100.0%)" in table


def test_killed_bench_resumes_without_redoing_finished_work(tmp_path: Path, ext_cache: Path) -> None:
    cwd, env = setup(tmp_path, ext_cache)
    out = tmp_path / "out"
    proc, _ = start_until(bench_cmd(out, "--rounds", "2", "--workers", "1"), cwd, env, "[relu] iter 1 · evaluate")
    os.killpg(proc.pid, signal.SIGKILL)  # the bench and its task subprocess, mid-evaluation
    proc.wait(timeout=30)
    relu = out / "sessions" / "relu"
    before = shas(relu)
    assert len(before) == 1  # the seed was committed, round 1 was not
    assert not (out / "sessions" / "relu_small").exists()  # one worker: not started yet

    again = run(bench_cmd(out, "--workers", "1"), cwd, env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[relu] continuing" in again.stdout and "[relu_small] starting" in again.stdout
    relu_stages = [line for line in again.stdout.splitlines() if line.startswith("[relu] iter ")]
    assert relu_stages[0].startswith("[relu] iter 1 · evaluate (optimize)")  # only the cut stage is redone
    after = shas(relu)
    assert after[:1] == before and len(after) == 3  # same seed commit, then rounds 1 and 2
    assert len(shas(out / "sessions" / "relu_small")) == 3  # the stored --rounds 2 was kept
    data = json.loads((out / "summary.json").read_text())
    assert [(t["task"], t["status"], t["rounds"]) for t in data["tasks"]] == [
        ("relu", "done", 2),
        ("relu_small", "done", 2),
    ]
    status = json.loads((out / "status" / "relu.json").read_text())
    assert status["attempts"] == 1  # the killed attempt never ended, so it was never recorded

    third = run(bench_cmd(out), cwd, env)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "[1/2 done] relu: already done, skipped" in third.stdout
    assert "[2/2 done] relu_small: already done, skipped" in third.stdout
    assert shas(relu) == after


def test_usage_errors_exit_2(tmp_path: Path, ext_cache: Path) -> None:
    cwd, env = setup(tmp_path, ext_cache)
    missing = run([sys.executable, "-m", "engine.cli.bench", str(tmp_path / "nope"), "--out", "o"], cwd, env)
    assert missing.returncode == 2 and "no such task file or folder" in missing.stderr
    gpus = run(bench_cmd(tmp_path / "o", "--gpus", "0,1"), cwd, env)
    assert gpus.returncode == 2 and "--gpus needs a CUDA device" in gpus.stderr
    assert not (tmp_path / "o").exists()


def test_a_task_whose_run_fails_is_an_error_in_the_summary(tmp_path: Path, ext_cache: Path) -> None:
    cwd, env = setup(tmp_path, ext_cache)
    out = tmp_path / "out"
    cmd = bench_cmd(out, "--rounds", "1", "--coder", f"scripted/{tmp_path / 'no-such-replies'}")
    done = run(cmd, cwd, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[relu] cudaforge run: " in done.stdout  # the child's error, under its task's name
    data = json.loads((out / "summary.json").read_text())
    assert [(t["task"], t["status"], t["correct"]) for t in data["tasks"]] == [
        ("relu", "error", False),
        ("relu_small", "error", False),
    ]
    assert data["set"]["correct_pct"] == 0.0 and data["set"]["mean_speedup"] is None


def test_ray_runs_the_set_with_the_compile_baseline_and_a_rerun_skips_both(
    tmp_path: Path, ext_cache: Path
) -> None:
    pytest.importorskip("ray")
    cwd, env = setup(tmp_path, ext_cache)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    out = tmp_path / "out"
    cmd = bench_cmd(out, "--rounds", "1", "--workers", "2", "--ray", "auto", "--compile-baseline")
    done = run(cmd, cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("bench: 2 task(s) · Ray at auto on cpu") for line in lines)
    # both Ray tasks ran at once on the local instance (2 CPUs, one each)
    first_done = next(i for i, line in enumerate(lines) if line.startswith("[1/2 done]"))
    starts = [line for line in lines[:first_done] if " starting on " in line]
    assert {line.split("]")[0] for line in starts} == {"[relu", "[relu_small"}
    data = json.loads((out / "summary.json").read_text())
    for task in data["tasks"]:
        assert task["status"] == "done" and task["rounds"] == 1 and task["correct"] is True
        baseline = json.loads((out / "baseline" / f"{task['task']}.json").read_text())
        assert baseline["compiled_matches"] is True and baseline["device"] == "cpu"
        ratio = baseline["eager_ms"] / baseline["compiled_ms"]
        assert task["compile_speedup"] == pytest.approx(ratio)
        assert task["speedup_vs_compile"] == pytest.approx(task["best_speedup"] / ratio)
        assert task["best_by_round"][-1] == pytest.approx(task["best_speedup"])
        log = (out / "logs" / f"{task['task']}.log").read_text()
        assert log.startswith("$ ") and "compile baseline: eager" in log  # the driver kept each log
    assert data["set"]["vs_compile_tasks"] == 2
    assert "against torch.compile (2 task(s))" in done.stdout
    for png in ("speedup_distribution.png", "best_by_round.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"

    measured = (out / "baseline" / "relu.json").read_text()
    again = run(bench_cmd(out, "--compile-baseline"), cwd, env)  # no Ray this time: same out, same result
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[1/2 done] relu: already done, skipped" in again.stdout
    assert "[2/2 done] relu_small: already done, skipped" in again.stdout
    assert (out / "baseline" / "relu.json").read_text() == measured  # not measured twice


def test_ray_without_ray_installed_is_a_usage_error(tmp_path: Path, ext_cache: Path) -> None:
    cwd, env = setup(tmp_path, ext_cache)
    blocker = tmp_path / "no_ray"
    (blocker / "ray").mkdir(parents=True)
    (blocker / "ray" / "__init__.py").write_text("raise ImportError('ray is blocked for this test')\n")
    env["PYTHONPATH"] = f"{blocker}{os.pathsep}{env['PYTHONPATH']}"
    done = run(bench_cmd(tmp_path / "o", "--ray", "auto"), cwd, env)
    assert done.returncode == 2 and "pip install 'cudaforge[ray]'" in done.stderr
    assert not (tmp_path / "o").exists()
