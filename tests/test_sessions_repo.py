"""Session repositories on real git: create, record, history, branches, read back with plain git."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessions.errors import (
    BranchExists,
    NoSuchBranch,
    NoSuchFile,
    NoSuchIteration,
    NoSuchSession,
    SessionError,
    SessionExists,
)
from sessions.listing import list_sessions
from sessions.paths import default_sessions_root, resolve_session
from sessions.records import IterationRecord
from sessions.repo import SessionRepo
from sessions.tomlwrite import dumps as toml_dumps
from tests.conftest_sessions import TASK_SOURCE, child_env, git, kernel, record_kwargs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "level1_add.py"
    path.write_text(TASK_SOURCE, encoding="utf-8")
    return path


@pytest.fixture
def session(tmp_path: Path, task_file: Path):
    repo = SessionRepo.create(tmp_path / "root", task_file, settings={"coder": "openai/o3", "rounds": 10})
    yield repo
    repo.close()


def test_create_makes_a_bare_repo_with_a_root_commit(session: SessionRepo, tmp_path: Path) -> None:
    assert session.path.parent == (tmp_path / "root").resolve()
    assert session.name.startswith("level1_add-")
    assert git(session.path, "rev-parse", "--is-bare-repository").strip() == "true"
    assert git(session.path, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(session.path, "log", "--format=%s", "main").splitlines() == ["session · level1_add"]
    assert git(session.path, "rev-list", "--max-parents=0", "main").strip() == session.root_sha
    assert git(session.path, "ls-tree", "--name-only", "main").split() == ["session.toml", "task.py"]
    assert git(session.path, "show", "main:task.py") == TASK_SOURCE
    assert git(session.path, "log", "-1", "--format=%an <%ae>|%cn <%ce>", "main").strip() == (
        "cudaforge <cudaforge@localhost>|cudaforge <cudaforge@localhost>"
    )
    settings = tomllib.loads(git(session.path, "show", "main:session.toml"))
    assert settings["settings"] == {"coder": "openai/o3", "rounds": 10}
    assert settings["session"]["name"] == session.name
    assert settings["session"]["task"] == "level1_add"
    assert session.task_name == "level1_add"
    assert session.task_source == TASK_SOURCE
    assert session.history() == []
    assert session.best() is None
    # creation leaves no temporary directory behind
    assert [p.name for p in (tmp_path / "root").iterdir()] == [session.name]


def test_record_and_read_back_with_plain_git(session: SessionRepo) -> None:
    first = session.record_iteration(**record_kwargs(0, status="compile_error", speedup=None, phase="seed"))
    second = session.record_iteration(IterationRecord(**record_kwargs(1, speedup=1.4213)))
    third = session.record_iteration(**record_kwargs(2, status="incorrect", speedup=None, phase="repair"))
    assert (first, second, third) == (0, 1, 2)

    subjects = git(session.path, "log", "--format=%s", "main").splitlines()
    assert subjects == [
        "iter 2 · repair · — · incorrect",
        "iter 1 · optimize · 1.42x · correct",
        "iter 0 · seed · — · compile_error",
        "session · level1_add",
    ]
    # real trailers, as git itself parses them
    speedups = git(
        session.path, "log", "--format=%(trailers:key=Cudaforge-Speedup,valueonly)", "main"
    ).split()
    assert speedups == ["none", "1.4213", "none"]
    raw = git(session.path, "log", "-1", "--format=%B", "main~1")
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=raw, capture_output=True, text=True, check=True
    ).stdout
    assert parsed.splitlines() == [
        "Cudaforge-Iteration: 1",
        "Cudaforge-Phase: optimize",
        "Cudaforge-Status: correct",
        "Cudaforge-Speedup: 1.4213",
        "Cudaforge-Coder: openai/o3",
        "Cudaforge-Judge: anthropic/claude-sonnet-4-5",
        "Cudaforge-Tokens: 30",
        "Cudaforge-Cost-USD: 0.012300",
    ]
    assert git(session.path, "show", "main:kernel.py") == kernel(2)
    assert json.loads(git(session.path, "show", "main~1:eval.json"))["status"] == "correct"
    transcript = git(session.path, "show", "main:transcript.jsonl").splitlines()
    assert json.loads(transcript[0])["reply"] == "kernel 2"
    # task.py and session.toml are carried unchanged: the very same blobs as the root commit
    for name in ("task.py", "session.toml"):
        assert git(session.path, "rev-parse", f"main:{name}") == git(
            session.path, "rev-parse", f"main~3:{name}"
        )
    git(session.path, "fsck", "--full", "--strict")


def test_history_reads_iterations_without_checkout(session: SessionRepo) -> None:
    for version in range(3):
        session.record_iteration(**record_kwargs(version, speedup=1.0 + version))
    history = session.history()
    assert [it.number for it in history] == [0, 1, 2]
    assert [it.phase for it in history] == ["seed", "optimize", "optimize"]
    assert [it.speedup for it in history] == [1.0, 2.0, 3.0]
    shas = git(session.path, "rev-list", "--first-parent", "main").split()[:3]
    assert [it.sha for it in reversed(history)] == shas
    last = history[-1]
    assert (last.status, last.coder, last.judge, last.tokens, last.cost_usd) == (
        "correct",
        "openai/o3",
        "anthropic/claude-sonnet-4-5",
        30,
        0.0123,
    )
    assert last.kernel_source == kernel(2)
    assert last.eval_result["version"] == 2
    assert last.transcript[0]["usage"] == {"input_tokens": 10, "output_tokens": 20}
    assert last.files() == ["eval.json", "kernel.py", "session.toml", "task.py", "transcript.jsonl"]
    assert last.profile is None and last.suggestion is None
    assert session.read_file(1, "kernel.py") == kernel(1)
    assert session.read_file(0, "task.py") == TASK_SOURCE
    with pytest.raises(NoSuchFile):
        session.read_file(1, "profile.json")
    with pytest.raises(NoSuchIteration):
        session.read_file(7, "kernel.py")
    with pytest.raises(NoSuchBranch):
        session.history("nope")
    # no work tree was ever written
    assert not (session.path / "kernel.py").exists()


def test_profile_suggestion_extra_files_and_settings(session: SessionRepo) -> None:
    suggestion = {
        "proposed": {"issue": "uncoalesced loads"},
        "approved": {"issue": "use float4"},
        "by": "human",
    }
    session.record_iteration(**record_kwargs(0))
    session.record_iteration(
        **record_kwargs(
            1,
            profile={"kernel": {"dram__throughput": 71.5}},
            suggestion=suggestion,
            extra_files={"build.log": "ok\n"},
            settings={"coder": "anthropic/claude-sonnet-4-5", "rounds": 5},
            note="Judge: use float4",
        )
    )
    item = session.iteration(1)
    assert item.profile == {"kernel": {"dram__throughput": 71.5}}
    assert item.suggestion == suggestion
    assert item.read_text("build.log") == "ok\n"
    assert session.settings()["settings"] == {"coder": "anthropic/claude-sonnet-4-5", "rounds": 5}
    assert session.settings()["session"]["name"] == session.name
    assert tomllib.loads(session.read_file(0, "session.toml"))["settings"]["rounds"] == 10
    assert "Judge: use float4" in git(session.path, "log", "-1", "--format=%b", "main")
    assert (
        git(
            session.path, "log", "-1", "--format=%(trailers:key=Cudaforge-Iteration,valueonly)", "main"
        ).strip()
        == "1"
    )
    with pytest.raises(ValueError):
        session.record_iteration(**record_kwargs(2, extra_files={"kernel.py": "x"}))
    with pytest.raises(ValueError):
        session.record_iteration(**record_kwargs(2, phase="guess"))
    with pytest.raises(ValueError):
        session.record_iteration(**record_kwargs(2, status="great"))
    assert len(session.history()) == 2  # refused records left nothing behind


def test_branch_from_never_rewrites_history(session: SessionRepo) -> None:
    for version in range(4):
        session.record_iteration(**record_kwargs(version, speedup=1.0 + version))
    main_before = git(session.path, "rev-list", "main")
    name = session.branch_from(1)
    assert name == "from-iter-1"
    assert git(session.path, "rev-parse", name).strip() == session.iteration(1).sha
    assert session.current_branch == "main"
    number = session.record_iteration(**record_kwargs(10, speedup=9.0), branch=name)
    assert number == 2  # numbers are depth on the branch
    assert git(session.path, "rev-list", "main") == main_before
    assert [it.number for it in session.history(name)] == [0, 1, 2]
    assert session.history(name)[:2] == session.history("main")[:2]
    assert session.read_file(2, "kernel.py", branch=name) == kernel(10)
    assert session.read_file(2, "kernel.py") == kernel(2)
    assert session.branch_from(1) == "from-iter-1-2"
    assert session.branch_from(2, name="wide-tiles", branch=name, switch=True) == "wide-tiles"
    assert session.current_branch == "wide-tiles"
    assert git(session.path, "symbolic-ref", "--short", "HEAD").strip() == "wide-tiles"
    assert session.record_iteration(**record_kwargs(11)) == 3  # lands on the current branch
    assert session.read_file(3, "kernel.py", branch="wide-tiles") == kernel(11)
    with pytest.raises(BranchExists):
        session.branch_from(1, name="wide-tiles")
    with pytest.raises(SessionError):
        session.branch_from(1, name="bad..name")
    with pytest.raises(NoSuchIteration):
        session.branch_from(9, branch="main")
    assert session.branches() == ["main", "from-iter-1", "from-iter-1-2", "wide-tiles"]
    git(session.path, "fsck", "--full", "--strict")


def test_best_is_the_fastest_correct_iteration(session: SessionRepo) -> None:
    session.record_iteration(**record_kwargs(0, status="correct", speedup=1.1))
    session.record_iteration(**record_kwargs(1, status="incorrect", speedup=5.0))
    session.record_iteration(**record_kwargs(2, status="correct", speedup=2.5))
    session.record_iteration(**record_kwargs(3, status="correct", speedup=2.5))
    session.record_iteration(**record_kwargs(4, status="timeout", speedup=None))
    best = session.best()
    assert best is not None and (best.number, best.speedup) == (2, 2.5)
    name = session.branch_from(0)
    assert session.best(name).number == 0


def test_open_by_name_or_path_and_errors(session: SessionRepo, tmp_path: Path, task_file: Path) -> None:
    session.record_iteration(**record_kwargs(0))
    root = tmp_path / "root"
    by_name = SessionRepo.open(session.name, root)
    by_path = SessionRepo.open(str(session.path))
    try:
        assert by_name.path == by_path.path == session.path
        assert [it.sha for it in by_name.history()] == [it.sha for it in session.history()]
    finally:
        by_name.close()
        by_path.close()
    with pytest.raises(NoSuchSession):
        SessionRepo.open("missing", root)
    with pytest.raises(NoSuchSession):
        SessionRepo.open(tmp_path)  # a directory that is no session
    named = SessionRepo.create(root, task_file, name="mine")
    named.close()
    with pytest.raises(SessionExists):
        SessionRepo.create(root, task_file, name="mine")
    with pytest.raises(SessionError):
        SessionRepo.create(root, task_file, name="../escape")
    assert resolve_session("mine", root) == (root / "mine").resolve()


def test_same_task_twice_gets_distinct_sessions(tmp_path: Path, task_file: Path) -> None:
    first = SessionRepo.create(tmp_path, task_file)
    second = SessionRepo.create(tmp_path, task_file)
    try:
        assert first.path != second.path
        assert first.name.startswith("level1_add-") and second.name.startswith("level1_add-")
        assert {s.path for s in list_sessions(tmp_path)} == {first.path, second.path}
    finally:
        first.close()
        second.close()


def test_commits_work_without_git_identity_and_ignore_a_stray_git_dir(
    tmp_path: Path, task_file: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    stray = tmp_path / "stray.git"  # e.g. a loop started from a git hook, where GIT_DIR is exported
    env = child_env(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=str(home / "none"),
        GIT_DIR=str(stray),
    )
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        env.pop(var, None)
    code = (
        "import sys; from sessions.repo import SessionRepo\n"
        "r = SessionRepo.create(sys.argv[1], sys.argv[2], name='anon')\n"
        "r.record_iteration(kernel_source='x = 1\\n', eval_result={'status': 'correct', 'speedup': 1.0}, phase='seed')\n"
        "r.branch_from(0, switch=True)\n"
        "print(len(r.history()))\n"
        "r.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "root"), str(task_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    assert not stray.exists()
    path = tmp_path / "root" / "anon"
    env.pop("GIT_DIR")
    assert git(path, "log", "--format=%an", "main", env=env).split() == ["cudaforge", "cudaforge"]
    assert git(path, "symbolic-ref", "--short", "HEAD", env=env).strip() == "from-iter-0"


def test_list_sessions_summarizes_every_session(tmp_path: Path, task_file: Path) -> None:
    root = tmp_path / "root"
    with SessionRepo.create(root, task_file, name="older") as older:
        older.record_iteration(**record_kwargs(0, speedup=1.2))
        older.record_iteration(**record_kwargs(1, status="incorrect", speedup=8.0))
        branch = older.branch_from(0)
        older.record_iteration(**record_kwargs(2, speedup=3.5), branch=branch)
    git(root / "older", "config", "cudaforge.unused", "x")  # harmless config edits do not matter
    with SessionRepo.create(root, task_source="print(1)\n", task_name="Other Task", name="newer"):
        pass
    (root / ".newer.creating-1-abcd").mkdir()  # a crashed creation: hidden, skipped
    (root / "not-a-session").mkdir()
    summaries = list_sessions(root)
    by_name = {s.name: s for s in summaries}
    assert set(by_name) == {"older", "newer"}
    assert (by_name["older"].branches, by_name["older"].iterations, by_name["older"].best_speedup) == (
        2,
        3,
        3.5,
    )
    assert (by_name["newer"].task_name, by_name["newer"].iterations, by_name["newer"].best_speedup) == (
        "Other Task",
        0,
        None,
    )
    assert summaries[0].created >= summaries[1].created
    assert list_sessions(tmp_path / "absent") == []


def test_default_sessions_root_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CUDAFORGE_SESSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_sessions_root() == tmp_path / "data" / "cudaforge" / "sessions"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_sessions_root() == tmp_path / "home" / ".local" / "share" / "cudaforge" / "sessions"
    monkeypatch.setenv("CUDAFORGE_SESSIONS_DIR", str(tmp_path / "override"))
    assert default_sessions_root() == tmp_path / "override"


def test_toml_writer_round_trips() -> None:
    data = {
        "coder": "openai/o3",
        "rounds": 10,
        "auto": True,
        "tolerance": 1e-4,
        "tags": ["a", 'b "q"'],
        "tolerances": {"fp16": 0.01, "bf16": 0.01},
        "odd key": "tab\there\x7f",
        "skipped": None,
    }
    back = tomllib.loads(toml_dumps({"settings": data}))["settings"]
    expected = {k: v for k, v in data.items() if v is not None}
    expected["tags"] = ["a", 'b "q"']
    assert back == expected
    with pytest.raises(TypeError):
        toml_dumps({"x": object()})
