"""The escape corpus (tests/fixtures/escape): each candidate tries one way out through the real
``cudaforge eval --device cpu``; afterwards the test checks that the attempt had no effect.

The static guard would refuse most of these files before they run; to test the SANDBOX, each run
relaxes exactly the static rules that refuse it (``--relax``, computed with ``check_source``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from engine.sandbox import available_mechanisms, prepare
from engine.sandbox.bwrap import find_bwrap
from tests.conftest import EXAMPLES, REPO, python_path

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
    }


def candidate_source(name: str, world: dict, mark: str, honest: Path = HONEST) -> str:
    payload = (ESCAPES / f"{name}.py").read_text()
    for key, value in {
        "@OUT@": world["out"],
        "@HOME@": world["home"],
        "@REPO@": REPO,
        "@CWD@": world["cwd"],
        "@CACHE@": world["cache"],
        "@SESSIONS@": world["sessions"],
        "@PORT@": world["listener"].port,
        "@ENGINE_PID@": os.getpid(),
        "@MARK@": mark,
    }.items():
        payload = payload.replace(key, str(value))
    return (
        f"try:\n    exec({payload!r})\nexcept BaseException:\n    pass\n\n{honest.read_text()}"
        if name != "stderr_crash"
        else payload + "\n" + honest.read_text()
    )


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
    }
    if os.environ.get("CUDAFORGE_BWRAP"):
        env["CUDAFORGE_BWRAP"] = os.environ["CUDAFORGE_BWRAP"]
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


def check_escape(name: str, mechanism: str, world: dict, device: str) -> None:
    _skip_unless(mechanism)
    if name == "daemon" and mechanism == "landlock":
        pytest.xfail("Landlock does not tie a setsid daemon to the run (bwrap's pid namespace does)")
    mark = f"{int(time.time() * 1000) % 100000 + 100000}.{os.getpid() % 1000}"
    source = candidate_source(name, world, mark, HONEST if device == "cpu" else CUDA_HONEST)
    kernel = world["tmp"] / f"{name}.py"
    kernel.write_text(source)
    done = run_eval(kernel, mechanism, world, refusing_rules(source, device), device=device)
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
    # no secret anywhere in what cudaforge printed
    for secret in (FAKE_OPENAI, FAKE_AWS, "SANDBOXLEAK"):
        assert secret not in done.stdout and secret not in done.stderr
    # nothing written outside, in the home, the repo, the cwd or a session; nothing leaked into the cache
    assert sorted(p.name for p in world["out"].iterdir()) == []
    assert sorted(p.name for p in world["cwd"].iterdir()) == []
    assert not (world["home"] / "system_call").exists() and not (world["home"] / "raw_write").exists()
    assert not (REPO / "raw_write").exists() and not (REPO / "mount_escape").exists()
    assert sorted(p.name for p in (world["sessions"] / "victim").iterdir()) == []
    for leak in ("api_key_leak", "ssh_key_leak"):
        path = world["cache"] / leak
        if path.exists():
            text = path.read_text()
            path.unlink()
            assert "SANDBOXLEAK" not in text and FAKE_OPENAI not in text
    assert world["listener"].connections == 0
    if name == "daemon":
        time.sleep(0.5)
        assert not _alive(mark), "the candidate's daemon outlived the evaluation"


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_honest_kernel_is_correct_under_the_sandbox(mechanism: str, world: dict) -> None:
    _skip_unless(mechanism)
    done = run_eval(HONEST, mechanism, world, [])
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["status"] == "correct" and result["sandbox"] == mechanism


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
