"""Fork servers kept for later commands (engine/eval/keptserver.py, engine/eval/forkserver.py,
engine/eval/zygote.py), on CPU with real commands, real servers, real sandboxes and real C++ extensions.

A later command must fork its workers from the server an earlier one left; that server must serve only
this user and never a worker, must end the workers of a command that went away while it serves the
others, and must leave once it has had nothing to do for its time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import procgroups
from engine.eval import forkserver, jobdirs, keptserver, zygote
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.guard.policy import GuardSettings
from engine.guard.static import check_source
from engine.sandbox import available_mechanisms
from tests.conftest import EXAMPLES, REPO, until

TASK_PATH = EXAMPLES / "tasks" / "relu.py"
KERNEL_PATH = EXAMPLES / "kernels" / "relu_cpu.py"
TASK, HONEST = TASK_PATH.read_text(), KERNEL_PATH.read_text()
CONFINED = ["bwrap", "landlock"]


def _strongest_here() -> str:
    return next((m for m in CONFINED if not available_mechanisms().get(m)), "off")


def _kept_env(tmp_path: Path, cache: Path, keep_s: float = 120) -> dict[str, str]:
    """A command's environment with its servers kept, a PATH of this test's own (so the server is this
    test's alone) and the shared test build cache."""
    return {
        **os.environ,
        "PATH": f"{os.environ['PATH']}{os.pathsep}{tmp_path}",
        keptserver.KEEP_ENV: str(keep_s),
        "CUDAFORGE_CACHE_DIR": str(cache),
        "CUDAFORGE_WORKERS": "fork",
    }


def _servers_of(marker: str) -> list[int]:
    """The kept servers (their Python processes, not bwrap's, nor the workers forked from them, which
    share their command line) whose environment holds ``marker`` (this test's PATH entry)."""
    zygotes: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv[1:3] == [b"-m", b"engine.eval.zygote"] and marker.encode() in (entry / "environ").read_bytes():
                stat = (entry / "stat").read_text()
                zygotes[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError):
            continue
    return sorted(pid for pid, parent in zygotes.items() if parent not in zygotes)


def _end_servers(marker: str) -> None:
    for pid in _servers_of(marker):
        procgroups.kill_tree(pid)


def _eval(env: dict[str, str], kernel: Path = KERNEL_PATH, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "eval", str(TASK_PATH), str(kernel), "--device", "cpu", "--json", "--no-timing", *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )


def test_a_later_command_forks_from_the_server_an_earlier_one_left(tmp_path: Path, ext_cache: Path) -> None:
    env = _kept_env(tmp_path, ext_cache)
    try:
        first = _eval(env)
        assert first.returncode == 0, first.stderr[-2000:]
        assert _servers_of(str(tmp_path)), "the first command's server did not outlive it"
        second = _eval(env)
        assert second.returncode == 0, second.stderr[-2000:]
        settings = [json.loads(done.stdout)["settings"] for done in (first, second)]
        # the first command launched the server for the next one and did not wait for it: its worker started anew
        assert [(s["worker_start"], s.get("fork_server")) for s in settings] == [("exec", None), ("fork", "kept-found")]
        assert len(_servers_of(str(tmp_path))) == 1
    finally:
        _end_servers(str(tmp_path))


def test_of_two_commands_started_together_one_starts_the_server_and_both_use_it(tmp_path: Path, ext_cache: Path) -> None:
    env = _kept_env(tmp_path, ext_cache)
    try:
        runs: list[subprocess.CompletedProcess] = []
        threads = [threading.Thread(target=lambda: runs.append(_eval(env))) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [run.returncode for run in runs] == [0, 0], [run.stderr[-1500:] for run in runs]
        starts = sorted((s["worker_start"], s.get("fork_server", "")) for s in (json.loads(run.stdout)["settings"] for run in runs))
        assert starts == [("exec", ""), ("fork", "kept-found")]  # the one that launched it did not wait for it
        assert len(_servers_of(str(tmp_path))) == 1
    finally:
        _end_servers(str(tmp_path))


def test_a_bad_keep_setting_is_a_usage_error_that_names_it(tmp_path: Path, ext_cache: Path) -> None:
    env = {**_kept_env(tmp_path, ext_cache), keptserver.KEEP_ENV: "ten minutes"}
    done = _eval(env)
    assert done.returncode == 2
    assert keptserver.KEEP_ENV in done.stderr and "'ten minutes'" in done.stderr


def _kept_options(cache: Path, mechanism: str, **overrides: object) -> EvalOptions:
    settings: dict[str, object] = {"workers": "fork", "do_timing": False, "trials": 2, **overrides}
    return EvalOptions(device="cpu", cache_root=cache, sandbox=mechanism, **settings)  # type: ignore[arg-type]


@pytest.fixture
def kept_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """This process's servers kept (briefly), with a PATH of this test's own; every kept server of the
    test ended after it. The server is waited for, as a command that evaluates more than once would (a
    one-shot command's first worker starts anew: its own test, below)."""
    monkeypatch.setenv("PATH", f"{os.environ['PATH']}{os.pathsep}{tmp_path}")
    monkeypatch.setenv(keptserver.KEEP_ENV, "120")
    monkeypatch.setattr(keptserver, "_ONE_SHOT", [True])  # as `cudaforge eval` says it is
    monkeypatch.setattr(keptserver, "_IN_BACKGROUND", [False])  # ... but waiting for its server's start
    yield str(tmp_path)
    forkserver.close_all()
    _end_servers(str(tmp_path))


def test_a_one_shot_process_launches_its_kept_server_in_the_background_and_joins_it_later(
    ext_cache: Path, kept_here: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keptserver, "_IN_BACKGROUND", [True])  # as `cudaforge eval` runs
    options = _kept_options(ext_cache, _strongest_here())
    assert forkserver.server_for(options, ext_cache) is None  # launched, not waited for: this worker starts anew
    assert until(lambda: bool(_servers_of(kept_here)), 120)
    joined: list[forkserver.ForkServer] = []
    assert until(lambda: bool(joined.append(forkserver.server_for(options, ext_cache)) or joined[-1]), 120)
    server = joined[-1]
    assert server.kept and server.origin == "kept-started"  # this process launched it, and may end it if stuck
    result = evaluate(TASK, HONEST, options)
    assert (result.status, result.settings["worker_start"], result.settings["fork_server"]) == ("correct", "fork", "kept-started")
    assert len(_servers_of(kept_here)) == 1


def test_a_background_launch_that_fails_is_said_at_exit_and_its_settings_start_workers_anew(
    ext_cache: Path, kept_here: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(keptserver, "_IN_BACKGROUND", [True])
    monkeypatch.setattr(forkserver, "_launch", lambda *args, **kwargs: None)  # the server's process did not start
    options = _kept_options(ext_cache, _strongest_here())
    assert forkserver.server_for(options, ext_cache) is None
    forkserver.close_all()  # what exit runs: the launch is waited for and its failure said
    assert "the fork server kept for the next command could not start" in capsys.readouterr().err
    assert forkserver.server_for(options, ext_cache) is None  # a process that goes on launches again ...
    assert until(lambda: forkserver.server_for(options, ext_cache) is None and forkserver.broken(options, ext_cache), 60)
    assert "did not start" in (forkserver.broken(options, ext_cache) or "")  # ... and, told it failed, stops trying
    name = forkserver.kept_address(forkserver.server_key(options, ext_cache), options, ext_cache)
    assert keptserver.connect(name) is None  # the name was let go with the failed launch: no one waits on it


def test_a_sandbox_that_cannot_run_sends_a_one_shot_worker_the_usual_way_not_a_traceback(
    ext_cache: Path, kept_here: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine import sandbox

    def cannot(mode: str) -> str:
        raise sandbox.SandboxError(f"{mode}: not on this machine")

    monkeypatch.setattr(keptserver, "_IN_BACKGROUND", [True])
    monkeypatch.setattr(forkserver.sandbox, "resolve_mode", cannot)
    options = _kept_options(ext_cache, _strongest_here())
    assert forkserver.server_for(options, ext_cache) is None
    assert "not on this machine" in (forkserver.broken(options, ext_cache) or "")


def test_a_kept_server_leaves_once_it_has_had_nothing_to_do_for_its_time(
    ext_cache: Path, kept_here: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(keptserver.KEEP_ENV, "1")
    options = _kept_options(ext_cache, _strongest_here())
    result = evaluate(TASK, HONEST, options)
    assert (result.status, result.settings["fork_server"]) == ("correct", "kept-started")
    server = forkserver.server_for(options, ext_cache)
    assert server is not None and server.kept and server.alive()
    name = forkserver.kept_address(server.key, options, ext_cache)
    assert _servers_of(kept_here)
    server.close()  # its last client goes: it leaves about a second later
    assert until(lambda: not _servers_of(kept_here), 60)
    probe = keptserver.connect(name)
    assert probe is None  # the name went with it
    again = evaluate(TASK, HONEST, options)  # and a later evaluation starts a new one
    assert (again.status, again.settings["fork_server"]) == ("correct", "kept-started")


def test_the_workers_of_a_command_that_went_away_end_and_the_others_go_on(
    tmp_path: Path, ext_cache: Path, kept_here: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDAFORGE_CACHE_DIR", str(ext_cache))  # the command's environment, for one server
    options = _kept_options(ext_cache, "auto")  # the command's settings
    from engine.eval import spare

    waiting = spare.start(options, ext_cache)  # this process's worker, forked from the kept server
    assert waiting is not None and waiting.worker.forked
    mark = f"{os.getpid() % 1000 + 2000}.{int(time.time() * 1000) % 100000}"
    sleeper = tmp_path / "sleeper.py"
    # the sleep in a session of its own: no group kill reaches it, only a kill of the whole tree
    sleeper.write_text(f"import subprocess as _s\n_s.Popen(['sleep', '{mark}'], start_new_session=True)\nprint('SLEEPING', flush=True)\nimport time as _t\n_t.sleep(300)\n" + HONEST)
    rules = sorted({f.rule for f in check_source(sleeper.read_text(), backend="cpu") if f.severity == "refuse"})
    relax = [flag for rule in rules for flag in ("--relax", rule)]
    env = {**os.environ, "CUDAFORGE_CACHE_DIR": str(ext_cache), "CUDAFORGE_WORKERS": "fork"}
    other = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "eval", str(TASK_PATH), str(sleeper), "--device", "cpu", "--no-timing", "-v", *relax],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        seen = []
        reader = threading.Thread(target=lambda: seen.extend(other.stdout), daemon=True)
        reader.start()
        assert until(lambda: _sleeping(mark), 240), "".join(seen)[-2000:]
        assert len(_servers_of(kept_here)) == 1  # one server forked both commands' workers
        other.kill()  # the command goes away mid-evaluation, without a word to the server
        other.wait()
        assert until(lambda: not _sleeping(mark), 60)  # its worker and what it started ended with it
        served = evaluate(TASK, HONEST, options, worker=waiting)  # this process's waiting worker did not
        assert (served.status, served.settings["worker"], served.settings["fork_server"]) == ("correct", "spare", "kept-started")
    finally:
        spare.release(waiting)
        subprocess.run(["pkill", "-9", "-f", f"sleep {mark}"], capture_output=True)


def _sleeping(mark: str) -> bool:
    return bool(subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True).stdout.strip())


@pytest.mark.parametrize("mechanism", CONFINED)
def test_a_forked_worker_cannot_reach_its_kept_server(mechanism: str, ext_cache: Path, kept_here: str) -> None:
    why = available_mechanisms().get(mechanism)
    if why:
        pytest.skip(f"{mechanism} cannot run here: {why}")
    options = _kept_options(ext_cache, mechanism)
    server = forkserver.server_for(options, ext_cache)
    assert server is not None and server.kept
    name = forkserver.kept_address(server.key, options, ext_cache)
    hostile = (
        "import socket as _socket\n"
        "_s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)\n"
        "try:\n"
        f"    _s.connect({name!r})\n"
        "    print('KEPT-SERVER REACHED', flush=True)\n"
        "except OSError as _e:\n"
        "    print('KEPT-SERVER BLOCKED', type(_e).__name__, flush=True)\n"
    ) + HONEST
    relax = tuple(sorted({f.rule for f in check_source(hostile, backend="cpu") if f.severity == "refuse"}))
    result = evaluate(TASK, hostile, _kept_options(ext_cache, mechanism, guard=GuardSettings(relax=relax)))
    assert (result.status, result.settings["worker_start"], result.settings["fork_server"]) == ("correct", "fork", "kept-started")
    assert "KEPT-SERVER BLOCKED" in result.stderr_tail and "REACHED" not in result.stderr_tail, result.stderr_tail
    assert keptserver.connect(name) is not None  # the name is right: this process, outside, reaches it


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to become another user")
def test_another_user_is_refused_by_a_kept_server(ext_cache: Path, kept_here: str) -> None:
    options = _kept_options(ext_cache, _strongest_here())
    server = forkserver.server_for(options, ext_cache)
    assert server is not None and server.kept
    name = forkserver.kept_address(server.key, options, ext_cache)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # nobody, connecting as any local user could
        os.close(read)
        answer = b"no connection"
        try:
            os.setgid(65534)
            os.setuid(65534)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            client.connect(name)
            client.settimeout(60)
            answer = client.recv(64) or b"closed"
        except OSError as error:
            answer = type(error).__name__.encode()
        os.write(write, answer)
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    answer = os.read(read, 64)
    os.close(read)
    assert answer != zygote.READY and answer == b"closed", answer
    mine = keptserver.connect(name)  # while this user is served
    assert mine is not None and mine.recv(64) == zygote.READY
    mine.close()


def test_a_changed_engine_source_names_another_server(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    before = keptserver.code_fingerprint((tmp_path,))
    keptserver.code_fingerprint.cache_clear()
    (tmp_path / "a.py").write_text("x = 22\n")
    after = keptserver.code_fingerprint((tmp_path,))
    keptserver.code_fingerprint.cache_clear()
    assert before != after
    key = ("bwrap", "/cache")
    assert keptserver.address(key, before) != keptserver.address(key, after)
    assert keptserver.address(key, before) == keptserver.address(key, before)


def test_the_keep_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(keptserver.KEEP_ENV, raising=False)
    monkeypatch.setattr(keptserver, "_ONE_SHOT", [False])
    assert keptserver.keep_seconds() == 0  # a command that evaluates many times keeps nothing
    assert not forkserver.kept(EvalOptions(device="cpu", workers="fork"))
    keptserver.for_one_shot_command()
    assert keptserver.keep_seconds() == keptserver.DEFAULT_KEEP_S
    monkeypatch.setenv(keptserver.KEEP_ENV, "0")
    assert keptserver.keep_seconds() == 0
    assert not forkserver.kept(EvalOptions(device="cpu", workers="fork"))
    monkeypatch.setenv(keptserver.KEEP_ENV, "30")
    assert forkserver.kept(EvalOptions(device="cpu", workers="fork"))
    assert not forkserver.kept(EvalOptions(device="cpu", workers="exec"))  # nothing forked, nothing kept
    for bad in ("-1", "soon", "nan", "inf", "1e12"):
        monkeypatch.setenv(keptserver.KEEP_ENV, bad)
        with pytest.raises(keptserver.KeepError, match=keptserver.KEEP_ENV):
            keptserver.keep_seconds()


def test_the_doctor_says_whether_servers_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.cli.doctor import _kept_status

    monkeypatch.setattr(keptserver, "_ONE_SHOT", [False])
    monkeypatch.setenv(keptserver.KEEP_ENV, "90")
    state, detail, _ = _kept_status()
    assert state == "ok" and "eval's server is kept 90 s" in detail
    monkeypatch.setenv(keptserver.KEEP_ENV, "0")
    assert "ends with it" in _kept_status()[1]
    monkeypatch.setenv(keptserver.KEEP_ENV, "often")
    state, detail, fix = _kept_status()
    assert state == "warn" and "'often'" in detail and keptserver.KEEP_ENV in fix


def test_a_kept_server_that_forks_nothing_is_ended_and_the_next_command_starts_a_new_one(
    tmp_path: Path, ext_cache: Path, kept_here: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forkserver, "FORK_TIMEOUT_S", 2.0)  # the bound on one fork, shortened for the test
    options = _kept_options(ext_cache, _strongest_here())
    server = forkserver.server_for(options, ext_cache)
    assert server is not None and server.kept
    [stuck] = _servers_of(kept_here)
    os.kill(stuck, signal.SIGSTOP)  # alive, holding its name, answering nothing
    result = evaluate(TASK, HONEST, options)
    assert (result.status, result.settings["worker_start"]) == ("correct", "exec")
    assert until(lambda: not Path(f"/proc/{stuck}").exists() or _state(stuck) == "Z", 60)  # ended, not left to hold up others
    env = {**os.environ, "CUDAFORGE_CACHE_DIR": str(ext_cache), "CUDAFORGE_WORKERS": "fork"}
    later = _eval(env, KERNEL_PATH, "--sandbox", options.sandbox)
    assert later.returncode == 0, later.stderr[-2000:]
    assert json.loads(later.stdout)["settings"]["worker_start"] == "exec"  # it launched a new one for the next
    assert until(lambda: [pid for pid in _servers_of(kept_here) if pid != stuck] != [], 60)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rindex(")") + 2]


def test_job_folders_left_a_day_ago_in_the_shared_folder_are_removed_by_the_next_command() -> None:
    root = jobdirs.jobs_root(shared=True)
    old, fresh = root / f"cudaforge-eval-left-{os.getpid()}", root / f"cudaforge-eval-busy-{os.getpid()}"
    for folder in (old, fresh):
        folder.mkdir()
        (folder / "worker.log").write_text("x")
    day_and_more = time.time() - jobdirs.STALE_S - 60
    os.utime(old, (day_and_more, day_and_more))
    try:
        subprocess.run([sys.executable, "-c", "from engine.eval import jobdirs; jobdirs.jobs_root(shared=True)"], cwd=REPO, check=True, timeout=120)
        assert not old.exists() and fresh.is_dir()
    finally:
        for folder in (old, fresh):
            subprocess.run(["rm", "-rf", str(folder)])


def test_a_process_that_took_the_servers_name_is_never_handed_a_worker(ext_cache: Path, kept_here: str) -> None:
    options = _kept_options(ext_cache, _strongest_here())
    key = forkserver.server_key(options, ext_cache)
    name = forkserver.kept_address(key, options, ext_cache)
    impostor = keptserver.listen(name)  # this user's process, but not a server a command started
    assert impostor is not None
    requests: list[bytes] = []

    def answer() -> None:
        connection, _ = impostor.accept()
        connection.send(zygote.READY)
        connection.settimeout(30)
        with contextlib.suppress(OSError):
            requests.append(connection.recv(1 << 20))
        connection.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        result = evaluate(TASK, HONEST, options)
        assert (result.status, result.settings["worker_start"]) == ("correct", "exec")
        assert "no command of this user started" in (forkserver.broken(options, ext_cache) or "")
        thread.join(60)
        assert requests == [b""]  # the command left without a request, or the pipes one carries
    finally:
        impostor.close()


def test_a_fork_that_fails_ends_only_this_commands_use_of_a_kept_server(ext_cache: Path, kept_here: str, tmp_path: Path) -> None:
    options = _kept_options(ext_cache, _strongest_here())
    server = forkserver.server_for(options, ext_cache)
    assert server is not None and server.kept
    null = os.open(os.devnull, os.O_RDWR)
    try:
        with pytest.raises(forkserver.ForkError) as failed:  # a child that cannot set itself up
            server.spawn(tmp_path / "no-such-job-folder", ["job.json"], {}, null, null, null)
    finally:
        os.close(null)
    assert not failed.value.stuck
    forkserver.give_up(server, str(failed.value), stuck=failed.value.stuck)
    assert forkserver.server_for(options, ext_cache) is None  # this process starts its workers anew
    assert len(_servers_of(kept_here)) == 1  # while the server goes on for every other command


def test_a_bad_workers_variable_is_a_usage_error_that_names_it(tmp_path: Path, ext_cache: Path) -> None:
    done = _eval({**_kept_env(tmp_path, ext_cache), "CUDAFORGE_WORKERS": "frok"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "CUDAFORGE_WORKERS" in done.stderr and "'frok'" in done.stderr


def test_the_doctor_says_what_the_workers_variable_chose(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from engine.cli.doctor import _workers_check

    monkeypatch.chdir(tmp_path)  # no cudaforge.toml here: [eval] workers is auto
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("CUDAFORGE_WORKERS", "frok")
    check = _workers_check()
    assert check.state == "warn" and "'frok'" in check.detail and "CUDAFORGE_WORKERS" in check.fix
    monkeypatch.setenv("CUDAFORGE_WORKERS", "exec")
    check = _workers_check()
    assert (check.state, check.detail) == ("ok", "each a new interpreter ($CUDAFORGE_WORKERS=exec)")
