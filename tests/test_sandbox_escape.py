"""The escape corpus (tests/fixtures/escape): each candidate tries one way out through the real
``cudaforge eval --device cpu``; afterwards the test checks that the attempt had no effect.

The static guard would refuse most of these files before they run; to test the SANDBOX, each run
relaxes exactly the static rules that refuse it (``--relax``, computed with ``check_source``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from engine.config import USER_CONFIG_ENV
from engine.sandbox import available_mechanisms, prepare
from engine.sandbox.bwrap import find_bwrap
from tests.conftest import EXAMPLES, REPO, python_path, until

ESCAPES = Path(__file__).parent / "fixtures" / "escape"
TASK = EXAMPLES / "tasks" / "relu.py"
HONEST = EXAMPLES / "kernels" / "relu_cpu.py"
CUDA_TASK = EXAMPLES / "tasks" / "relu_large.py"
CUDA_HONEST = EXAMPLES / "kernels" / "relu_cuda.py"
FAKE_OPENAI = "sk-test-SANDBOXLEAK-0123456789abcdef"
FAKE_AWS = "AWSSECRET/SANDBOXLEAK/abcdefghij"
FAKE_SSH = "-----BEGIN OPENSSH PRIVATE KEY-----\nSANDBOXLEAK-ssh-private\n-----END OPENSSH PRIVATE KEY-----\n"
MECHANISMS = [m for m in ("bwrap", "landlock")]
NAMES = sorted(p.stem for p in ESCAPES.glob("*.py"))


def _skip_unless(mechanism: str) -> None:
    why = available_mechanisms().get(mechanism)
    if why:
        pytest.skip(f"{mechanism} cannot run here: {why}")


class Listener:
    """A local TCP server that records every connection (the socket escape must never reach it)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.server.settimeout(0.2)
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.server.close()


@pytest.fixture
def world(tmp_path: Path, ext_cache: Path):
    """The user's world as a candidate would like to find it: a home with a key, sessions, a cwd."""
    made = make_world(tmp_path, ext_cache)
    yield made
    made["listener"].close()


def make_world(tmp_path: Path, ext_cache: Path) -> dict:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(FAKE_SSH)
    sessions = tmp_path / "sessions"
    (sessions / "victim").mkdir(parents=True)
    (sessions / "other").mkdir(parents=True)
    (sessions / "other" / "secret.txt").write_text("SANDBOXLEAK-other-session")
    out = tmp_path / "outside"
    out.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    listener = Listener()
    return {
        "home": home,
        "sessions": sessions,
        "out": out,
        "cwd": cwd,
        "cache": ext_cache,
        "listener": listener,
        "tmp": tmp_path,
        "repo": REPO,  # what @REPO@ names: the real checkout (read-only to the sandboxed candidate)
        "engine_pid": os.getpid(),  # what @ENGINE_PID@ names: this very test process
        "engine": None,  # the decoy standing in for it in the unsandboxed control (a Popen)
    }


def candidate_source(names: str | tuple[str, ...], world: dict, mark: str, honest: Path = HONEST) -> str:
    """The payload ``names`` (or several, run in turn) on top of the honest kernel, its placeholders naming
    ``world``'s targets. Each runs in ``exec`` within a try, so a blocked attempt cannot stop the candidate
    from loading; stderr_crash, whose point is to crash it, runs bare and last."""
    names = (names,) if isinstance(names, str) else names
    assert "stderr_crash" not in names[:-1], "stderr_crash ends the candidate: it can only come last"
    parts = []
    for name in names:
        payload = _payload(name, world, mark)
        bare = name == "stderr_crash"
        parts.append(payload if bare else f"try:\n    exec({payload!r})\nexcept BaseException:\n    pass\n")
    return "\n".join(parts) + "\n" + honest.read_text()


def _payload(name: str, world: dict, mark: str) -> str:
    payload = (ESCAPES / f"{name}.py").read_text()
    for key, value in {
        "@OUT@": world["out"],
        "@HOME@": world["home"],
        "@REPO@": world["repo"],
        "@CWD@": world["cwd"],
        "@CACHE@": world["cache"],
        "@SESSIONS@": world["sessions"],
        "@PORT@": world["listener"].port,
        "@ENGINE_PID@": world["engine_pid"],
        "@MARK@": mark,
    }.items():
        payload = payload.replace(key, str(value))
    return payload


def refusing_rules(source: str, backend: str = "cpu") -> list[str]:
    from engine.guard.static import check_source

    return sorted({f.rule for f in check_source(source, backend=backend) if f.severity == "refuse"})


def run_eval(
    kernel: Path,
    mechanism: str,
    world: dict,
    relax: list[str],
    user: list[str] | None = None,
    cache: Path | None = None,
    device: str = "cpu",
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": python_path(),
        "HOME": str(world["home"]),
        "CUDAFORGE_CACHE_DIR": str(cache or world["cache"]),
        "CUDAFORGE_SESSIONS_DIR": str(world["sessions"]),
        "OPENAI_API_KEY": FAKE_OPENAI,
        "ANTHROPIC_API_KEY": FAKE_OPENAI + "-anthropic",
        "AWS_SECRET_ACCESS_KEY": FAKE_AWS,
        "GITHUB_TOKEN": "ghp_SANDBOXLEAKtoken",
        "MY_SERVICE_SECRET": "SANDBOXLEAK-service",
        # The worker's ancestors are this command, which holds the keys above: no server kept from an
        # earlier command (detached, its environment the allow-list) between them. With one, a worker that
        # walked up /proc met only that server and init, and a Landlock that let it read every process's
        # /proc entry passed (the mutant landlock-reads-all-proc survived the kept servers of session 21).
        # Payloads whose attack needs a server that outlives the command say so (KEPT_SERVER_PAYLOADS).
        "CUDAFORGE_KEEP_SERVER_S": "0",
    }
    if os.environ.get("CUDAFORGE_BWRAP"):
        env["CUDAFORGE_BWRAP"] = os.environ["CUDAFORGE_BWRAP"]
    env.update(extra_env or {})
    argv = [
        *(user or []),
        sys.executable,
        "-m",
        "tui.cli",
        "eval",
        str(TASK if device == "cpu" else CUDA_TASK),
        str(kernel),
        "--device",
        device,
        "--no-timing",
        "--trials",
        "2",
        "--json",
        "--sandbox",
        mechanism,
        "--timeout",
        "240",
    ]
    for rule in relax:
        argv += ["--relax", rule]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=world["cwd"], timeout=600)


def _alive(mark: str) -> bool:
    done = subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True)
    return bool(done.stdout.strip())


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("name", NAMES)
def test_escape_attempt_has_no_effect(name: str, mechanism: str, world: dict) -> None:
    check_escape(name, mechanism, world, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("name", NAMES)
def test_escape_attempt_has_no_effect_on_cuda(name: str, mechanism: str, world: dict) -> None:
    """The same corpus, the honest part being the CUDA ReLU on the GPU (run on the H200)."""
    check_escape(name, mechanism, world, "cuda")


# Run with a kept server: what a worker leaves behind must end with its evaluation although its server lives on
# for the next command (the worker's own init ends it, engine/eval/zygote.py). A server that ended with the
# command ended it anyway (the mutant orphans-outlive-forked-worker survived so), and under Landlock alone a
# one-shot command that started its worker anew while its server launched left the daemon running (session 22).
KEPT_SERVER_PAYLOADS = frozenset({"daemon"})


def check_escape(name: str, mechanism: str, world: dict, device: str) -> None:
    _skip_unless(mechanism)
    if name == "daemon" and mechanism == "landlock" and device != "cpu":
        # A worker started anew leaves nothing that ties its setsid daemon to the run; a forked worker's init
        # ends what it leaves behind (engine/eval/zygote.py). Auto forks CUDA workers since session 22, but
        # whether this case then passes has not run on a GPU: kept expected to fail until it has.
        pytest.xfail("Landlock does not tie a setsid daemon of a worker started anew to the run")
    mark = f"{int(time.time() * 1000) % 100000 + 100000}.{os.getpid() % 1000}"
    source = candidate_source(name, world, mark, HONEST if device == "cpu" else CUDA_HONEST)
    kernel = world["tmp"] / f"{name}.py"
    kernel.write_text(source)
    kept = {"CUDAFORGE_KEEP_SERVER_S": "600"} if name in KEPT_SERVER_PAYLOADS else None
    done = run_eval(kernel, mechanism, world, refusing_rules(source, device), device=device, extra_env=kept)
    # cudaforge survived and returned a result, whatever the candidate did
    assert done.returncode in (0, 1), done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["sandbox"] == mechanism
    assert result["status"] != "rejected", result["messages"]
    if name != "stderr_crash":
        assert result["status"] == "correct", (result["messages"], result["stderr_tail"])
    if name == "cpp_escape":  # its C++ was built and loaded, so the attempt ran (a compile error would hide it)
        built = {e["name"]: e["ok"] for e in result["build"]["extensions"]}
        assert built.get("cf_escape_cpp") is True, result["build"]
    if name == "daemon":  # bwrap ends its pid namespace a moment after cudaforge has returned
        until(lambda: not _alive(mark), 30)
    assert escape_effects(world, done, mark) == set()


def escape_effects(world: dict, done: subprocess.CompletedProcess[str], mark: str) -> set[str]:
    """Every effect of the corpus that can be seen from outside, as labels: what the sandboxed runs must
    leave at nothing and what the unsandboxed control must find (``test_escape_payload_works_unsandboxed``).

    Files written outside (the home, the repo, the cwd, a session), a secret in the cache or in what
    cudaforge printed, a connection to the listener, a daemon still alive, cudaforge or the process
    named as the engine killed, the worker having seen a key (stderr_crash prints what it sees).
    """
    found = {f"out/{p.name}" for p in world["out"].iterdir()}
    found |= {f"cwd/{p.name}" for p in world["cwd"].iterdir()}
    found |= {f"sessions/victim/{p.name}" for p in (world["sessions"] / "victim").iterdir()}
    found |= {f"home/{n}" for n in ("system_call", "raw_write", "cpp_system") if (world["home"] / n).exists()}
    found |= {f"repo/{n}" for n in ("raw_write", "mount_escape") if (world["repo"] / n).exists()}
    for leak in ("api_key_leak", "ssh_key_leak", "proc_environ_leak"):
        path = world["cache"] / leak
        if path.exists():
            text = path.read_text()
            path.unlink()  # the build cache is shared: leave nothing in it
            if "SANDBOXLEAK" in text or FAKE_OPENAI in text:
                found.add(f"cache/{leak}")
    for secret in (FAKE_OPENAI, FAKE_AWS, "SANDBOXLEAK"):  # the scrubber's job, the sandbox's first
        if secret in done.stdout or secret in done.stderr:
            found.add(f"printed {secret}")
    if world["listener"].connections:
        found.add("socket")
    if _alive(mark):
        found.add("daemon")
    if done.returncode == -signal.SIGKILL:
        found.add("cudaforge killed")
    if world["engine"] is not None and world["engine"].poll() is not None:
        found.add("engine killed")
    try:
        tail = json.loads(done.stdout).get("stderr_tail") or ""
    except ValueError:
        tail = ""
    seen = re.search(r"^KEY=(\S+) AWS=(\S+)$", tail, re.M)
    if seen and seen.groups() != ("none", "none"):
        found.add("worker saw a key")
    return found


# The positive control: what each payload does when nothing stops it, seen by ``escape_effects`` as the
# sandboxed test looks for it. Without it a payload broken on purpose or by accident (a typo in a path,
# a placeholder left unreplaced) would "pass" the sandboxed test forever, its effect never happening.
UNSANDBOXED_EFFECTS: dict[str, set[str]] = {
    "api_key": {"out/api_key", "cache/api_key_leak"},
    "cpp_escape": {"out/cpp_system", "home/cpp_system", "out/cpp_open", "out/cpp_key", "cudaforge killed"},
    "ctypes_tricks": {"out/ctypes_system", "out/ctypes_open", "out/ctypes_symlink", "out/ctypes_spawn"},
    "cwd_write": {"cwd/cwd_write"},
    "daemon": {"daemon"},
    "kill_parent": {"cudaforge killed", "engine killed"},
    "proc_environ": {"out/proc_environ", "cache/proc_environ_leak"},
    "raw_write": {"out/raw_write", "home/raw_write", "repo/raw_write"},
    "session_repo": {"sessions/victim/pwned", "out/other_session", "printed SANDBOXLEAK"},
    "socket_connect": {"socket"},
    "ssh_key": {"out/ssh_key", "cache/ssh_key_leak", "printed SANDBOXLEAK"},
    "stderr_crash": {"worker saw a key"},
    "system_call": {"out/system_call", "home/system_call"},
}
NOT_CONTROLLED = {
    # Its effect is on this machine's own mounts: unsandboxed, as root (as on the GPU machine), it would
    # detach the real /tmp and remount the real / read-write. No decoy can stand in for / and /tmp
    # short of a mount namespace, which is what the sandbox is; its file writes alone prove nothing.
    "mount_tricks": "acts on the machine's own / and /tmp",
}
# One cudaforge run per group, to keep the time down (a run is seconds): the effects are told apart by
# their labels. A payload that kills cudaforge runs alone: a second one, run by the then orphaned worker,
# would signal whatever adopted it. stderr_crash ends the candidate, so it comes last.
_ALONE = {"cpp_escape", "kill_parent", "stderr_crash"}
CONTROL_RUNS = [
    (*sorted(UNSANDBOXED_EFFECTS.keys() - _ALONE), "stderr_crash"),
    ("kill_parent",),
    ("cpp_escape",),
]


def decoy_world(tmp_path: Path) -> dict:
    """A world for running the corpus with no sandbox: every target is the test's own. The repo is a
    folder, the engine a ``sleep`` child, the cache named by @CACHE@ a folder (not the shared build cache,
    which other tests read), and TMPDIR a folder, so a worker that outlives its killed cudaforge (and
    the job folder it leaves) is found by its command line and ended."""
    world = make_world(tmp_path, tmp_path / "cache")
    for folder in ("cache", "repo", "tmpdir"):
        (tmp_path / folder).mkdir()
    world["repo"] = tmp_path / "repo"
    world["engine"] = subprocess.Popen(["sleep", "600"])
    world["engine_pid"] = world["engine"].pid
    return world


def _processes_naming(root: Path, also: str = "") -> list[int]:
    """Live processes whose command line names ``root`` (and contains ``also``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"{root}/".encode() in command and also.encode() in command:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("names", CONTROL_RUNS, ids=lambda names: "+".join(names))
def test_escape_payload_works_unsandboxed(names: tuple[str, ...], tmp_path: Path, ext_cache: Path) -> None:
    """Each payload, run with ``--sandbox off`` against decoys, has the effects listed for it (and the
    run has no others)."""
    world = decoy_world(tmp_path)
    mark = f"{int(time.time() * 1000) % 100000 + 100000}.{os.getpid() % 1000}"
    try:
        source = candidate_source(names, world, mark)
        kernel = tmp_path / "payloads.py"
        kernel.write_text(source)
        # Workers started as new interpreters: kill_parent aims at the process that started the worker,
        # which a forked worker's parent (the fork server, engine.eval.forkserver) is not.
        config = tmp_path / "config.toml"
        config.write_text('[eval]\nworkers = "exec"\n')
        settings = {"TMPDIR": str(tmp_path / "tmpdir"), USER_CONFIG_ENV: str(config)}
        done = run_eval(kernel, "off", world, refusing_rules(source), cache=ext_cache, extra_env=settings)
        deadline = time.monotonic() + 15  # a worker whose cudaforge was killed finishes on its own
        while _processes_naming(tmp_path / "tmpdir", "engine.eval.worker") and time.monotonic() < deadline:
            time.sleep(0.1)
        effects = escape_effects(world, done, mark)
    finally:
        daemon = subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True).stdout
        for pid in [*_processes_naming(tmp_path), *map(int, daemon.split())]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        world["engine"].kill()
        world["engine"].wait()
        world["listener"].close()
    missing = {name: sorted(UNSANDBOXED_EFFECTS[name] - effects) for name in names}
    report = (done.returncode, done.stdout[-3000:], done.stderr[-2000:])
    assert {name: gone for name, gone in missing.items() if gone} == {}, report
    assert effects == set().union(*(UNSANDBOXED_EFFECTS[name] for name in names))


def test_every_payload_has_a_control_or_a_reason() -> None:
    assert sorted(UNSANDBOXED_EFFECTS.keys() | NOT_CONTROLLED.keys()) == NAMES
    assert not UNSANDBOXED_EFFECTS.keys() & NOT_CONTROLLED.keys()
    assert sorted(name for names in CONTROL_RUNS for name in names) == sorted(UNSANDBOXED_EFFECTS)
    for names in CONTROL_RUNS:  # at most one killer of cudaforge per run, and then alone
        killers = [name for name in names if "cudaforge killed" in UNSANDBOXED_EFFECTS[name]]
        assert killers == [] or list(names) == killers[:1]


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_honest_kernel_is_correct_and_sees_only_allowed_variables_under_the_sandbox(
    mechanism: str, world: dict
) -> None:
    """The honest kernel with ENV_PROBE, secrets under allowed prefixes in cudaforge's environment: it is
    correct, so it saw none of them and every allowed variable (the unit test: test_sandbox_units.py).
    NVIDIA_, NCCL_, LC_ and CUDAFORGE_TEST_ pass the allow-list: only the secret-name denylist stops them."""
    _skip_unless(mechanism)
    kernel = world["tmp"] / "honest_env_probe.py"
    kernel.write_text(HONEST.read_text() + ENV_PROBE)
    kept = {"NVIDIA_VISIBLE_DEVICES": "void", "LC_ALL": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "0"}
    done = run_eval(kernel, mechanism, world, [], extra_env={**PREFIX_SECRETS, **kept})
    result = json.loads(done.stdout)
    report = re.findall(r"^ENV REPORT .*$", result["stderr_tail"], re.M)
    assert (result["status"], report) == ("correct", ["ENV REPORT leaked=[] missing=[]"]), result["messages"]
    assert done.returncode == 0 and result["sandbox"] == mechanism


# Appended to the honest kernel: the candidate reports which variables it sees and, should a secret be
# among them or an allowed variable missing, gives a wrong output (its own leaky ReLU), so the verdict
# itself depends on what reached it.
ENV_PROBE = """
import os

_SECRETS = ("NVIDIA_API_KEY", "NCCL_AUTH_TOKEN", "LC_SECRET", "CUDAFORGE_TEST_TOKEN")
_KEPT = {"NVIDIA_VISIBLE_DEVICES": "void", "LC_ALL": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "0"}
LEAKED = [name for name in _SECRETS if name in os.environ]
MISSING = [name for name, value in _KEPT.items() if os.environ.get(name) != value]
print(f"ENV REPORT leaked={LEAKED} missing={MISSING}", flush=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.leaky_relu_bug(x) if LEAKED or MISSING else ext.relu(x)
"""
PREFIX_SECRETS = {
    "NVIDIA_API_KEY": "nvapi-SANDBOXLEAK-0123456789",
    "NCCL_AUTH_TOKEN": "nccl-SANDBOXLEAK-0123456789",
    "LC_SECRET": "lc-SANDBOXLEAK-0123456789",
    "CUDAFORGE_TEST_TOKEN": "cf-SANDBOXLEAK-0123456789",
}


@pytest.mark.slow
def test_sandbox_off_warns_every_time(world: dict) -> None:
    for _ in range(2):
        done = run_eval(HONEST, "off", world, [])
        result = json.loads(done.stdout)
        assert result["status"] == "correct" and result["sandbox"] == "off"
        assert "sandbox is off" in done.stderr and any("sandbox is off" in m for m in result["messages"])


@pytest.mark.gpu
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_honest_cuda_kernel_is_correct_under_the_sandbox(mechanism: str, world: dict) -> None:
    _skip_unless(mechanism)
    done = run_eval(CUDA_HONEST, mechanism, world, [], device="cuda")
    result = json.loads(done.stdout)
    assert done.returncode == 0, (result["messages"], result["stderr_tail"])
    assert result["status"] == "correct" and result["sandbox"] == mechanism


@pytest.mark.slow
def test_flooding_output_is_capped_and_the_engine_reports(world: dict) -> None:
    """A candidate printing 1.5 GB: the log stays small, the result comes back."""
    _skip_unless("bwrap")
    kernel = world["tmp"] / "flood.py"
    flood = "import os\n_chunk = b'x' * (1 << 20) + b'\\n'\nfor _ in range(1500):\n    os.write(1, _chunk)\n"
    kernel.write_text(flood + HONEST.read_text())
    done = run_eval(kernel, "bwrap", world, refusing_rules(kernel.read_text()))
    result = json.loads(done.stdout)
    assert result["status"] == "correct"
    assert len(done.stdout) < 2_000_000


@pytest.mark.slow
def test_ordinary_user_runs_the_sandboxed_eval(ext_cache: Path) -> None:
    """The ssh-key escape as uid 65534 (nobody): bwrap must start its namespaces unprivileged, and the
    attempt must fail as it does for root. Its world lives in a /tmp folder nobody can traverse to."""
    _skip_unless("bwrap")
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to switch to an ordinary uid")
    user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    bwrap = find_bwrap()
    probe = subprocess.run(
        [
            *user,
            bwrap,
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            sys.executable,
            "-c",
            f"import torch, engine; open({str(REPO / 'README.md')!r}).read()",
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": python_path(), "PATH": os.environ["PATH"]},
        cwd="/",
    )
    if probe.returncode != 0:
        pytest.skip(
            f"uid 65534 cannot run this interpreter with torch and cudaforge ({sys.executable}, which may "
            f"live in a folder only root can enter): {probe.stderr.strip()[-300:]}"
        )
    base = Path(tempfile.mkdtemp(prefix="cudaforge-nobody-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        world = make_world(base, base / "cache")
        for path in (base, *base.rglob("*")):
            os.chown(path, 65534, 65534)
        (base / "cache").mkdir()
        os.chown(base / "cache", 65534, 65534)
        source = candidate_source("ssh_key", world, "0")
        kernel = base / "ssh_key.py"
        kernel.write_text(source)
        os.chown(kernel, 65534, 65534)
        done = run_eval(kernel, "bwrap", world, refusing_rules(source), user=user, cache=base / "cache")
        world["listener"].close()
        result = json.loads(done.stdout)
        assert done.returncode == 0, (result["messages"], result["stderr_tail"])
        assert result["status"] == "correct" and result["sandbox"] == "bwrap"
        assert "SANDBOXLEAK" not in done.stdout
        assert list(world["out"].iterdir()) == []
        assert (
            "ssh_key_leak" not in os.listdir(base / "cache")
            or "SANDBOXLEAK" not in (base / "cache" / "ssh_key_leak").read_text()
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


SHELL_ESCAPES = r"""
touch "$1/outside" 2>/dev/null
cat "$2/.ssh/id_rsa" > "$3/stolen" 2>/dev/null
env > "$3/env"
touch "$3/job_ok"
"""


def _others_may_enter(path: Path) -> bool:
    """Whether a user with no rights of owner or group can reach ``path``: o+x on it and every parent."""
    return all(os.stat(p).st_mode & 0o001 for p in (path, *path.parents))


def test_ordinary_user_bwrap_confines_a_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """As uid 65534, the sandbox's own command line (from ``prepare``) around a shell that tries to write
    outside, read the home's key and see the parent's keys: namespaces start unprivileged, all fail."""
    _skip_unless("bwrap")
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to switch to an ordinary uid")
    base = Path(tempfile.mkdtemp(prefix="cudaforge-nobody-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        home, out, job = base / "home", base / "out", base / "job"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "id_rsa").write_text(FAKE_SSH)
        out.mkdir()
        job.mkdir()
        for path in (base, *base.rglob("*")):
            os.chown(path, 65534, 65534)
        parent = {"PATH": "/usr/bin:/bin", "HOME": str(home), "OPENAI_API_KEY": FAKE_OPENAI}
        monkeypatch.setenv("HOME", str(home))  # as that user's own cudaforge would see it
        monkeypatch.setenv("CUDAFORGE_SESSIONS_DIR", str(base / "sessions"))
        monkeypatch.chdir(job)
        # ``prepare`` runs as root here; what uid 65534 may enter is what bwrap can bind for it (root's
        # pyenv is not), so the access check answers for that user, as it would in its own cudaforge.
        monkeypatch.setattr("engine.sandbox.bwrap.os.access", lambda path, mode: _others_may_enter(Path(path)))
        launch = prepare(
            "bwrap",
            ["/bin/sh", "-c", SHELL_ESCAPES, "sh", str(out), str(home), str(job)],
            job_dir=job,
            writable=[],
            parent_env=parent,
            hidden=[home],
        )
        for path in job.rglob("*"):
            os.chown(path, 65534, 65534)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *launch.argv],
            capture_output=True,
            text=True,
            env=launch.env,
            cwd=job,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert (job / "job_ok").exists()
        assert list(out.iterdir()) == []
        assert "SANDBOXLEAK" not in (job / "stolen").read_text()
        assert (
            FAKE_OPENAI not in (job / "env").read_text()
            and f"HOME={job / 'home'}" in (job / "env").read_text()
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
