"""``cudaforge sessions``, ``branch`` and ``export`` on real session repositories."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import sessions as cli
from sessions.repo import SessionRepo
from tests.conftest_sessions import (
    REPO_ROOT,
    TASK_SOURCE,
    child_env,
    git,
    kernel,
    record_kwargs,
    spawn_python,
)

HOLDER = """
import sys, time
from sessions.repo import SessionRepo
repo = SessionRepo.open(sys.argv[1])
repo.acquire_lock()
print("locked", flush=True)
time.sleep(120)
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="cudaforge")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code = args.func(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Two sessions: ``add`` with four iterations (best 2.50x at iteration 2) and an empty one."""
    base = tmp_path / "sessions"
    with SessionRepo.create(base, task_source=TASK_SOURCE, task_name="level1_add", name="add") as repo:
        repo.record_iteration(**record_kwargs(0, status="compile_error", speedup=None))
        repo.record_iteration(**record_kwargs(1, speedup=1.25))
        repo.record_iteration(**record_kwargs(2, speedup=2.5))
        repo.record_iteration(**record_kwargs(3, status="incorrect", speedup=9.0))
    with SessionRepo.create(base, task_source="x = 1\n", task_name="empty task", name="empty"):
        pass
    return base


def test_sessions_lists_a_table(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["sessions", "--sessions-dir", str(root)], capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "TASK", "CREATED", "BRANCHES", "ITERATIONS", "BEST", "GUARD", "PATH"]
    rows = {line.split()[0]: line for line in lines[1:]}  # by name: what `open`, `replay`, `branch` take
    add_row = rows["add"].split()
    assert add_row[:2] == ["add", "level1_add"]
    assert add_row[4:] == ["1", "4", "2.50x", "—", str((root / "add").resolve())]
    empty_row = rows["empty"].split()
    assert empty_row[:3] == ["empty", "empty", "task"] and empty_row[-4:] == [
        "0",
        "—",
        "—",
        str((root / "empty").resolve()),
    ]
    code, out, _ = run(["sessions", "--sessions-dir", str(root / "nothing")], capsys)
    assert code == 0 and out.startswith("no sessions under")


def test_branch_creates_and_switches(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["branch", "add", "1", "--sessions-dir", str(root)], capsys)
    assert (code, err) == (0, "")
    assert (
        out.splitlines()[1]
        == "current branch: switched from main to from-iter-1 (--no-switch keeps main current)"
    )
    session = root / "add"
    assert git(session, "symbolic-ref", "--short", "HEAD").strip() == "from-iter-1"
    assert git(session, "rev-parse", "from-iter-1") == git(session, "rev-parse", "main~2")
    code, out, _ = run(
        ["branch", str(session), "3", "--branch", "main", "--name", "retry", "--no-switch"], capsys
    )
    assert code == 0 and "created branch retry at iteration 3" in out
    assert (
        out.splitlines()[1]
        == "current branch: still from-iter-1 (cudaforge open add --branch retry continues the new one)"
    )
    assert git(session, "rev-parse", "retry") == git(session, "rev-parse", "main")
    assert git(session, "symbolic-ref", "--short", "HEAD").strip() == "from-iter-1"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["branch", "nope", "1"], "no such session: nope"),
        (["branch", "add", "17"], "has no iteration 17"),
        (["branch", "add", "1", "--name", "main"], "branch 'main' already exists"),
        (["branch", "add", "1", "--branch", "ghost"], "has no branch 'ghost'"),
        (["export", "add", "--iteration", "8", "-o", "out.py"], "has no iteration 8"),
        (["export", "empty", "-o", "out.py"], "no correct iteration"),
        (["export", "nope", "-o", "out.py"], "no such session: nope"),
        (
            ["export", "add", "--iteration", "0", "-o", "out.py"],
            "iteration 0 of session add is compile_error, not correct",
        ),
        (
            ["export", "add", "--iteration", "3", "-o", "out.py"],
            "iteration 3 of session add is incorrect, not correct",
        ),
    ],
)
def test_errors_are_one_line_and_exit_2(
    root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run([*argv, "--sessions-dir", str(root)], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("cudaforge: error: ") and message in err
    assert not (tmp_path / "out.py").exists()


def test_branch_refused_while_another_process_writes(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holder = spawn_python(HOLDER, str(root / "add"))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        code, _, err = run(["branch", "add", "1", "--sessions-dir", str(root)], capsys)
        assert code == 2 and f"pid {holder.pid}" in err and err.count("\n") == 1
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_export_writes_a_standalone_modelnew(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "best.py"
    code, out, err = run(["export", "add", "-o", str(out_file), "--sessions-dir", str(root)], capsys)
    assert (code, err) == (0, "")
    assert "iteration 2" in out
    text = out_file.read_text(encoding="utf-8")
    header, _, body = text.partition("\n\n")
    assert body == kernel(2)
    assert "session:   add" in header and "iteration 2" in header and "correct, speedup 2.50x" in header
    assert all(line.startswith("# ") for line in header.splitlines())

    code, _, _ = run(
        [
            "export",
            "add",
            "--iteration",
            "1",
            "--branch",
            "main",
            "-o",
            str(tmp_path / "one.py"),
            "--sessions-dir",
            str(root),
        ],
        capsys,
    )
    assert code == 0
    assert (tmp_path / "one.py").read_text(encoding="utf-8").endswith(kernel(1))

    # the file runs on its own as a KernelBench ModelNew, next to the task it solves
    task = tmp_path / "task.py"
    task.write_text(TASK_SOURCE, encoding="utf-8")
    check = (
        "import importlib.util, sys, torch\n"
        "def load(p):\n"
        "    spec = importlib.util.spec_from_file_location(p.replace('/', '_'), p)\n"
        "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m\n"
        "task, new = load(sys.argv[1]), load(sys.argv[2])\n"
        "torch.manual_seed(0)\n"
        "inputs = task.get_inputs()\n"
        "ref = task.Model(*task.get_init_inputs())(*inputs)\n"
        "out = new.ModelNew(*task.get_init_inputs())(*inputs)\n"
        "assert torch.allclose(ref, out)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, str(task), str(out_file)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_export_of_an_iteration_that_is_not_correct_needs_force(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "broken.py"
    argv = ["export", "add", "--iteration", "0", "-o", str(out_file), "--sessions-dir", str(root)]
    code, _, err = run(argv, capsys)
    assert code == 2 and "--force" in err and not out_file.exists()
    code, out, err = run([*argv, "--force"], capsys)
    assert (code, err) == (0, "")
    assert "iteration 0 (compile_error" in out
    assert "# status:    compile_error" in out_file.read_text(encoding="utf-8")


def test_export_keeps_a_shebang_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with SessionRepo.create(tmp_path, task_source=TASK_SOURCE, name="s") as repo:
        repo.record_iteration(**record_kwargs(0, kernel_source="#!/usr/bin/env python\n" + kernel(0)))
    code, out, _ = run(["export", str(tmp_path / "s"), "-o", "-"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "#!/usr/bin/env python"
    assert lines[1].startswith("# Exported by cudaforge")
    assert out.endswith(kernel(0))


def test_console_entry_point_has_the_commands(root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "sessions", "--sessions-dir", str(root)],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "level1_add" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "branch", "missing", "0", "--sessions-dir", str(root)],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"cudaforge: error: no such session: missing (looked for a path and under {root})"
    )


def test_branch_takes_over_a_dead_writers_lock_with_one_notice(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = spawn_python(HOLDER, str(root / "add"))
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait(timeout=30)
    code, out, err = run(["branch", "add", "0", "--sessions-dir", str(root)], capsys)
    assert code == 0 and "from-iter-0" in out
    assert err.count("\n") == 1
    assert err.startswith("cudaforge: notice: took over a stale writer lock") and f"pid {holder.pid}" in err
