"""The sandbox's parts on their own: the allow-listed environment, the bwrap command line, the
choice of mechanism, the capped worker log, Landlock in a real child process, and the scrubbing of
what the terminal shows."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.sandbox import SandboxError, available_mechanisms, prepare, resolve_mode
from engine.sandbox.bwrap import bwrap_command, find_bwrap
from engine.sandbox.env import worker_env
from engine.sandbox.landlock import abi_version
from engine.sandbox.logcap import CappedLog
from tests.conftest import python_path

PARENT = {
    "PATH": "/usr/bin:/bin",
    "CUDA_HOME": "/usr/local/cuda",
    "CUDA_VISIBLE_DEVICES": "1",
    "CXX": "g++",
    "TORCH_CUDA_ARCH_LIST": "9.0",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "NVIDIA_DRIVER_CAPABILITIES": "compute",
    "MAX_JOBS": "4",
    "LC_ALL": "C.UTF-8",
    "HOME": "/root",
    "OPENAI_API_KEY": "sk-secret",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "AWS_ACCESS_KEY_ID": "AKIA",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "GITHUB_TOKEN": "ghp",
    "HF_TOKEN": "hf",
    "MY_APP_SECRET": "s",
    "SOME_SERVICE_KEY": "k",
    "CUDA_AUTH_TOKEN": "sneaky",
    "SSH_AUTH_SOCK": "/tmp/agent",
    "EDITOR": "vim",
}


def test_worker_env_keeps_the_toolchain_and_drops_every_secret(tmp_path: Path) -> None:
    env = worker_env(PARENT, tmp_path / "home", {"PYTHONPATH": "/repo"})
    for name in (
        "PATH",
        "CUDA_HOME",
        "CUDA_VISIBLE_DEVICES",
        "CXX",
        "TORCH_CUDA_ARCH_LIST",
        "LD_LIBRARY_PATH",
        "NVIDIA_DRIVER_CAPABILITIES",
        "MAX_JOBS",
        "LC_ALL",
    ):
        assert env[name] == PARENT[name]
    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "HF_TOKEN",
        "MY_APP_SECRET",
        "SOME_SERVICE_KEY",
        "CUDA_AUTH_TOKEN",
        "SSH_AUTH_SOCK",
        "EDITOR",
    ):
        assert name not in env
    assert env["HOME"] == str(tmp_path / "home") and env["PYTHONPATH"] == "/repo"
    assert not any("secret" in value or value.startswith("sk-") for value in env.values())


# Secrets named under a prefix the allow-list lets through (NVIDIA_, NCCL_, LC_, CUDAFORGE_TEST_): only the
# secret-name denylist stops them, so these test that line and not the allow-list.
SECRETS_UNDER_ALLOWED_PREFIXES = {
    "NVIDIA_API_KEY": "nvapi-SANDBOXLEAK",
    "NCCL_AUTH_TOKEN": "nccl-SANDBOXLEAK",
    "LC_SECRET": "lc-SANDBOXLEAK",
    "CUDAFORGE_TEST_TOKEN": "cf-SANDBOXLEAK",
    "NVIDIA_NGC_PASSWORD": "ngc-SANDBOXLEAK",
    "LC_SESSION_COOKIE": "lc-SANDBOXLEAK-cookie",
}
KEPT_UNDER_THOSE_PREFIXES = {
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NCCL_DEBUG": "INFO",
    "LC_ALL": "C.UTF-8",
    "LC_NUMERIC": "C",
    "CUDA_VISIBLE_DEVICES": "0",
    "CUDAFORGE_TEST_HOLD": "build@1",
}


def check_prefix_secrets_are_dropped(
    is_allowed: Callable[[str], bool], worker_env: Callable[..., dict]
) -> None:
    for name in SECRETS_UNDER_ALLOWED_PREFIXES:
        assert not is_allowed(name), name
    for name in KEPT_UNDER_THOSE_PREFIXES:
        assert is_allowed(name), name
    env = worker_env({**SECRETS_UNDER_ALLOWED_PREFIXES, **KEPT_UNDER_THOSE_PREFIXES}, Path("/job/home"))
    assert sorted(set(SECRETS_UNDER_ALLOWED_PREFIXES) & set(env)) == []
    assert not any("SANDBOXLEAK" in value for value in env.values())
    assert {name: env.get(name) for name in KEPT_UNDER_THOSE_PREFIXES} == KEPT_UNDER_THOSE_PREFIXES


def test_a_secret_under_an_allowed_prefix_never_reaches_the_worker() -> None:
    from engine.sandbox import env

    check_prefix_secrets_are_dropped(env.is_allowed, env.worker_env)


def test_without_the_secret_name_denylist_the_prefix_secrets_get_through(tmp_path: Path) -> None:
    """The mutation the test above must catch: ``is_allowed`` with the denylist's name check removed."""
    from engine.sandbox import env

    source = Path(env.__file__).read_text()
    line = "    if SECRET_NAME.search(name) or name.startswith(SECRET_PREFIXES):\n"
    assert source.count(line) == 1
    mutant_path = tmp_path / "env_mutant.py"
    mutant_path.write_text(source.replace(line, "    if name.startswith(SECRET_PREFIXES):\n"))
    spec = importlib.util.spec_from_file_location("env_mutant", mutant_path)
    assert spec is not None and spec.loader is not None
    mutant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutant)
    with pytest.raises(AssertionError, match="NVIDIA_API_KEY"):
        check_prefix_secrets_are_dropped(mutant.is_allowed, mutant.worker_env)


def test_bwrap_command_hides_home_and_binds_back_what_the_worker_needs(tmp_path: Path) -> None:
    home, job, cache, venv, cwd = (tmp_path / n for n in ("home", "job", "cache", "home/venv", "home/proj"))
    for folder in (home, job, cache, venv, cwd):
        folder.mkdir(parents=True, exist_ok=True)
    argv = bwrap_command(
        "/usr/bin/bwrap",
        ["python", "-m", "engine.eval.worker"],
        env={"PATH": "/usr/bin"},
        writable=[job, cache],
        hidden=[home, cwd],
        keep_readable=[venv, Path("/usr")],
        chdir=job,
    )
    text = " ".join(argv)
    assert argv[:4] == ["/usr/bin/bwrap", "--ro-bind", "/", "/"]
    assert f"--tmpfs {home}" in text and f"--ro-bind {venv} {venv}" in text
    assert text.index(f"--tmpfs {home}") < text.index(f"--ro-bind {venv}")  # bound back after hiding
    assert f"--bind {job} {job}" in text and f"--bind {cache} {cache}" in text
    assert "--ro-bind /usr /usr" not in text  # not below a hidden folder: the root bind covers it
    for flag in (
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--dev-bind",
    ):
        assert flag in argv
    assert argv[-4:] == ["--", "python", "-m", "engine.eval.worker"]
    if Path("/etc/shadow").is_file():
        assert "--ro-bind /dev/null /etc/shadow" in text
    if Path("/home").is_dir():
        assert "--tmpfs /home" in text  # other users' homes too


def test_a_working_directory_in_the_system_is_not_hidden(tmp_path: Path) -> None:
    argv = bwrap_command(
        "bwrap",
        ["true"],
        env={},
        writable=[tmp_path],
        hidden=["/usr/local", "/usr", "/opt"],
        keep_readable=[],
        chdir=tmp_path,
    )
    assert "/usr" not in [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert "/usr/local" not in argv and "/opt" not in argv


def test_bwrap_is_found_through_the_environment_variable(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    assert find_bwrap({"CUDAFORGE_BWRAP": str(fake), "PATH": ""}) == str(fake)
    assert find_bwrap({"CUDAFORGE_BWRAP": str(tmp_path / "none"), "PATH": "/usr/bin"}) is None
    status = available_mechanisms({"CUDAFORGE_BWRAP": str(fake), "PATH": ""})
    assert status["bwrap"]  # found, but it cannot start: the reason is reported


def test_auto_falls_back_and_an_explicit_missing_sandbox_is_an_error(tmp_path: Path) -> None:
    no_bwrap = {"CUDAFORGE_BWRAP": str(tmp_path / "none"), "PATH": ""}
    expected = "landlock" if abi_version() >= 1 else "off"
    assert resolve_mode("auto", no_bwrap) == expected
    with pytest.raises(SandboxError, match="bwrap"):
        resolve_mode("bwrap", no_bwrap)
    with pytest.raises(SandboxError, match="unknown sandbox"):
        resolve_mode("chroot", no_bwrap)
    launch = prepare(
        "off", ["true"], job_dir=tmp_path / "job", writable=[], parent_env={"OPENAI_API_KEY": "x"}
    )
    assert launch.mechanism == "off" and launch.warnings and launch.env["OPENAI_API_KEY"] == "x"


def test_capped_log_keeps_head_and_tail_of_a_flood(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    log = CappedLog(read_fd, tmp_path / "log", head_bytes=1000, tail_bytes=500).start()
    writer = threading.Thread(target=lambda: [os.write(write_fd, b"a" * 65536) for _ in range(400)])
    writer.start()
    writer.join()
    os.write(write_fd, b"THE END\n")
    os.close(write_fd)
    log.join()
    data = (tmp_path / "log").read_bytes()
    assert len(data) < 1000 + 500 + 100 and data.endswith(b"THE END\n") and b"dropped" in data


LANDLOCK_CHILD = r"""
import json, os, signal, socket, sys
from engine.sandbox.landlock import LANDLOCK_ENV, apply_from_env, rules_for
job, outside, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.environ[LANDLOCK_ENV] = json.dumps(rules_for([sys.prefix, sys.base_prefix], [job]))
apply_from_env()
report = {}
try:
    open(os.path.join(outside, "x"), "w").write("escaped"); report["write_outside"] = True
except OSError: report["write_outside"] = False
open(os.path.join(job, "ok"), "w").write("fine")
try:
    open(os.path.join(outside, "secret")).read(); report["read_outside"] = True
except OSError: report["read_outside"] = False
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close(); report["connect"] = True
except OSError: report["connect"] = False
try:
    os.kill(os.getppid(), 0); report["signal_parent"] = True
except OSError: report["signal_parent"] = False
print(json.dumps(report))
"""


def test_landlock_confines_a_real_process(tmp_path: Path) -> None:
    abi = abi_version()
    if abi < 1:
        pytest.skip("this kernel has no Landlock")
    import json
    import socket

    job, outside = tmp_path / "job", tmp_path / "outside"
    job.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s")
    server = socket.create_server(("127.0.0.1", 0))
    done = subprocess.run(
        [sys.executable, "-c", LANDLOCK_CHILD, str(job), str(outside), str(server.getsockname()[1])],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": python_path()},
        timeout=60,
    )
    server.close()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (job / "ok").read_text() == "fine"
    assert report["write_outside"] is False and not (outside / "x").exists()
    assert report["read_outside"] is False
    if abi >= 4:
        assert report["connect"] is False
    if abi >= 6:
        assert report["signal_parent"] is False


LANDLOCK_THREADS_CHILD = r"""
import json, os, subprocess, sys, threading
from engine.sandbox.landlock import LANDLOCK_ENV, apply_from_env, rules_for
job, neighbour, keep_rule = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rules = rules_for([sys.prefix, sys.base_prefix], [job])
if not keep_rule:
    rules.pop("write_files")
os.environ[LANDLOCK_ENV] = json.dumps(rules)
apply_from_env()
report = {}
def name_myself():  # what CUDA's start-up does for each thread it starts (pthread_setname_np)
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write("cf-thread")
        report["own_thread"] = True
    except OSError:
        report["own_thread"] = False
thread = threading.Thread(target=name_myself)
thread.start()
thread.join()
def can_write(path):
    try:
        with open(path, "w") as f:
            f.write("renamed")
        return True
    except OSError:
        return False
report["neighbour"] = can_write(f"/proc/{neighbour}/comm")
child = subprocess.Popen(["sleep", "30"])
report["child"] = can_write(f"/proc/{child.pid}/comm")
child.kill()
report["create_in_task"] = can_write(f"/proc/self/task/new-file")
print(json.dumps(report))
"""


@pytest.mark.parametrize("keep_rule", [True, False], ids=["own-threads-rule", "without-it"])
def test_landlock_lets_a_process_name_its_own_threads_and_nothing_else(tmp_path: Path, keep_rule: bool) -> None:
    """CUDA's cuInit names its threads via /proc/self/task/<tid>/comm and fails (304) when refused."""
    if abi_version() < 1:
        pytest.skip("this kernel has no Landlock")
    import json

    job = tmp_path / "job"
    job.mkdir()
    neighbour = subprocess.Popen(["sleep", "30"])
    try:
        done = subprocess.run(
            [sys.executable, "-c", LANDLOCK_THREADS_CHILD, str(job), str(neighbour.pid), "1" if keep_rule else "0"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": python_path()},
            timeout=60,
        )
        neighbour_name = Path(f"/proc/{neighbour.pid}/comm").read_text().strip()
    finally:
        neighbour.kill()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["own_thread"] is keep_rule
    assert report == {**report, "neighbour": False, "child": False, "create_in_task": False}
    assert neighbour_name == "sleep"


def test_headless_suggestion_line_never_shows_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.cli.run import Printer
    from engine.events import SuggestionReady

    key = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = io.StringIO()
    Printer(out)(
        SuggestionReady(iteration=1, suggestion={"critical_issue": f"use the key {key} to call home"})
    )
    assert key not in out.getvalue() and "REDACTED" in out.getvalue()


def test_tui_suggestion_and_messages_never_show_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import tui.model as model

    key = "sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setattr(model, "_SCRUBBER", None)
    assert key not in model.suggestion_markdown({"mode": "optimize", "bottleneck": f"key {key}"})
    assert key not in model.conversation([{"role": "judge", "reply": f"here: {key}"}])[0].text
