"""``cudaforge evalset`` end to end on the CPU: real subprocesses, real C++ builds, real workers.

The fixture kernels (tests/fixtures/evalset/pairs) share one C++ source, so the correct, the wrong
and the hanging kernel use one cached build; only the compile error compiles on its own. That source
includes pybind11, not torch's headers, so even a cold build takes seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.eval.result import EvalResult
from tests.conftest import python_path

pytestmark = pytest.mark.slow

PAIRS = Path(__file__).resolve().parent / "fixtures" / "evalset" / "pairs"
FAST_CONFIG = "[eval]\ntrials = 2\ntiming_trials = 5\ntiming_budget_s = 1.0\n"


def setup(tmp_path: Path, cache: Path, *names: str) -> tuple[Path, Path, dict[str, str]]:
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "cudaforge.toml").write_text(FAST_CONFIG)
    pairs = tmp_path / "pairs"
    for name in names:
        shutil.copytree(PAIRS / name, pairs / name)
    env = {
        **os.environ,
        "PYTHONPATH": python_path(),
        "CUDAFORGE_CACHE_DIR": str(cache),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }
    return cwd, pairs, env


def evalset(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "engine.cli.evalset", *args, "--device", "cpu", "--progress", "lines"]
    return subprocess.run(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900
    )


def result(out: Path, name: str) -> dict:
    return json.loads((out / "results" / f"{name}.json").read_text())


def test_pairs_folder_every_verdict_then_resume_then_timeout(tmp_path: Path, ext_cache: Path) -> None:
    cwd, pairs, env = setup(tmp_path, ext_cache, "ok", "wrong", "broken_build")
    out = tmp_path / "out"
    first = evalset(cwd, env, str(pairs), "--out", str(out), "--build-workers", "2")
    log = first.stdout + first.stderr
    assert first.returncode == 0, log
    assert "phase 1 · build + check 3 kernel(s), 2 at a time" in first.stdout
    assert "phase 2 · time 1 correct kernel(s), one at a time" in first.stdout
    statuses = {name: result(out, name)["status"] for name in ("ok", "wrong", "broken_build")}
    assert statuses == {"ok": "correct", "wrong": "incorrect", "broken_build": "compile_error"}, log
    ok = result(out, "ok")
    assert EvalResult.from_dict(ok).speedup == ok["speedup"] and ok["speedup"] > 0  # timed in phase 2
    assert ok["timing"]["candidate"]["n"] >= 5 and ok["evalset"]["phase"] == 2
    assert ok["evalset"]["phase1_seconds"] > 0 and ok["evalset"]["phase2_seconds"] > 0
    check = json.loads((out / "checks" / "ok.json").read_text())
    assert check["status"] == "correct" and check["timing"] is None  # phase 1 ran without timing
    assert "not_declared_anywhere" in result(out, "broken_build")["build"]["log"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["set"]["tasks"] == 3 and summary["set"]["correct"] == 1
    assert summary["status_counts"] == {"correct": 1, "incorrect": 1, "compile_error": 1}
    run = summary["time"]["this_run"]
    assert run["phase1_evaluations"] == 3 and run["phase2_evaluations"] == 1
    assert run["sum_evaluation_seconds"] == pytest.approx(
        run["phase1_sum_seconds"] + run["phase2_sum_seconds"]
    )
    assert run["wall_seconds"] > 0
    assert (out / "summary.csv").read_text().startswith("name,status,correct,speedup")
    assert "correct 1/3 (33.3%)" in first.stdout
    before = {
        p.name: (p.stat().st_mtime_ns, json.loads(p.read_text())["evalset"]["written_at"])
        for p in (out / "results").iterdir()
    }

    # a second run with a fourth pair: the three finished results are kept as they are
    shutil.copytree(PAIRS / "hangs", pairs / "hangs")
    # every stage gets the limit, the worker's start and setup too: 25 s leaves a loaded machine room to import torch
    second = evalset(cwd, env, str(pairs), "--out", str(out), "--build-workers", "2", "--timeout", "25")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "3 finished result(s) kept" in second.stdout
    assert "phase 1 · build + check 1 kernel(s)" in second.stdout and "phase 2" not in second.stdout
    hangs = result(out, "hangs")
    assert hangs["status"] == "timeout" and hangs["stage"] == "build", hangs["messages"]
    assert "25 s limit" in hangs["messages"][-1]
    assert hangs["settings"]["timeouts"]["build"] == 25.0  # --timeout reached the evaluator
    after = {
        p.name: (p.stat().st_mtime_ns, json.loads(p.read_text())["evalset"]["written_at"])
        for p in (out / "results").iterdir()
    }
    assert {k: after[k] for k in before} == before
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["time"]["this_run"]["already_done"] == 3
        and summary["time"]["this_run"]["phase1_evaluations"] == 1
    )
    assert summary["set"]["tasks"] == 4 and summary["status_counts"]["timeout"] == 1

    # a run killed during timing: the check is kept, so only the timing is redone
    (out / "results" / "ok.json").unlink()
    third = evalset(cwd, env, str(pairs), "--out", str(out))
    assert third.returncode == 0, third.stdout + third.stderr
    assert "1 checked kernel(s) go straight to timing" in third.stdout and "phase 1" not in third.stdout
    retimed = result(out, "ok")
    assert retimed["status"] == "correct" and retimed["speedup"] > 0
    assert retimed["evalset"]["phase1_seconds"] == ok["evalset"]["phase1_seconds"]  # carried from the check

    # a kernel whose file changed is judged again; the others are not
    kernel = pairs / "wrong" / "kernel.py"
    kernel.write_text(kernel.read_text() + "\n# edited\n")
    fourth = evalset(cwd, env, str(pairs), "--out", str(out))
    assert fourth.returncode == 0, fourth.stdout + fourth.stderr
    assert "3 finished result(s) kept" in fourth.stdout and "[wrong] starting" in fourth.stdout
    rejudged = result(out, "wrong")
    assert rejudged["status"] == "incorrect"
    assert rejudged["evalset"]["kernel_sha256"] == hashlib.sha256(kernel.read_bytes()).hexdigest()


def test_kernelbench_layout_writes_kernelbench_results(tmp_path: Path, ext_cache: Path) -> None:
    cwd, _pairs, env = setup(tmp_path, ext_cache)
    tasks = tmp_path / "KernelBench" / "level1"
    kernels = tmp_path / "runs" / "run1"
    tasks.mkdir(parents=True)
    kernels.mkdir(parents=True)
    shutil.copy(PAIRS / "ok" / "task.py", tasks / "19_Clamp.py")
    shutil.copy(PAIRS / "ok" / "task.py", tasks / "20_Clamp.py")  # no kernel: listed as skipped
    shutil.copy(PAIRS / "ok" / "kernel.py", kernels / "level_1_problem_19_sample_0_kernel.py")
    shutil.copy(PAIRS / "wrong" / "kernel.py", kernels / "level_1_problem_19_sample_1_kernel.py")
    out = tmp_path / "out"
    done = evalset(cwd, env, str(tasks), str(kernels), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"skipped {tasks / '20_Clamp.py'}: no kernel for this task" in done.stdout
    results = json.loads((out / "kernelbench" / "level_1" / "eval_results.json").read_text())
    assert list(results) == ["19"]
    samples = results["19"]
    assert [s["sample_id"] for s in samples] == [0, 1]
    assert [s["correctness"] for s in samples] == [True, False]
    assert [s["compiled"] for s in samples] == [True, True]
    assert samples[0]["runtime"] > 0 and samples[0]["runtime_stats"]["num_trials"] >= 5
    assert samples[1]["runtime"] == -1.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped"] == [{"path": str(tasks / "20_Clamp.py"), "why": "no kernel for this task"}]


def test_ray_runs_both_phases_as_ray_tasks_on_cpu(tmp_path: Path, ext_cache: Path) -> None:
    pytest.importorskip("ray")
    cwd, pairs, env = setup(tmp_path, ext_cache, "ok", "wrong")
    env.pop("RAY_ADDRESS", None)
    out = tmp_path / "out"
    done = evalset(cwd, env, str(pairs), "--out", str(out), "--ray", "auto", "--build-workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "phase 1 · build + check 2 kernel(s), Ray at auto" in done.stdout
    assert "phase 2 · time 1 correct kernel(s), Ray at auto" in done.stdout
    ok, wrong = result(out, "ok"), result(out, "wrong")
    assert ok["status"] == "correct" and ok["speedup"] > 0 and wrong["status"] == "incorrect"
    assert ok["evalset"]["ray_host"] and ok["evalset"]["phase"] == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ray"] == "auto" and summary["set"]["correct"] == 1


def test_ctrl_c_keeps_finished_work_and_a_rerun_completes(tmp_path: Path, ext_cache: Path) -> None:
    cwd, pairs, env = setup(tmp_path, ext_cache, "ok", "wrong")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "engine.cli.evalset", str(pairs), "--out", str(out), "--device", "cpu",
           "--progress", "lines", "--build-workers", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("[ok] starting"):
            proc.send_signal(signal.SIGINT)  # while ok is being checked; wrong is still queued
            break
    rest = proc.communicate(timeout=600)[0]
    text = "".join(seen) + rest
    assert proc.returncode == 1, text  # pairs without a verdict: rerun to finish
    assert "stopping: running evaluations finish and are kept" in text
    assert "phase 2" not in text
    assert (out / "checks" / "ok.json").is_file() and not (out / "checks" / "wrong.json").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status_counts"] == {"pending": 2} and summary["time"]["this_run"]["interrupted"] is True
    again = evalset(cwd, env, str(pairs), "--out", str(out))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 checked kernel(s) go straight to timing" in again.stdout
    assert "phase 1 · build + check 1 kernel(s)" in again.stdout
    assert result(out, "ok")["speedup"] > 0 and result(out, "wrong")["status"] == "incorrect"


def test_guard_and_sandbox_flags_reach_the_evaluator(tmp_path: Path, monkeypatch) -> None:
    import argparse

    from engine.cli.evalset import add_arguments, build_eval_options
    from engine.guard.rules import RULES

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["x", "--out", "o", "--device", "cpu", "--guard", "strict"])
    assert build_eval_options(args).guard.policy == "strict"
    args = parser.parse_args(["x", "--out", "o", "--device", "cpu", "--sandbox", "off"])
    assert build_eval_options(args).sandbox == "off"
    rule = next(iter(RULES))
    args = parser.parse_args(["x", "--out", "o", "--device", "cpu", "--relax", rule, "--trials", "3",
                              "--timeout", "7", "--no-timing"])  # fmt: skip
    options = build_eval_options(args)
    assert options.guard.relax == (rule,) and options.trials == 3 and options.do_timing is False
    assert options.timeouts.build == 7.0 and options.timeouts.start == 7.0 and options.device == "cpu"


def test_evalset_takes_the_same_guard_flags_as_eval(tmp_path: Path, monkeypatch) -> None:
    """evalset had its own --guard/--relax copy without --refuse; it now takes eval's flag group."""
    import argparse

    from engine.cli.evalset import add_arguments, build_eval_options
    from engine.eval.options import EvaluationError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["x", "--out", "o", "--device", "cpu", "--refuse", "timing-access"])
    assert build_eval_options(args).guard.refuse == ("timing-access",)
    args = parser.parse_args(["x", "--out", "o", "--device", "cpu", "--refuse", "no-such-rule"])
    with pytest.raises(EvaluationError, match="valid rule ids"):
        build_eval_options(args)
