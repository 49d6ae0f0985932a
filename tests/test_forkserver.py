"""Workers forked from a sandboxed server that imported torch once (engine/eval/forkserver.py,
engine/eval/zygote.py), on CPU with real servers, real sandboxes and real C++ extensions.

A forked worker must give the verdict a started one gives (a crash included: its exit status comes from
the server), and must be kept apart from its siblings and its server although they share the server's
sandbox: no signal, no look into their memory or environment, no write into their folders, none of the
server's descriptors.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import procgroups
from engine.config import ConfigError, load_config
from engine.eval import forkserver, spare
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions, EvaluationError
from engine.guard.policy import GuardSettings
from engine.guard.static import check_source
from engine.sandbox import available_mechanisms
from engine.sandbox.report import workers_status
from tests.conftest import EXAMPLES, REPO, until, with_run_headers

TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
HONEST = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()
CRASHING = HONEST.replace("return ext.relu(x)", "return ext.crash(x)")
CONFINED = ["bwrap", "landlock"]

# Run at the candidate's import, before its honest kernel: everything a forked worker could try against
# the processes and folders it shares a sandbox with. SIBLING_DIR and SIBLING_PID are the test's own
# knowledge of where the other worker waits and which pid it has (a candidate could not list the folder
# of job folders, nor read /proc beyond its own entry, to find them; it could guess a pid).
HOSTILE = r'''
import json as _json, os as _os, signal as _signal, stat as _stat
_report, _me, _server = [], _os.getpid(), _os.getppid()

_targets = [_server, SIBLING_PID]  # its parent; the sibling as its own pid namespace numbers it
for _pid in _targets:
    for _what, _try in (
        ("environ", lambda: open(f"/proc/{_pid}/environ", "rb").read()),
        ("mem", lambda: open(f"/proc/{_pid}/mem", "rb").close()),
        ("kill", lambda: _os.kill(_pid, _signal.SIGKILL)),
    ):
        try:
            _try()
            _report.append(f"REACHED {_what} {'server' if _pid == _server else 'sibling'}")
        except OSError:
            _report.append(f"BLOCKED {_what} {'server' if _pid == _server else 'sibling'}")
for _folder in ("SIBLING_DIR", _os.path.dirname(_os.getcwd())):
    try:
        open(_os.path.join(_folder, "planted.txt"), "w").write("x")
        _report.append(f"REACHED write {_folder}")
    except OSError:
        _report.append(f"BLOCKED write {_folder}")
for _fd in _os.listdir("/proc/self/fd"):
    try:
        if _stat.S_ISSOCK(_os.fstat(int(_fd)).st_mode):
            _report.append(f"REACHED socket {_fd}")
    except OSError:
        pass
print("ESCAPE-REPORT " + _json.dumps(_report), flush=True)
'''


@pytest.fixture(autouse=True)
def _servers_of_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The servers under test here are each process's own (tests/test_keptserver.py has the kept ones)."""
    monkeypatch.setenv("CUDAFORGE_KEEP_SERVER_S", "0")


def _options(cache: Path, mechanism: str, **overrides: object) -> EvalOptions:
    settings: dict[str, object] = {"workers": "fork", "do_timing": False, "trials": 2, **overrides}
    return EvalOptions(device="cpu", cache_root=cache, sandbox=mechanism, **settings)  # type: ignore[arg-type]


def _strongest_here() -> str:
    """The first confining mechanism this machine can run, else ``off``."""
    return next((m for m in CONFINED if not available_mechanisms().get(m)), "off")


def _skip_unless(mechanism: str) -> None:
    why = available_mechanisms().get(mechanism)
    if why:
        pytest.skip(f"{mechanism} cannot run here: {why}")


def _innermost_pid(pid: int) -> int:
    """``pid`` as its own (innermost) pid namespace numbers it: under bwrap, the sandbox's numbering."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return pid


def _report(stderr_tail: str) -> list[str]:
    [line] = [line for line in stderr_tail.splitlines() if line.startswith("ESCAPE-REPORT ")]
    return json.loads(line.removeprefix("ESCAPE-REPORT "))


@pytest.mark.parametrize("mechanism", [*CONFINED, "off"])
def test_a_forked_worker_gives_the_verdicts_a_started_one_gives(mechanism: str, ext_cache: Path) -> None:
    _skip_unless(mechanism)
    for source, status in ((HONEST, "correct"), (CRASHING, "runtime_error")):
        forked = evaluate(TASK, source, _options(ext_cache, mechanism))
        started = evaluate(TASK, source, _options(ext_cache, mechanism, workers="exec"))
        assert (forked.settings["worker_start"], started.settings["worker_start"]) == ("fork", "exec")
        assert forked.status == started.status == status, (forked.messages, started.messages)
        assert forked.signal == started.signal  # a crash's signal, from the server's reaping of it
        assert forked.sandbox == started.sandbox == mechanism
    assert forked.signal == "SIGSEGV"


@pytest.mark.parametrize("mechanism", CONFINED)
def test_a_forked_worker_cannot_reach_its_server_or_a_sibling(
    mechanism: str, ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _skip_unless(mechanism)
    monkeypatch.setenv("PATH", f"{os.environ['PATH']}{os.pathsep}{tmp_path}")  # a server of this test's own
    options = _options(ext_cache, mechanism)
    sibling = spare.start(options, ext_cache)  # another forked worker of the same server, waiting for its job
    assert sibling is not None and sibling.worker.forked
    try:
        hostile = HOSTILE.replace("SIBLING_DIR", str(sibling.job_dir))
        hostile = hostile.replace("SIBLING_PID", str(_innermost_pid(sibling.worker.process.pid))) + HONEST
        # the sandbox is under test, not the static guard, which would refuse this source unrun
        relax = tuple(sorted({f.rule for f in check_source(hostile, backend="cpu") if f.severity == "refuse"}))
        result = evaluate(TASK, hostile, _options(ext_cache, mechanism, guard=GuardSettings(relax=relax)))
        report = _report(result.stderr_tail)
        assert result.status == "correct", result.messages
        assert [line for line in report if line.startswith("REACHED")] == [], report
        # the attempts were made, against both kinds of neighbour
        for what in ("environ", "mem", "kill"):
            assert {f"BLOCKED {what} server", f"BLOCKED {what} sibling"} <= set(report), report
        assert f"BLOCKED write {sibling.job_dir}" in report
        assert not (sibling.job_dir / "planted.txt").exists()
        served = evaluate(TASK, HONEST, options, worker=sibling)  # the sibling lived through it
        assert (served.status, served.settings["worker"], served.settings["worker_start"]) == ("correct", "spare", "fork")
    finally:
        spare.release(sibling)
    after = evaluate(TASK, HONEST, options)  # and so did the server
    assert (after.status, after.settings["worker_start"]) == ("correct", "fork")


def test_when_the_server_dies_its_workers_end_and_the_next_evaluation_gets_a_new_one(ext_cache: Path) -> None:
    mechanism = _strongest_here()
    options = _options(ext_cache, mechanism)
    waiting = spare.start(options, ext_cache)
    assert waiting is not None and waiting.worker.forked
    server = forkserver.server_for(options, ext_cache)
    assert server is not None
    procgroups.kill_tree(server.process.pid)
    assert until(lambda: waiting.worker.process.poll() is not None, 60)
    assert waiting.worker.process.returncode == -signal.SIGKILL
    assert spare.claim(waiting, options, ext_cache) is None  # a dead spare is given up, not used
    result = evaluate(TASK, HONEST, options)
    assert (result.status, result.settings["worker_start"]) == ("correct", "fork")
    assert forkserver.server_for(options, ext_cache) is not server


def test_a_server_first_asked_for_by_a_thread_that_ends_outlives_that_thread(
    ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bwrap's --die-with-parent ends its child when the *thread* that started it ends: an exploration's
    # branch thread or a spare's must not take the server, and every later worker, with it.
    mechanism = _strongest_here()
    monkeypatch.setenv("PATH", f"{os.environ['PATH']}{os.pathsep}{tmp_path}")  # a server of this test's own
    options = _options(ext_cache, mechanism)
    first: list = []
    thread = threading.Thread(target=lambda: first.append(evaluate(TASK, HONEST, options)))
    thread.start()
    thread.join()
    assert (first[0].status, first[0].settings["worker_start"]) == ("correct", "fork")
    server = forkserver.server_for(options, ext_cache)
    later = evaluate(TASK, HONEST, options)
    assert (later.status, later.settings["worker_start"]) == ("correct", "fork")
    assert forkserver.server_for(options, ext_cache) is server and server is not None and server.alive()


def test_a_server_that_stops_answering_is_given_up_and_workers_start_anew(
    ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mechanism = _strongest_here()
    monkeypatch.setenv("PATH", f"{os.environ['PATH']}{os.pathsep}{tmp_path}")  # a server of this test's own
    monkeypatch.setattr(forkserver, "FORK_TIMEOUT_S", 2.0)  # the bound on one fork, shortened for the test
    options = _options(ext_cache, mechanism)
    server = forkserver.server_for(options, ext_cache)
    assert server is not None
    for pid in [server.process.pid, *procgroups.descendants(server.process.pid)]:
        os.kill(pid, signal.SIGSTOP)  # alive, but it answers nothing
    result = evaluate(TASK, HONEST, options)
    assert (result.status, result.settings["worker_start"]) == ("correct", "exec")
    assert "forked nothing" in (forkserver.broken(options, ext_cache) or "")
    assert forkserver.server_for(options, ext_cache) is None  # given up: what it forked may still be finishing
    again = evaluate(TASK, HONEST, options)  # no second wait for it
    assert (again.status, again.settings["worker_start"]) == ("correct", "exec")


def _relaxed(source: str) -> GuardSettings:
    """The static guard's refusing rules relaxed: the sandbox and the fork server are under test."""
    return GuardSettings(relax=tuple(sorted({f.rule for f in check_source(source, backend="cpu") if f.severity == "refuse"})))


def _alive(mark: str) -> bool:
    return bool(subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True).stdout.strip())


INIT_ALONE = """
import ctypes, ctypes.util, os, sys
from engine.eval import zygote
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as the server makes each worker's init
_, verdict = os.pipe()
worker = os.fork()
if worker == 0:
    if os.fork() == 0:
        os.setsid()
        os.execvp("sleep", ["sleep", sys.argv[1]])
    os._exit(3)
zygote._watch(worker, verdict)
"""


def test_a_workers_init_ends_what_the_worker_left_before_it_ends_itself() -> None:
    """The init alone, with no server behind it (whose own sweep of strays would hide a lapse here):
    the worker's setsid'd child, reparented to the init when the worker ends, is ended by it, and the
    init ends with the worker's own exit status."""
    mark = f"{os.getpid() % 1000 + 2000}.{int(time.time() * 1000) % 100000}"
    try:
        done = subprocess.run([sys.executable, "-c", INIT_ALONE, mark], cwd=REPO, capture_output=True, timeout=120)
        assert done.returncode == 3, done.stderr
        assert not _alive(mark)
    finally:
        subprocess.run(["pkill", "-9", "-f", f"sleep {mark}"], capture_output=True)


@pytest.mark.parametrize("mechanism", CONFINED)
def test_what_a_forked_worker_leaves_behind_ends_with_its_evaluation(mechanism: str, ext_cache: Path) -> None:
    """A setsid'd grandchild, orphaned while the worker runs, must not outlive the evaluation although
    the server, and under bwrap its pid namespace, live on."""
    _skip_unless(mechanism)
    mark = f"{os.getpid() % 1000 + 1000}.{int(time.time() * 1000) % 100000}"
    leave = (
        "import os as _o\n"
        "if _o.fork() == 0:\n"
        "    _o.setsid()\n"
        "    if _o.fork() == 0:\n"
        f"        _o.execvp('sleep', ['sleep', '{mark}'])\n"
        "    _o._exit(0)\n"
        "_o.wait()\n"
    )
    source = leave + HONEST
    try:
        result = evaluate(TASK, source, _options(ext_cache, mechanism, guard=_relaxed(source)))
        assert (result.status, result.settings["worker_start"]) == ("correct", "fork"), result.messages
        assert forkserver.server_for(_options(ext_cache, mechanism), ext_cache) is not None  # the server lives on
        assert not _alive(mark)
    finally:
        subprocess.run(["pkill", "-9", "-f", f"sleep {mark}"], capture_output=True)


def test_a_worker_lost_with_its_server_is_cudaforges_fault(ext_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mechanism = _strongest_here()
    monkeypatch.setenv("PATH", f"{os.environ['PATH']}{os.pathsep}{tmp_path}")  # a server of this test's own
    source = "import time as _t\nprint('WAITING-AT-IMPORT', flush=True)\n_t.sleep(120)\n" + HONEST
    options = _options(ext_cache, mechanism, guard=_relaxed(source))
    seen = threading.Event()
    on_event = lambda event: seen.set() if "WAITING-AT-IMPORT" in (event.text or "") else None  # noqa: E731
    results: list = []
    thread = threading.Thread(target=lambda: results.append(evaluate(TASK, source, options, on_event)))
    thread.start()
    assert seen.wait(120)  # the candidate is being imported: its worker is running
    server = forkserver.server_for(options, ext_cache)
    assert server is not None
    procgroups.kill_tree(server.process.pid)  # the server dies (the OOM killer's choice, say), its workers with it
    thread.join(120)
    [result] = results
    assert (result.status, result.failed_side) == ("harness_error", "harness"), result.messages
    assert "fork server" in result.messages[-1] and "not the kernel's" in result.messages[-1]


def test_workers_that_could_not_be_kept_apart_start_as_new_interpreters(
    ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _skip_unless("bwrap")
    # A kernel whose Landlock has no signal scopes (before Linux 6.12): siblings under one bwrap could
    # signal each other, so no server is started and each worker gets a sandbox of its own.
    monkeypatch.setattr("engine.sandbox.landlock.abi_version", lambda: 5)
    cache = with_run_headers(ext_cache / "never-forked")  # settings no earlier test started a server for
    options = _options(cache, "bwrap")
    result = evaluate(TASK, HONEST, options)
    assert (result.status, result.settings["worker_start"]) == ("correct", "exec")
    assert "Landlock ABI 6" in (forkserver.broken(options, cache.resolve()) or "")
    state, detail, _ = workers_status("auto", "bwrap")  # and the doctor says so
    assert state == "warn" and "each a new interpreter" in detail and "Landlock ABI 6" in detail


def test_the_doctor_says_how_workers_start() -> None:
    assert workers_status("exec", "off") == ("ok", "each a new interpreter ([eval] workers = exec)", "")
    for workers in ("auto", "fork"):
        state, detail, _ = workers_status(workers, "off")
        assert state == "ok" and detail.startswith("CPU and CUDA workers forked"), detail


def test_the_workers_setting_is_checked_and_auto_forks_on_cpu_and_cuda(tmp_path: Path) -> None:
    (tmp_path / "cudaforge.toml").write_text('[eval]\nworkers = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"\[eval\] workers"):
        load_config(cwd=tmp_path, env={})
    for device in ("cpu", "cuda"):
        assert forkserver.wanted(EvalOptions(device=device))
        assert forkserver.wanted(EvalOptions(device=device, workers="fork"))
        assert not forkserver.wanted(EvalOptions(device=device, workers="exec"))
    with pytest.MonkeyPatch.context() as env:  # how a benchmark measures both ways where the config says auto
        env.setenv(forkserver.WORKERS_ENV, "exec")
        assert not forkserver.wanted(EvalOptions(device="cuda"))
        assert forkserver.wanted(EvalOptions(device="cuda", workers="fork"))
        env.setenv(forkserver.WORKERS_ENV, "fork")
        assert not forkserver.wanted(EvalOptions(device="cpu", workers="exec"))
        env.setenv(forkserver.WORKERS_ENV, "exce")  # a typo is said, never taken for fork
        with pytest.raises(EvaluationError, match=r"CUDAFORGE_WORKERS is 'exce'"):
            forkserver.wanted(EvalOptions(device="cpu"))


@pytest.mark.gpu
def test_on_the_gpu_forked_workers_side_by_side_each_find_the_device(ext_cache: Path) -> None:
    """Forked CUDA workers, several at once from one server, each see the GPU and give the started
    verdict. On the H200, workers that inherited the server's NVML session saw no device in 6 of 10
    evaluations ("Invalid device id", a harness fault on an honest kernel)."""
    if not __import__("torch").cuda.is_available():
        pytest.skip("no CUDA device here")
    task = (EXAMPLES / "tasks" / "relu_large.py").read_text()
    kernel = (EXAMPLES / "kernels" / "relu_cuda.py").read_text()
    options = EvalOptions(device="cuda", cache_root=ext_cache, workers="fork", do_timing=False, trials=2)
    assert evaluate(task, kernel, options).status == "correct"  # the build, once, before the crowd
    results: list[object] = []

    def one() -> None:
        results.append(evaluate(task, kernel, options))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [(r.settings["worker_start"], r.status) for r in results] == [("fork", "correct")] * 6, [
        r.messages for r in results
    ]
