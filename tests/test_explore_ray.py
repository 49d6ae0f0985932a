"""``cudaforge explore --ray auto`` (engine/explore/ray_devices.py) on the CPU: the real command in a
subprocess, a local Ray instance, the real scripted agents (tests/fixtures/scripted/explore), real CPU
evaluations. The checks and timings run as Ray tasks on Ray's workers; the loops and every commit stay
in the command's process. The profile stage (which the command runs on CUDA only) goes through the same
RayDevices here, in this process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.evalset.ray_runner import gpu_fraction
from engine.explore.devices import CHECK, PROFILE, TIME
from engine.loop.machine import FINISHED
from sessions.repo import SessionRepo
from tests.conftest import python_path
from tests.loop_helpers import RELU_KERNEL, RELU_TASK, SCRIPTED, make_loop, new_session

pytestmark = pytest.mark.slow

EXPLORE = SCRIPTED / "explore"
FAST_CONFIG = "[eval]\ntrials = 2\ntiming_trials = 5\ntiming_budget_s = 1.0\n"


def test_gpu_fraction_is_the_footprint_rounded_up_to_a_hundredth() -> None:
    gib = 1 << 30
    assert gpu_fraction(0, 80 * gib) == 0.01  # at least a hundredth: Ray packs at most 100 checks
    assert gpu_fraction(8 * gib, 80 * gib) == 0.1
    assert gpu_fraction(8 * gib + 1, 80 * gib) == 0.11
    assert gpu_fraction(200 * gib, 80 * gib) == 1.0  # larger than the GPU: the whole of it


def test_explore_with_ray_runs_checks_and_timings_as_ray_tasks_on_cpu(
    tmp_path: Path, ext_cache: Path
) -> None:
    pytest.importorskip("ray")
    session = new_session(tmp_path)  # iteration 0: a correct kernel on main
    seed = make_loop(session, ext_cache, coder_dir=EXPLORE / "coder", judge_dir=EXPLORE / "judge", rounds=0)
    assert seed.run() == FINISHED
    seed.close()
    root = session.history("main")[0]
    assert root.correct
    session.close()
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "cudaforge.toml").write_text(FAST_CONFIG)
    env = {**os.environ, "PYTHONPATH": python_path(), "CUDAFORGE_CACHE_DIR": str(ext_cache),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "RAY_USAGE_STATS_ENABLED": "0"}  # fmt: skip
    env.pop("RAY_ADDRESS", None)  # `auto`: a local instance of its own, not a cluster this machine knows
    out = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "explore", str(session.path), "--width", "2", "--rounds", "1",
         "--device", "cpu", "--ray", "auto", "--coder", f"scripted/{EXPLORE / 'coder'}",
         "--judge", f"scripted/{EXPLORE / 'judge'}", "--json", str(out)],
        capture_output=True, text=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "evaluations as Ray tasks at auto" in done.stdout, log
    assert "timings sharing a GPU: 0" in done.stdout, log
    summary = json.loads(out.read_text())
    assert summary["outcome"] == FINISHED and not summary["stopped"]
    assert [(b["name"], b["state"], b["rounds"]) for b in summary["branches"]] == [
        ("explore/0-1", "done", 1),
        ("explore/0-2", "done", 1),
    ]

    # the work went through Ray: RayDevices' stats, and every window names the Ray node it ran on
    devices = summary["devices"]
    assert devices["ray"] == "auto" and devices["gpus"] == "ray" and devices["device"] == "cpu"
    windows = devices["windows"]
    assert {w["host"] for w in windows} == {socket.gethostname()}  # the local instance's one node
    for branch in ("explore/0-1", "explore/0-2"):  # a check beside the other branch's, then a timing alone
        parts = [(w["part"], w["alone"]) for w in windows if w["branch"] == branch]
        assert parts == [(CHECK, False), (TIME, True)], windows
    assert devices["seconds_by_part"][CHECK] > 0 and devices["seconds_by_part"][TIME] > 0
    # the CPU is one slot: no timing shared it with anything (a check of the other branch included)
    assert devices["alone_overlaps"] == 0
    for alone in (w for w in windows if w["alone"]):
        for other in (w for w in windows if w is not alone):
            assert other["finished_at"] <= alone["started_at"] or alone["finished_at"] <= other["started_at"]

    # every branch committed here, from the start iteration, with the timed result it was sent back
    session = SessionRepo.open(str(session.path))
    assert session.current_branch == "main"
    for b in summary["branches"]:
        history = session.history(b["name"])
        assert [it.number for it in history] == [0, 1] and history[0].sha == root.sha
        assert history[1].correct and history[1].speedup == pytest.approx(b["best_speedup"], abs=1e-3)
    session.close()
    fsck = subprocess.run(["git", "-C", str(session.path), "fsck", "--strict"], capture_output=True, text=True)  # fmt: skip
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_a_profile_is_a_ray_task_holding_its_slot_alone(
    monkeypatch: pytest.MonkeyPatch, ext_cache: Path
) -> None:
    """RayProfiler → remote_profile on a Ray worker: the loop's profile dict (engine.profile.candidate's
    profile_for_judge, with its judge_block) comes back, in a window of its own. No ncu or CUDA here, so
    the profile says why it has no hardware feedback, as it does on any such machine."""
    pytest.importorskip("ray")
    from engine.explore.ray_devices import RayDevices
    from engine.profile.candidate import LoopProfiler, ProfileOptions

    monkeypatch.setenv("PYTHONPATH", python_path())  # Ray's workers import cudaforge from this checkout
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    devices = RayDevices("cpu", "auto", workers=1)
    try:
        profiler = devices.profiler(LoopProfiler(ProfileOptions(cache_root=ext_cache)), "explore/0-1")
        profile = profiler(RELU_TASK.read_text(), RELU_KERNEL.read_text(), None)
        stats = devices.stats()
    finally:
        devices.close()
    assert profile["kind"] in ("ncu", "torch-profiler", "none")
    assert profile["judge_block"].startswith("Hardware feedback")
    [window] = stats["windows"]
    assert (window["branch"], window["part"], window["alone"]) == ("explore/0-1", PROFILE, True)
    assert window["host"] == socket.gethostname() and window["gpu"] is None
    assert stats["ray"] == "auto" and stats["seconds_by_part"][PROFILE] > 0 and stats["alone_overlaps"] == 0
