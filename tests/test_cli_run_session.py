"""``cudaforge run TASK.py --session S`` as a real subprocess: S is made for the task, resumed when it
holds that task, refused when it holds another."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES
from tests.loop_helpers import RELU_TASK
from tests.test_loop_cli import command, project, run, scripted

pytestmark = pytest.mark.slow


def test_a_task_with_a_session_name_makes_then_resumes_that_session(tmp_path: Path, ext_cache: Path) -> None:
    cwd = project(tmp_path)
    first = command(tmp_path, str(RELU_TASK), "--session", "mine", "--auto-approve", "--rounds", "0")
    done = run([*first, "--device", "cpu", *scripted("steady")], cwd, ext_cache, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("session mine · branch main")
    assert "plan: the seed only" in done.stdout
    with SessionRepo.open(tmp_path / "s" / "mine") as session:
        assert [it.number for it in session.history()] == [0]

    # the same task again: the session goes on (its models and device come from it)
    again = command(tmp_path, str(RELU_TASK), "--session", "mine", "--auto-approve", "--rounds", "1")
    done = run(again, cwd, ext_cache, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plan: 1 more round(s), iterations 1–1" in done.stdout
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["mine"]
    with SessionRepo.open(tmp_path / "s" / "mine") as session:
        assert [it.number for it in session.history()] == [0, 1]

    # another task: refused in one line, the session untouched
    other = command(
        tmp_path, str(EXAMPLES / "tasks" / "scale_bias.py"), "--session", "mine", "--auto-approve"
    )
    done = run(other, cwd, ext_cache, tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("cudaforge run: session mine holds another task (relu), not ")
    assert done.stderr.count("\n") == 1 and done.stdout == ""
    with SessionRepo.open(tmp_path / "s" / "mine") as session:
        assert [it.number for it in session.history()] == [0, 1]


def test_a_task_with_a_session_and_a_name_is_a_usage_error(tmp_path: Path, ext_cache: Path) -> None:
    cwd = project(tmp_path)
    both = command(tmp_path, str(RELU_TASK), "--session", "a", "--name", "b", "--auto-approve")
    done = run(both, cwd, ext_cache, tmp_path)
    assert done.returncode == 2
    assert done.stderr == "cudaforge run: --name and --session both name the session: give one\n"
    assert not (tmp_path / "s").exists()
