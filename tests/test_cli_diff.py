"""``cudaforge diff SESSION OLD NEW`` on a real session repository, run as the console command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.conftest_sessions import REPO_ROOT, TASK_SOURCE, child_env, kernel, record_kwargs


@pytest.fixture
def root(tmp_path: Path) -> Path:
    base = tmp_path / "sessions"
    with SessionRepo.create(base, task_source=TASK_SOURCE, task_name="level1_add", name="add") as repo:
        for number in range(3):
            repo.record_iteration(**record_kwargs(number, speedup=1.0 + number))
        repo.branch_from(1, name="alt", switch=False)
    return base


def cudaforge(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "diff", *argv, "--sessions-dir", str(root)],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO_ROOT,
        timeout=120,
    )


def test_diff_of_two_iterations_is_a_unified_diff(root: Path) -> None:
    done = cudaforge(root, "add", "0", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("--- main:0/kernel.py\n+++ main:2/kernel.py\n")
    removed = {
        line[1:] for line in done.stdout.splitlines() if line.startswith("-") and not line.startswith("---")
    }
    added = {
        line[1:] for line in done.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")
    }
    assert removed <= set(kernel(0).splitlines()) and added <= set(kernel(2).splitlines()) and added


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("2", "2", "OLD and NEW are the same iteration (main:2, commit "),
        ("main:1", "alt:1", "OLD and NEW are the same iteration (main:1 and alt:1, commit "),
    ],
)
def test_the_same_iteration_on_both_sides_is_refused(root: Path, old: str, new: str, said: str) -> None:
    done = cudaforge(root, "add", old, new)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"cudaforge: error: {said}")
    assert "nothing to compare" in done.stderr


def test_a_side_that_is_not_an_iteration_is_one_line(root: Path) -> None:
    done = cudaforge(root, "add", "0", "main:")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "'main:' is not an iteration" in done.stderr
    done = cudaforge(root, "add", "0", "9")
    assert done.returncode == 2 and "has no iteration 9" in done.stderr
