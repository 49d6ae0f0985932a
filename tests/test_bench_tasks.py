"""Task discovery for ``cudaforge bench`` and the command line each task's loop runs with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.bench.runner import BenchOptions, child_env, explore_command, task_command
from engine.bench.settings import merged_settings
from engine.bench.tasks import BenchError, BenchTask, discover
from sessions.repo import SessionRepo

SET = Path(__file__).resolve().parent / "fixtures" / "bench" / "set"


def test_a_folder_gives_its_tasks_sorted_and_notes_what_it_skips() -> None:
    tasks, notes = discover([SET])
    assert [t.name for t in tasks] == ["relu", "relu_small"]
    assert all(t.path.is_absolute() for t in tasks)
    assert len(notes) == 1 and "helper.py" in notes[0] and "not a KernelBench task" in notes[0]


def test_same_stem_in_two_folders_gets_two_sessions_and_repeats_count_once(tmp_path: Path) -> None:
    other = tmp_path / "level2"
    other.mkdir()
    (other / "relu.py").write_text((SET / "relu.py").read_text())
    tasks, _ = discover([SET / "relu.py", other, SET / "relu.py"])
    assert [t.name for t in tasks] == ["relu", "relu-2"]


def test_missing_paths_and_sets_without_tasks_are_errors(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="no such task file or folder"):
        discover([tmp_path / "nope"])
    with pytest.raises(BenchError, match="no KernelBench task"):
        discover([SET / "helper.py"])


def test_a_task_with_a_session_is_continued_not_restarted(tmp_path: Path) -> None:
    task = BenchTask("relu", SET / "relu.py")
    options = BenchOptions(out=tmp_path, rounds=2, coder="scripted/x", device="cpu")
    fresh = task_command(task, options)
    assert fresh[fresh.index("-m") + 1] == "engine.cli.run"
    assert str(task.path) in fresh and fresh[fresh.index("--name") + 1] == "relu"
    assert "--session" not in fresh and "--auto-approve" in fresh and "--headless" in fresh
    assert fresh[fresh.index("--rounds") + 1] == "2" and "--judge" not in fresh
    SessionRepo.create(tmp_path / "sessions", task.path, name="relu").close()
    again = task_command(task, options)
    assert again[again.index("--session") + 1] == "relu" and str(task.path) not in again


def test_each_gpu_worker_sees_only_its_gpu() -> None:
    assert child_env("1")["CUDA_VISIBLE_DEVICES"] == "1"
    assert child_env(None).get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


def test_a_rerun_keeps_the_first_runs_settings_unless_flags_change_them(tmp_path: Path) -> None:
    first = merged_settings(tmp_path, {"rounds": 2, "coder": "scripted/a", "judge": None})
    unset_guard = {"guard": None, "relax": None, "refuse": None}  # the guard flags, recorded as given
    assert first == {"rounds": 2, "coder": "scripted/a", "judge": None, **unset_guard}
    again = merged_settings(tmp_path, {"rounds": None, "coder": None, "judge": "scripted/j"})
    assert again == {"rounds": 2, "coder": "scripted/a", "judge": "scripted/j", **unset_guard}
    assert merged_settings(tmp_path, {"rounds": 5})["rounds"] == 5


def test_explore_runs_the_exploration_of_the_seed_with_the_benchs_rounds(tmp_path: Path) -> None:
    task = BenchTask("relu", SET / "relu.py")
    options = BenchOptions(out=tmp_path, rounds=3, coder="scripted/x", device="cpu", explore=2, beam=1)
    cmd = explore_command(task, options)
    assert cmd[cmd.index("-m") + 1 : cmd.index("-m") + 4] == ["tui.cli", "explore", "relu"]
    flags = dict(zip(cmd[5::2], cmd[6::2], strict=False))
    assert [flags[f] for f in ("--from", "--width", "--rounds", "--beam")] == ["0", "2", "3", "1"]
    assert flags["--json"] == str(tmp_path / "explore" / "relu.json") and flags["--coder"] == "scripted/x"
    assert flags["--sessions-dir"] == str(tmp_path / "sessions")


def test_explore_and_beam_are_kept_once_given_and_absent_until_then(tmp_path: Path) -> None:
    assert "explore" not in merged_settings(tmp_path, {"rounds": 1})
    assert merged_settings(tmp_path, {"explore": 2, "beam": 1})["explore"] == 2
    assert merged_settings(tmp_path, {"rounds": None})["beam"] == 1
